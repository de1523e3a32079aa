"""The unit-mode charge shortcuts equal the plain computations to the last bit."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from tabdp import mechanisms as mech
from tabdp.frame._engine import _abs_float_up, _Policy


def _abs_float_up_reference(values: pl.Series, bits: int) -> np.ndarray:
    """The former two-pass form: the rounding test on the 128-bit integers."""
    a = values.abs()
    f = a.cast(pl.Float64).to_numpy() * (2.0 ** -bits)
    big = (a >= (1 << 53)).to_numpy()
    return np.where(big, np.nextafter(f, np.inf), f)


_EDGES = [0, 1, -1, 2**52, 2**53 - 1, -(2**53 - 1), 2**53, -(2**53), 2**53 + 1, -(2**53 + 1),
          2**53 + 2, 2**54 - 1, 2**63 - 1, -(2**63), 2**64 - 1, 2**64 + 1, 2**100 + 1,
          -(2**126), 2**126 + 12345]


@pytest.mark.parametrize("bits", [0, 1, 24, 60, 1100])
def test_abs_float_up_matches_two_pass_form(bits: int) -> None:
    rng = np.random.default_rng(7)
    rand = [int(x) << int(s) for x, s in zip(rng.integers(-(2**62), 2**62, 2000),
                                            rng.integers(0, 60, 2000), strict=True)]
    s = pl.Series([*_EDGES, *rand], dtype=pl.Int128)
    new, old = _abs_float_up(s, bits), _abs_float_up_reference(s, bits)
    assert new.tobytes() == old.tobytes()
    # never below the exact magnitude (subnormal results at bits=1100 are rounded up too)
    assert new[_EDGES.index(2**53 + 1)] == np.nextafter(float(2**53) * 2.0**-bits, np.inf)


_DELTAS = np.array([0.0, 5e-324, 2.2e-308, 1e-300, 2.0**-24, 0.5, 1.0, 3.0, 2.0**53 - 1,
                    2.0**53, 2.0**53 + 2, 1e200, 1.7976931348623157e308, np.inf, np.nan])


@pytest.mark.parametrize("m", [mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0),
                               mech.ExpPolyLog(sigma=3.0, a=3.0, d=1.0, p=2.0),
                               mech.Laplace(scale=2.0), mech.Gaussian(sigma=2.0)])
def test_policy_equals_rho_and_epsilon(m: mech.Mechanism) -> None:
    with np.errstate(all="ignore"):
        got = _Policy(m, ["x"])(_DELTAS)
        want = (np.asarray(m.rho(_DELTAS), dtype=np.float64),
                np.asarray(m.epsilon(_DELTAS), dtype=np.float64))
    assert len(got) == 2
    for g, w in zip(got, want, strict=True):
        assert g.tobytes() == w.tobytes()


def test_rho_shortcut_only_for_inherited_rho() -> None:
    assert _Policy(mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0), ["x"]).rho_from_epsilon
    assert not _Policy(mech.Gaussian(sigma=1.0), ["x"]).rho_from_epsilon
