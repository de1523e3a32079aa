"""Review r36 (h37a): the uncertainty a consistent table publishes describes what it states.

* ``nonnegative``: ``lower``/``upper`` are the unbiased consistent estimate's interval (the
  table without the option), ends raised to 0 where negative, not the clamped estimate ∓ moe.
* a grid: ``sd`` is the published estimate's, the estimator's variance plus that of the
  stochastic rounding of the finest cells (as the margin already was).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tabdp.exceptions import InvalidParameterError
from tabdp.hierarchy import consistent, consistent_from_release, expected_sd
from tabdp.mechanisms import DiscreteGaussian, Gaussian
from tabdp.release import plan_summary
from tabdp.release.publish import publish
from tabdp.release.runner import run_release
from tabdp.release.spec import Publication, parse_spec
from tests.hierarchy.test_spec_consistent import _spec

N = 20


def _clamp_case() -> dict[tuple[str, ...], pl.DataFrame]:
    """20 cells of true value 1, released at 1 ∓ 3 in turn; the nation released at 20.

    The GLS estimate is the released values (they already add up to the nation); clamping
    the ten cells at -2 to 0 puts the nation at 40, 20 above its unbiased value.
    """
    cells = pl.DataFrame({"c": [f"c{i:02d}" for i in range(N)],
                          "x": [4.0 if i % 2 else -2.0 for i in range(N)]})
    return {("c",): cells, (): pl.DataFrame({"x": [20.0]})}


def test_nonnegative_interval_is_the_unbiased_estimates() -> None:
    rel = _clamp_case()
    kw = {"measures": ["x"], "hierarchies": {}, "mechanisms": Gaussian(sigma=1.0)}
    nn = consistent(rel, nonnegative=True, **kw)
    ub = consistent(rel, **kw)
    nat, nat_ub = nn[()], ub[()]
    assert nat["x"][0] == pytest.approx(40.0)         # the clamped (published) estimate
    assert nat_ub["x"][0] == pytest.approx(20.0)      # the unbiased one
    # sd, moe and the interval are the unbiased estimate's: the truth (20) is covered
    for c in ("x_sd", "x_moe", "x_lower", "x_upper"):
        assert nat[c][0] == pytest.approx(nat_ub[c][0]), c
    assert nat["x_lower"][0] <= 20.0 <= nat["x_upper"][0]
    assert nat["x_upper"][0] < 25.0  # the old interval was 40 ∓ 1.6
    # the finest level: the unbiased interval with negative ends raised to 0
    fin, fin_ub = nn[("c",)], ub[("c",)]
    assert (fin["x"] >= 0).all()
    np.testing.assert_allclose(fin["x_lower"], np.maximum(fin_ub["x_lower"], 0.0))
    np.testing.assert_allclose(fin["x_upper"], np.maximum(fin_ub["x_upper"], 0.0))
    assert (fin["x_lower"] >= 0).all()


# origin: review r38 (the cv, C and S of a nonnegative table came from the clamped estimate:
# an empty state published at about 50 sd of bias had cv 0.018 and counted as publishable)
def test_nonnegative_reliability_is_judged_on_the_unbiased_estimate() -> None:
    """cv, C and S of a flag-B cell are its unbiased estimate's, like its sd and interval."""
    from tabdp.release.publish import publish
    from tabdp.release.spec import Publication

    rel = _clamp_case()
    kw = {"measures": ["x"], "hierarchies": {}, "mechanisms": Gaussian(sigma=1.0)}
    nn = consistent(rel, nonnegative=True, **kw)
    ub = consistent(rel, **kw)
    for lv in ((), ("c",)):
        keys = list(lv)
        got = publish(nn[lv], keys=keys, measures=["x"], rules=Publication(cv_flag=0.05))
        want = publish(ub[lv], keys=keys, measures=["x"], rules=Publication(cv_flag=0.05))
        assert got["cv"].to_list() == pytest.approx(want["cv"].to_list())
        # C from the unbiased cv (N stays the published estimate's: never negative here)
        assert got["flag"].to_list() == [f.replace("N", "") for f in want["flag"].to_list()]
        assert got["estimate"].to_list() == pytest.approx(nn[lv]["x"].to_list())  # clamped
    # the nation: sd / 20 (unbiased), not sd / 40 (clamped)
    nat = publish(nn[()], keys=[], measures=["x"], rules=Publication(cv_flag=0.05))
    assert nat["cv"][0] == pytest.approx(nn[()]["x_sd"][0] / 20.0)
    # withheld on the unbiased cv: a threshold between the two cvs withholds the nation
    sd = nn[()]["x_sd"][0]
    mid = (sd / 20.0 + sd / 40.0) / 2
    held = publish(nn[()], keys=[], measures=["x"], rules=Publication(suppress_cv=mid))
    assert held["flag"][0] == "S" and held["estimate"][0] is None


