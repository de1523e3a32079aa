"""Log and root tables are forecast on the grid their noisy transformed value is rounded to.

`TransformationMechanism.release_table` publishes ``g(ṽ)`` with ``ṽ = round_grid(f(q + a) +
σZ)``: the noisy TRANSFORMED value is rounded to the table's grid (in transformed space; default
the largest power of ten <= 0.02·σ) before the estimator, and nothing is rounded after the
back-transform. The forecast ignored that grid (review fc64): a root table (k = 2, σ = 1) on a
grid of 0.1 was forecast 50.0% negative at a total of 0, where 48.1% of its cells are.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from tabdp.mechanisms import LogTransform, RootTransform
from tabdp.planning import _table_law, flag_curve, forecast

N = 200_000
#: 4 sd of a share measured on N cells, plus the 256-node quadrature's error (at most 1/256
#: per end of the set of transformed values the event holds on: two ends for the mean
#: estimator of a root, one for the median's).
MC = 4 * (0.25 / N) ** 0.5


def _measured(mech: object, total: float, grid: float) -> tuple[float, float]:
    r = mech.release_table(np.full(N, total), rng=11, level=0.9, grid=grid)  # type: ignore[attr-defined]
    with np.errstate(divide="ignore"):
        cv = np.where(r.estimate != 0, r.sd / np.abs(r.estimate), np.inf)
    return float(np.mean(r.estimate < 0)), float(np.mean(cv >= 0.3))


@pytest.mark.parametrize(("mech", "total", "ends", "old"), [
    # median estimator: negative when ṽ < f(a) = 0; rounded, when f(q + a) + σZ < -0.05
    (RootTransform(k=2, sigma=1.0, estimator="median"), 0.0, 1, 0.5),
    (LogTransform(sigma=1.0, offset=1.0, estimator="median"), 0.0, 1, 0.5),
    # mean estimator ṽ² − σ² − a: negative when |ṽ| < 1 (two ends)
    (RootTransform(k=2, sigma=1.0), 0.5, 2, 0.5703125),
])
def test_transformation_forecast_rounds_the_transformed_value(mech: object, total: float,
                                                              ends: int, old: float) -> None:
    grid = 0.1                                        # sigma / 10: the coarsest a spec allows
    neg, flagged = _measured(mech, total, grid)
    tol = MC + ends / 256
    f = forecast(mech, [total], grid=grid)            # type: ignore[arg-type]
    assert f.negative_share == pytest.approx(neg, abs=tol)
    assert f.flagged_share == pytest.approx(flagged, abs=MC + 2 / 256)
    (row,) = flag_curve(mech, [total], grid=grid)     # type: ignore[arg-type]
    assert row["p_negative"] == pytest.approx(neg, abs=tol)
    # the unrounded law (the old forecast) is off by more than the tolerance
    assert abs(old - neg) > tol


def test_a_spec_log_or_root_table_is_forecast_on_its_transformed_grid() -> None:
    mech = RootTransform(k=2, sigma=1.0, estimator="median")
    t = types.SimpleNamespace(kind="sum", grid=0.1, mechanism=mech, measures=("x",))
    assert _table_law(t) == (mech, 0.1)
    # no grid: the mechanism's default grid in transformed space (0.01 for sigma = 1)
    t0 = types.SimpleNamespace(kind="sum", grid=None, mechanism=mech, measures=("x",))
    assert _table_law(t0) == (mech, 0.01)
    tc = types.SimpleNamespace(kind="count", grid=None, mechanism=mech, measures=())
    assert _table_law(tc) == (mech, 0.01)
