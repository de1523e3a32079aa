"""Behaviour that depends on the law is a method of the mechanism: sums (rollups) and counts."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tabdp.mechanisms as mech
from tabdp.exceptions import InvalidParameterError, TabdpError
from tabdp.frame._engine import count_mechanism
from tabdp.mechanisms import LawOfSums, Mechanism
from tabdp.release.rollup import sum_error_law


class _Toy(Mechanism):
    """A mechanism without a law of sums or an integer counterpart."""

    def rho(self, sensitivity: Any) -> np.ndarray:
        return np.zeros_like(np.asarray(sensitivity, dtype=float))

    def epsilon(self, sensitivity: Any) -> np.ndarray:
        return np.zeros_like(np.asarray(sensitivity, dtype=float))

    def release_table(self, values: Any, rng: Any = None, level: float = 0.9,
                      grid: Any = None) -> Any:
        raise NotImplementedError

    def sd_at(self, values: Any) -> np.ndarray:
        return np.zeros(1)

    def params(self) -> dict[str, Any]:
        return {}


@pytest.mark.parametrize(("m", "kind", "scale"), [
    (mech.Gaussian(sigma=2.0), "gaussian", 2.0),
    (mech.UnitSplitting(threshold=5.0, sigma=3.0), "gaussian", 3.0),
    (mech.Subbotin(r=2.0, scale=1.5), "gaussian", 1.5),
    (mech.Laplace(scale=2.0), "laplace", 2.0),
    (mech.Subbotin(r=1.0, scale=0.5), "laplace", 0.5),
    (mech.GeneralizedGaussian(sigma=4.0, p=1.0), "laplace", 4.0),
    (mech.Logistic(scale=3.0), "logistic", 3.0),
])
def test_sum_law_kinds(m: Mechanism, kind: str, scale: float) -> None:
    """Each mechanism names the exact method for the law of its sums."""
    law = m.sum_law()
    assert (law.kind, law.scale) == (kind, scale) and law.noise is m.noise  # type: ignore[attr-defined]


def test_other_sum_laws() -> None:
    """Stable, integer and numerical-convolution laws; the rollup's method text follows."""
    st = mech.SymmetricStable(alpha=1.5, gamma=2.0).sum_law()
    assert (st.kind, st.alpha) == ("stable", 1.5)
    assert mech.DiscreteGaussian(sigma=2.0).sum_law().kind == "integer"
    assert mech.GeneralizedGaussian(sigma=1.0, p=0.5).sum_law() == LawOfSums(
        "lattice", mech.GeneralizedGaussian(sigma=1.0, p=0.5).noise)
    assert sum_error_law(mech.Gaussian(sigma=2.0), 1)[1] == "exact: Gaussian"


def test_mechanisms_without_a_law_of_sums_raise_a_tabdp_error() -> None:
    """The base class and transformation mechanisms raise a clear TabdpError."""
    with pytest.raises(TabdpError, match=r"must be an additive tabdp mechanism.*_Toy"):
        _Toy().sum_law()
    with pytest.raises(InvalidParameterError, match="LogTransform is a transformation"):
        mech.LogTransform(sigma=0.5, offset=1.0).sum_law()
    with pytest.raises(InvalidParameterError, match=r"^sum_error_law: LogTransform is a trans"):
        sum_error_law(mech.LogTransform(sigma=0.5, offset=1.0), 2)


def test_for_counts() -> None:
    """Gaussian and Laplace have exact integer counterparts; others are kept as given."""
    assert mech.Gaussian(3.0).for_counts() == mech.DiscreteGaussian(3.0)
    assert mech.Laplace(2.0).for_counts() == mech.DiscreteLaplace(2.0)
    toy, lg = _Toy(), mech.LogTransform(sigma=0.5, offset=1.0)
    assert toy.for_counts() is toy and lg.for_counts() is lg
    assert count_mechanism(mech.Laplace(2.0), grid={"count": 5}) == mech.DiscreteLaplace(2.0)
    assert count_mechanism(mech.Laplace(2.0), grid=2.5) == mech.Laplace(2.0)
    assert count_mechanism(None) == mech.DiscreteGaussian(2.0)