def _seeded(seed: int) -> tuple[dict[tuple[str, ...], pl.DataFrame], pl.DataFrame]:
    """Small true counts (most cells 0) released with whole-number noise of sd about 2."""
    rng = np.random.default_rng(seed)
    geo = pl.DataFrame({"state": [f"s{i // 10}" for i in range(40)],
                        "county": [f"k{i:02d}" for i in range(40)]})
    truth = geo.join(pl.DataFrame({"ind": ["a", "b", "c"]}), how="cross").with_columns(
        x=pl.Series(rng.poisson(0.3, 120).astype(np.float64)))
    rel = {}
    for lv in (("county", "ind"), ("state",), ()):
        t = truth.group_by(list(lv), maintain_order=True).agg(pl.col("x").sum()) if lv else \
            truth.select(pl.col("x").sum())
        # whole-number noise of sd about 2 from numpy alone (reproducible in any test order)
        rel[lv] = t.with_columns(pl.col("x") + np.rint(rng.normal(0.0, 2.0, t.height)))
    return rel, truth


def test_nonnegative_integer_interval_covers_a_seeded_truth() -> None:
    """Seeded: the nation's true total lies in the published interval (it did not before)."""
    rel, truth = _seeded(1)
    geo = truth.select("state", "county").unique()
    kw = {"measures": ["x"], "hierarchies": {"geo": geo},
          "mechanisms": DiscreteGaussian(sigma=2.0), "outputs": [("county", "ind"), ("state",),
                                                                  ()], "integer": True}
    nn = consistent(rel, nonnegative=True, **kw)
    ub = consistent(rel, **kw)
    total = truth["x"].sum()
    nat = nn[()]
    assert nat["x"][0] - nat["x_moe"][0] > total      # the clamped estimate is far above
    assert nat["x_lower"][0] <= total <= nat["x_upper"][0]
    # exactly the interval of the same table without nonnegative (whole-number ends)
    for lv in kw["outputs"]:
        a, b = nn[lv], ub[lv]
        for c in ("x_sd", "x_moe"):
            np.testing.assert_array_equal(a[c], b[c])
        np.testing.assert_array_equal(a["x_lower"], np.maximum(b["x_lower"], 0.0))
        np.testing.assert_array_equal(a["x_upper"], np.maximum(b["x_upper"], 0.0))


def test_grid_sd_includes_the_rounding_variance() -> None:
    """sd² = the estimator's variance + (rounding ranges below) · grid²/6; cv uses it.

    The finest cells are rounded systematically down each industry's column of counties
    (`_block_round`; industry has the fewer codes): a cell sums one range per industry below it.
    """
    rel, truth = _seeded(3)
    geo = truth.select("state", "county").unique()
    outs = [("county", "ind"), ("state", "ind"), ("state",), ()]
    kw = {"measures": ["x"], "hierarchies": {"geo": geo},
          "mechanisms": DiscreteGaussian(sigma=2.0), "outputs": outs}
    plain = consistent(rel, **kw)               # no grid: the estimator's sd
    for g in (1.0, 5.0):
        gridded = consistent(rel, grid=g, **kw)
        for lv in outs:
            per = truth.group_by(list(lv)).agg(pl.col("ind").n_unique().alias("ranges")) \
                if lv else None
            ranges = gridded[lv].join(per, on=list(lv), how="left", maintain_order="left")[
                "ranges"] if per is not None else pl.Series([truth["ind"].n_unique()])
            want = np.sqrt(plain[lv]["x_sd"].to_numpy() ** 2 + ranges.to_numpy() * g * g / 6)
            np.testing.assert_allclose(gridded[lv]["x_sd"].to_numpy(), want, rtol=1e-12)
    nat = consistent(rel, grid=1.0, **kw)[()]
    assert nat["x_sd"][0] > plain[()]["x_sd"][0] * 1.05
    pub = publish(nat, keys=[], measures=["x"], rules=Publication(cv_flag=0.3), grid={"x": 1.0})
    assert pub["sd"][0] == nat["x_sd"][0]
    assert pub["cv"][0] == pytest.approx(nat["x_sd"][0] / abs(nat["x"][0]))


@pytest.mark.slow  # CI only: one run (3-6 s)
def test_consistent_from_release_refuses_a_clamped_consistent_run(tmp_path: Path) -> None:
    res = run_release(parse_spec(_spec(tmp_path, nonnegative=True), tmp_path), test_seed=True)
    with pytest.raises(InvalidParameterError, match="nonnegative = true"):
        consistent_from_release(res.public)


def test_expected_sd_on_a_grid_is_the_published_sd() -> None:
    """The plan's sd (``expected_sd`` with the grid) is the sd that ``consistent`` publishes."""
    rel, truth = _seeded(5)
    geo = truth.select("state", "county").unique()
    outs = [("county", "ind"), ("state", "ind"), ("state",), ()]
    mech = DiscreteGaussian(sigma=2.0)
    pub = consistent(rel, measures=["x"], hierarchies={"geo": geo}, mechanisms=mech,
                     outputs=outs, grid=1.0)
    plan = expected_sd(truth.select("county", "ind"), list(rel), hierarchies={"geo": geo},
                       mechanisms=mech, outputs=outs, grid=1.0)
    for lv in outs:
        got = pub[lv].join(plan[lv], on=list(lv), maintain_order="left") if lv else \
            pl.concat([pub[lv], plan[lv]], how="horizontal")
        np.testing.assert_allclose(got["x_sd"], got["sd"], rtol=1e-12)


def test_plan_summary_sd_includes_the_rounding(tmp_path: Path) -> None:
    def nat_sd(grid: float) -> tuple[float, int]:
        spec = parse_spec(_spec(tmp_path, grid=grid), tmp_path)
        plan = plan_summary(spec)
        rows = plan["tables"][0]["consistent"]["expected_sd"]["count"]
        # the finest cells are rounded down each sector's column of counties (sectors are
        # fewer): the nation sums one rounding range per sector
        return ({r["level"]: r["sd_median"] for r in rows}["national"],
                len(spec.domains["naics2"]))

    # grids at most a tenth of the noise's sd (3): coarser ones are refused
    s1, n = nat_sd(0.1)
    s2, _ = nat_sd(0.3)
    assert s2 ** 2 - s1 ** 2 == pytest.approx(n * (0.3**2 - 0.1**2) / 6.0, rel=1e-6)


def test_rounding_keeps_a_measured_level_at_least_as_good_as_its_direct_release() -> None:
    """docs/hierarchy.md, "Rounding and its variance": the documented example.

    30 counties at sd 2 under a state released at sd 3: the GLS state (no rounding) has sd
    1/sqrt(1/9 + 1/120) = 2.89 < 3. With integer=True the 30 counties are rounded
    systematically in one block, so the state's rounding error is off by less than one and
    adds 1/6 on average: 2.92 < 3 (independent rounding of the counties added 30/6: 3.66).
    """
    n = 30
    counties = [f"c{i:02d}" for i in range(n)]
    geo = pl.DataFrame({"state": ["X"] * n, "county": counties})
    rel = {("county",): pl.DataFrame({"county": counties, "n": [float(i) for i in range(n)]}),
           ("state",): pl.DataFrame({"state": ["X"], "n": [440.0]})}
    mechs = {("county",): DiscreteGaussian(2.0), ("state",): DiscreteGaussian(3.0)}
    sd, est = {}, {}
    for integer in (False, True):
        out = consistent(rel, measures=["n"], hierarchies={"geo": geo}, mechanisms=mechs,
                         integer=integer)
        sd[integer] = out[("state",)]["n_sd"][0]
        est[integer] = (out[("state",)]["n"][0], out[("county",)]["n"].sum())
    gls = 1.0 / np.sqrt(1.0 / 9.0 + 1.0 / (n * 4.0))
    assert sd[False] == pytest.approx(gls, rel=1e-9) and sd[False] < 3.0
    assert sd[True] == pytest.approx(np.sqrt(gls**2 + 1.0 / 6.0), rel=1e-9)
    assert round(sd[False], 2) == 2.89 and round(sd[True], 2) == 2.92 and sd[True] < 3.0
    # the rounded state is its counties' sum, within one of the unrounded estimate
    assert est[True][0] == est[True][1] and abs(est[True][0] - est[False][0]) < 1.0