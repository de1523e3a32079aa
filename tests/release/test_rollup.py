"""Rollups of released tables (tabdp.release.rollup): laws of sums, propagation, simulation.

Statistical checks use fixed seeds and reject at p <= 1e-6 (a false alarm on correct code is a
one-in-a-million event for whatever seed is chosen); every simulation also shows power: the same
draws must *reject* a propagated sd or margin of error that is 30% off.
"""

from __future__ import annotations

import math
import sys
import warnings

import mpmath
import numpy as np
import polars as pl
import pytest
from scipy import stats
from scipy.optimize import brentq
from scipy.special import ndtri

from tabdp import noise as N
from tabdp.exceptions import InvalidParameterError
from tabdp.mechanisms import (
    DiscreteGaussian,
    DiscreteLaplace,
    ExpPolyLog,
    Gaussian,
    GeneralizedGaussian,
    Laplace,
    Logistic,
    LogTransform,
    RootTransform,
    Subbotin,
    SymmetricStable,
    UnitSplitting,
    VectorSubbotin,
)
from tabdp.release.rollup import (
    METHOD_CF,
    METHOD_GAUSSIAN,
    METHOD_LATTICE,
    METHOD_NORMAL,
    METHOD_NUMERICAL,
    METHOD_STABLE,
    _CFLaw,
    _IntegerLaw,
    _LatticeLaw,
    rollup,
    sum_error_law,
    sum_error_method,
)

P_REJECT = 1e-6
Z_REJECT = float(ndtri(1.0 - P_REJECT / 2.0))  # two-sided z at p = 1e-6 (4.89)
LEVEL = 0.9
Z90 = float(ndtri(0.95))


# ----------------------------------------------------------------------------------------------
# exact laws
# ----------------------------------------------------------------------------------------------
def test_gaussian_formula_and_methods() -> None:
    ns = np.array([0, 1, 2, 7, 90_000])
    for mech in (Gaussian(sigma=3.0), UnitSplitting(threshold=5.0, sigma=3.0),
                 Subbotin(r=2.0, scale=3.0)):
        moe, how = sum_error_law(mech, ns, LEVEL)
        assert how == METHOD_GAUSSIAN
        np.testing.assert_allclose(moe, Z90 * 3.0 * np.sqrt(ns), rtol=1e-14)
    moe, _ = sum_error_law(Gaussian(sigma=1.0), [[4, 9], [16, 0]], 0.5)
    assert moe.shape == (2, 2)
    np.testing.assert_allclose(moe, ndtri(0.75) * np.sqrt([[4, 9], [16, 0]]), rtol=1e-14)


@pytest.mark.parametrize("alpha", [1.0, 1.5, 2.0])
def test_stable_matches_moe_of_sum(alpha: float) -> None:
    mech = SymmetricStable(alpha=alpha, gamma=2.0)
    for level in (0.5, 0.9):
        moe, how = sum_error_law(mech, [1, 2, 7, 100], level)
        assert how == METHOD_STABLE
        ref = [mech.moe_of_sum(n, level) for n in (1, 2, 7, 100)]
        np.testing.assert_allclose(moe, ref, rtol=1e-10)
    if alpha == 1.0:  # Cauchy: scales add, moe = n·γ·tan(π·level/2)
        moe, _ = sum_error_law(mech, [3], 0.5)
        assert moe[0] == pytest.approx(3 * 2.0 * math.tan(math.pi / 4), rel=1e-12)


ADDITIVE = [
    Gaussian(sigma=2.0),
    UnitSplitting(threshold=3.0, sigma=2.0),
    Laplace(scale=1.5),
    Logistic(scale=0.7),
    GeneralizedGaussian(sigma=1.0, p=0.5),
    GeneralizedGaussian(sigma=2.0, p=1.0),
    ExpPolyLog(sigma=1.0, a=1.0, d=4.0),
    ExpPolyLog(sigma=0.5, a=math.e, d=1.0, p=2.0),
    Subbotin(r=1.5, scale=1.0, delta=1e-6),
    Subbotin(r=1.0, scale=2.0),
    SymmetricStable(alpha=1.5, gamma=1.0),
]


@pytest.mark.parametrize("mech", ADDITIVE, ids=lambda m: repr(m))
def test_one_cell_is_the_mechanisms_own_margin(mech: object) -> None:
    # n = 1 reproduces the mechanism's exact noise quantile: its moe_at minus the half grid step
    # (the law ignores grid rounding), and the moe of an actual release likewise
    for level in (0.5, 0.9, 0.99):
        moe, _ = sum_error_law(mech, 1, level)
        g = mech.default_grid()  # type: ignore[attr-defined]
        own = float(mech.moe_at([0.0], level)[0]) - 0.5 * g  # type: ignore[attr-defined]
        assert float(moe) == pytest.approx(own, rel=1e-12, abs=1e-12 * g)
        assert float(moe) == mech.noise.interval_halfwidth(level)  # type: ignore[attr-defined]
    rel = mech.release_table([10.0, 20.0], rng=0, level=0.9)  # type: ignore[attr-defined]
    assert rel.moe[0] - 0.5 * float(rel.grid) == pytest.approx(float(sum_error_law(mech, 1)[0]),
                                                              rel=1e-12)


@pytest.mark.parametrize("mech", [DiscreteGaussian(sigma=0.7), DiscreteGaussian(sigma=3.0),
                                  DiscreteGaussian(sigma=40.0), DiscreteLaplace(scale=0.5),
                                  DiscreteLaplace(scale=6.0)], ids=repr)
def test_discrete_one_cell_and_engine(mech: object) -> None:
    law = _IntegerLaw(mech.noise)  # type: ignore[attr-defined]
    for level in (0.5, 0.9, 0.99):
        own = float(mech.moe_at([0.0], level)[0])  # type: ignore[attr-defined]
        moe, how = sum_error_law(mech, 1, level)
        assert how == METHOD_LATTICE
        assert float(moe) == own
        # the n-fold engine itself reproduces the mechanism's integer margin at n = 1
        assert law.moe(np.array([1]), level, exact_one=False)[0] == own
    rel = mech.release_table([3.0], rng=0, level=0.9)  # type: ignore[attr-defined]
    assert rel.moe[0] == float(sum_error_law(mech, 1, 0.9)[0])


def _brute_pmf(noise: object, n: int) -> tuple[np.ndarray, int]:
    half = int(40 * max(noise.std(), 1.0)) + 5  # type: ignore[attr-defined]  # tail < 1e-20
    k = np.arange(-half, half + 1)
    p = noise.pmf(k)  # type: ignore[attr-defined]
    out = p
    for _ in range(n - 1):
        out = np.convolve(out, p)
    return out, n * half


@pytest.mark.parametrize("noise", [N.DiscreteLaplaceNoise(1.0), N.DiscreteLaplaceNoise(3.5),
                                   N.DiscreteGaussianNoise(1.0), N.DiscreteGaussianNoise(4.0)],
                         ids=repr)
def test_discrete_nfold_matches_brute_force(noise: object) -> None:
    law = _IntegerLaw(noise)  # type: ignore[arg-type]
    for n in (2, 3, 6):
        pmf, off = _brute_pmf(noise, n)
        cum = np.cumsum(pmf)
        hs = np.arange(0, 25)
        brute = np.array([cum[off + h] - (cum[off - h - 1] if off - h - 1 >= 0 else 0.0)
                          for h in hs])
        np.testing.assert_allclose(law.coverage(n, hs), brute, atol=1e-12)
        for level in (0.5, 0.9, 0.95):
            want = int(np.argmax(brute >= level))
            assert law.moe(np.array([n]), level)[0] == want


def _laplace_two_moe(b: float, level: float) -> float:
    # S = Z1 + Z2, Z ~ Laplace(b): P(|S| > x) = e^{-x/b} (1 + x/(2b))
    return brentq(lambda x: math.exp(-x / b) * (1 + x / (2 * b)) - (1 - level), 0.0, 200 * b,
                  xtol=1e-15, rtol=1e-15)


def _laplace_n_moe(n: int, level: float) -> float:
    """Exact n-fold Laplace(1) margin from the closed-form tail (sum of incomplete gammas)."""
    with mpmath.workdps(40):
        cs = [mpmath.factorial(n - 1 + k) / (mpmath.factorial(k) * mpmath.factorial(n - 1 - k)
              * mpmath.factorial(n - 1) * mpmath.mpf(2) ** (n + k)) for k in range(n)]

        def tail(x: object) -> object:
            return 2 * sum(c * mpmath.gammainc(n - k, x) for k, c in enumerate(cs)) - (1 - level)

        return float(mpmath.findroot(tail, 1.645 * math.sqrt(2 * n)))


def test_laplace_closed_forms() -> None:
    for b in (0.3, 1.0, 250.0):
        for level in (0.5, 0.9, 0.99):
            moe, how = sum_error_law(Laplace(scale=b), 2, level)
            assert how == METHOD_CF
            assert float(moe) == pytest.approx(_laplace_two_moe(b, level), rel=1e-12)
    # GeneralizedGaussian p = 1 and Subbotin r = 1 are Laplace laws
    assert sum_error_law(GeneralizedGaussian(sigma=1.0, p=1.0), 2)[1] == METHOD_CF
    assert float(sum_error_law(Subbotin(r=1.0, scale=1.0), 2)[0]) == pytest.approx(
        _laplace_two_moe(1.0, 0.9), rel=1e-12)
    ns = [3, 10, 40]
    ref = np.array([_laplace_n_moe(n, 0.9) for n in ns])
    np.testing.assert_allclose(sum_error_law(Laplace(scale=1.0), ns)[0], ref, rtol=1e-12)
    # the numerical (lattice) engine on the same law: measured error ~1e-8
    lat = _LatticeLaw(N.Laplace(1.0)).moe(np.array([2] + ns), 0.9)
    np.testing.assert_allclose(lat, np.r_[_laplace_two_moe(1.0, 0.9), ref], rtol=1e-7)


def test_numerical_engine_against_closed_forms() -> None:
    ns = np.array([1, 2, 3, 10, 1000, 90_000])
    # Gaussian noise through the generic lattice engine (n = 1 included): exact z·sqrt(n)
    lat = _LatticeLaw(N.Gaussian(1.0)).moe(ns, 0.9, exact_one=False)
    np.testing.assert_allclose(lat, Z90 * np.sqrt(ns), rtol=1e-9)
    # logistic: lattice engine vs closed-form characteristic function
    cf = _CFLaw(N.Logistic(2.0), "logistic", 2.0).moe(ns, 0.9, exact_one=False)
    assert cf[0] == pytest.approx(N.Logistic(2.0).interval_halfwidth(0.9), rel=1e-12)
    np.testing.assert_allclose(_LatticeLaw(N.Logistic(2.0)).moe(ns, 0.9), cf, rtol=1e-9)
    # n = 1 through the engine matches the mechanism's own margin to ~1e-6 (measured ~1e-12;
    # the engine is never used for n = 1, which takes the law's own quantile)
    one = _LatticeLaw(N.Laplace(1.0)).moe(np.array([1]), 0.9, exact_one=False)[0]
    assert one == pytest.approx(N.Laplace(1.0).interval_halfwidth(0.9), rel=1e-6)


@pytest.mark.parametrize("noise", [N.GeneralizedGaussian(1.0, 0.5), N.ExpPolyLog(1.0, 1.0, 4.0),
                                   N.ExpPolyLog(0.5, math.e, 1.0, 2.0), N.Subbotin(1.5, 1.0)],
                         ids=repr)
def test_numerical_engine_converges(noise: object) -> None:
    # self-convergence: the default lattice vs one 4x finer (error ~ h^4): below 1e-6 relative
    ns = np.array([2, 5, 60])
    coarse = _LatticeLaw(noise).moe(ns, 0.9)  # type: ignore[arg-type]
    fine = _LatticeLaw(noise, h_rel=0.0125).moe(ns, 0.9)  # type: ignore[arg-type]
    np.testing.assert_allclose(coarse, fine, rtol=1e-6)


@pytest.mark.parametrize("noise,n", [(N.GeneralizedGaussian(1.0, 0.5), 3),
                                     (N.ExpPolyLog(1.0, 1.0, 3.5), 4)], ids=repr)
def test_numerical_engine_monte_carlo(noise: object, n: int) -> None:
    # independent check of the law: coverage of iid noise sums (plain float draws) at the margin
    reps = 200_000
    draws = noise.sample((reps, n), rng=np.random.default_rng(11))  # type: ignore[attr-defined]
    s = draws.sum(axis=1)
    moe = _LatticeLaw(noise).moe(np.array([n]), LEVEL)[0]  # type: ignore[arg-type]
    k = int(np.sum(np.abs(s) <= moe))
    assert stats.binomtest(k, reps, LEVEL).pvalue > P_REJECT
    for f in (0.97, 1.03):  # power: 3% off is rejected
        k = int(np.sum(np.abs(s) <= f * moe))
        assert stats.binomtest(k, reps, LEVEL).pvalue <= P_REJECT


def test_sum_error_law_validation() -> None:
    with pytest.raises(InvalidParameterError, match="transformation mechanism"):
        sum_error_law(LogTransform(sigma=0.1, offset=1.0), 3)
    with pytest.raises(InvalidParameterError, match="additive tabdp mechanism"):
        sum_error_law("gaussian", 3)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="integers >= 0"):
        sum_error_law(Gaussian(sigma=1.0), [1, 2.5])
    with pytest.raises(InvalidParameterError, match="integers >= 0"):
        sum_error_law(Gaussian(sigma=1.0), -1)
    with pytest.raises(InvalidParameterError, match="level"):
        sum_error_law(Gaussian(sigma=1.0), 3, level=1.0)


# ----------------------------------------------------------------------------------------------
# rollup mechanics
# ----------------------------------------------------------------------------------------------
def _geo() -> pl.DataFrame:
    return pl.DataFrame({"county": ["c1", "c2", "c3", "c4"], "state": ["A", "A", "B", "B"]})


def _sectors() -> pl.DataFrame:
    return pl.DataFrame({"naics": ["111", "112", "211", "212"], "sector": ["11", "11", "21", "21"]})


def _table() -> pl.DataFrame:
    rows = [(c, nc) for c in ["c1", "c2", "c3", "c4"] for nc in ["111", "112", "211"]]
    x = np.arange(1.0, len(rows) + 1)
    return pl.DataFrame({"county": [r[0] for r in rows], "naics": [r[1] for r in rows],
                         "x": x, "x_sd": np.full(x.size, 2.0), "x_moe": np.full(x.size, 9.0),
                         "y": 10 * x, "y_sd": np.full(x.size, math.inf)})


MECHS = {"x": Gaussian(sigma=2.0), "y": SymmetricStable(alpha=1.5, gamma=1.0)}


def test_rollup_state_sector() -> None:
    t = _table()
    out, how = rollup(t, by=["county", "naics"], measures=["x", "y"],
                      target_by=["state", "sector"], maps={"state": _geo(), "sector": _sectors()},
                      mechanisms=MECHS)
    # interval ends added on purpose (issue 16): symmetric, estimate -+ moe, for rollups
    assert out.columns == ["state", "sector", "x", "x_sd", "x_moe", "x_lower", "x_upper",
                           "y", "y_sd", "y_moe", "y_lower", "y_upper", "cells"]
    assert out.schema["cells"] == pl.Int64 and out.schema["x"] == pl.Float64
    assert out.select("state", "sector").rows() == [("A", "11"), ("A", "21"), ("B", "11"),
                                                     ("B", "21")]
    # x = 1..12 over (c1..c4) x (111, 112, 211)
    assert out["x"].to_list() == [1 + 2 + 4 + 5, 3 + 6, 7 + 8 + 10 + 11, 9 + 12]
    assert out["cells"].to_list() == [4, 2, 4, 2]
    np.testing.assert_allclose(out["x_sd"], 2.0 * np.sqrt([4, 2, 4, 2]), rtol=1e-15)
    np.testing.assert_allclose(out["x_moe"], Z90 * 2.0 * np.sqrt([4, 2, 4, 2]), rtol=1e-14)
    assert out["y_sd"].to_list() == [math.inf] * 4
    np.testing.assert_allclose(out["y_moe"], [MECHS["y"].moe_of_sum(n) for n in (4, 2, 4, 2)],
                               rtol=1e-10)
    assert how == {"x": METHOD_GAUSSIAN, "y": METHOD_STABLE}
    for m in ("x", "y"):
        np.testing.assert_array_equal(out[f"{m}_lower"], out[m] - out[f"{m}_moe"])
        np.testing.assert_array_equal(out[f"{m}_upper"], out[m] + out[f"{m}_moe"])
    # a column of by kept as is, crossed with a mapped one; national total
    out2, _ = rollup(t, by=["county", "naics"], measures=["x"], target_by=["naics", "state"],
                     maps={"state": _geo()}, mechanisms=MECHS)
    assert out2.select("naics", "state").rows()[:2] == [("111", "A"), ("111", "B")]
    assert out2["cells"].to_list() == [2] * 6
    nat, _ = rollup(t, by=["county", "naics"], measures=["x"], target_by=[], maps={},
                    mechanisms=MECHS)
    assert nat.columns == ["x", "x_sd", "x_moe", "x_lower", "x_upper", "cells"]
    assert nat.rows() == [(78.0, pytest.approx(2 * math.sqrt(12)),
                           pytest.approx(Z90 * 2 * math.sqrt(12)),
                           pytest.approx(78.0 - Z90 * 2 * math.sqrt(12)),
                           pytest.approx(78.0 + Z90 * 2 * math.sqrt(12)), 12)]


def test_rollup_target_keys_order_and_empty_rows() -> None:
    keys = pl.DataFrame({"sector": ["21", "99", "11"], "state": ["B", "A", "A"]})
    out, _ = rollup(_table(), by=["county", "naics"], measures=["x"],
                    target_by=["state", "sector"], maps={"state": _geo(), "sector": _sectors()},
                    mechanisms=MECHS, target_keys=keys)
    assert out.select("state", "sector").rows() == [("B", "21"), ("A", "99"), ("A", "11")]
    assert out.select("x", "x_sd", "x_moe", "cells").row(1) == (0.0, 0.0, 0.0, 0)
    assert out["x"].to_list() == [21.0, 0.0, 12.0]


def test_rollup_dtypes_exact_and_order_independent() -> None:
    rng = np.random.default_rng(3)
    n = 600
    big = pl.DataFrame({
        "county": pl.Series(rng.integers(0, 50, n), dtype=pl.Int32),
        "naics": pl.Series([f"{v:06d}" for v in rng.permutation(n)]),
        "x": rng.normal(0, 1e12, n), "x_sd": np.full(n, 1.5)})
    big = big.unique(subset=["county", "naics"])
    geo = pl.DataFrame({"county": np.arange(50), "state": pl.Series(
        [f"s{v % 7}" for v in range(50)], dtype=pl.Categorical)})
    kw = dict(by=["county", "naics"], measures=["x"], target_by=["state"], maps={"state": geo},
              mechanisms={"x": Laplace(scale=1.5 / math.sqrt(2))})
    a, how = rollup(big, **kw)  # type: ignore[arg-type]
    b, _ = rollup(big.sample(fraction=1.0, shuffle=True, seed=9), **kw)  # type: ignore[arg-type]
    assert a.equals(b)  # bit-identical whatever the row order
    assert a.schema["state"] == pl.Categorical and how["x"] == METHOD_CF
    # correctly rounded sums
    for st, tot in zip(a["state"].to_list(), a["x"].to_list(), strict=True):
        vals = big.join(geo.with_columns(pl.col("county").cast(pl.Int32)), on="county") \
            .filter(pl.col("state") == st)["x"].to_list()
        assert tot == math.fsum(vals)
    t = pl.DataFrame({"k": ["a", "b", "c"], "x": [1e16, 1.0, -1e16], "x_sd": [1.0, 1.0, 1.0]})
    nat, _ = rollup(t, by=["k"], measures=["x"], target_by=[], maps={},
                    mechanisms={"x": Gaussian(sigma=1.0)})
    assert nat["x"][0] == 1.0


def test_rollup_transformation_and_vector() -> None:
    t = pl.DataFrame({"county": ["c1", "c2", "c3"], "x": [100.0, 200.0, 50.0],
                      "x_sd": [10.0, 20.0, 5.0], "v": [1.0, 2.0, 3.0], "v_sd": [6.0, 6.0, 6.0]})
    geo = pl.DataFrame({"county": ["c1", "c2", "c3"], "state": ["A", "A", "A"]})
    vec = VectorSubbotin(r=2.0, scale=2.0, weights={"v": 3.0})
    out, how = rollup(t, by=["county"], measures=["x", "v"], target_by=["state"],
                      maps={"state": geo},
                      mechanisms={"x": LogTransform(sigma=0.1, offset=1.0), "v": vec})
    assert how == {"x": METHOD_NORMAL, "v": METHOD_GAUSSIAN}
    assert out["x_sd"][0] == pytest.approx(math.sqrt(100 + 400 + 25))
    assert out["x_moe"][0] == pytest.approx(Z90 * math.sqrt(525))
    assert out["v_moe"][0] == pytest.approx(Z90 * 6.0 * math.sqrt(3))
    _, how = rollup(t, by=["county"], measures=["x"], target_by=[], maps={},
                    mechanisms={"x": RootTransform(k=2, sigma=1.0)})
    assert how["x"] == METHOD_NORMAL


# ----------------------------------------------------------------------------------------------
# simulation: unbiasedness, sd and coverage of released-and-rolled-up totals
# ----------------------------------------------------------------------------------------------
def _sim_frames(truth: np.ndarray, est: np.ndarray, sd: np.ndarray, reps: int,
                counties: int, naics: int) -> pl.DataFrame:
    cells = counties * naics
    return pl.DataFrame({
        "rep": np.repeat(np.arange(reps), cells),
        "county": np.tile(np.repeat([f"c{i}" for i in range(counties)], naics), reps),
        "naics": np.tile([f"n{j}" for j in range(naics)] * counties, reps),
        "x": est, "x_sd": sd})


def _simulate(mech: object, truth: np.ndarray, reps: int, seed: int, counties: int,
              naics: int) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, str]:
    """Release ``truth`` (counties x naics cells) ``reps`` times and roll up each repetition.

    States: two halves of the counties; sectors: two halves of the codes. The repetition id is a
    key column kept in target_by, so one rollup call rolls up every repetition.
    """
    rel = mech.release_table(np.tile(truth, reps), rng=np.random.default_rng(seed),  # type: ignore[attr-defined]
                             level=LEVEL)
    table = _sim_frames(truth, rel.estimate, rel.sd, reps, counties, naics)
    geo = pl.DataFrame({"county": [f"c{i}" for i in range(counties)],
                        "state": ["A" if i < counties // 2 else "B" for i in range(counties)]})
    sec = pl.DataFrame({"naics": [f"n{j}" for j in range(naics)],
                        "sector": ["s1" if j < naics // 2 else "s2" for j in range(naics)]})
    true_cells = _sim_frames(truth, truth, truth, 1, counties, naics).drop("rep")
    kw = dict(by=["rep", "county", "naics"], measures=["x"], maps={"state": geo, "sector": sec},
              mechanisms={"x": mech}, level=LEVEL)
    out, how = rollup(table, target_by=["rep", "state", "sector"], **kw)  # type: ignore[arg-type]
    nat, _ = rollup(table, target_by=["rep"], **kw)  # type: ignore[arg-type]
    true_tot = (true_cells.join(geo, on="county").join(sec, on="naics")
                .group_by("state", "sector").agg(pl.col("x").sum().alias("truth")))
    out = out.join(true_tot, on=["state", "sector"], how="left")
    nat = nat.with_columns(pl.lit(float(truth.sum())).alias("truth"))
    return out, nat, table, how["x"]


def _check_propagation(out: pl.DataFrame, reps: int, excess_kurtosis: float,
                       coverage: float, check_sd: bool = True) -> None:
    """Unbiasedness, sd and coverage per target key, plus power against 30% errors."""
    groups = out.partition_by([c for c in ("state", "sector") if c in out.columns]) \
        if "state" in out.columns else [out]
    hits = {1.0: 0, 0.7: 0, 1.3: 0}
    trials = 0
    for g in groups:
        assert g.height == reps
        err = (g["x"] - g["truth"]).to_numpy()
        sd = g["x_sd"].to_numpy()
        moe = g["x_moe"].to_numpy()
        if check_sd:
            assert np.ptp(sd) == 0.0  # additive: the same sd in every repetition
            s = float(sd[0])
            # (a) unbiased: z-test of the mean error
            assert abs(err.mean()) / (s / math.sqrt(reps)) < Z_REJECT
            # (b) variance: s²/σ² is ~N(1, 2/(R−1) + κ/R) (κ the excess kurtosis of the sum)
            v = err.var(ddof=1)
            se = math.sqrt(2.0 / (reps - 1) + excess_kurtosis / reps)
            assert abs(v / s**2 - 1.0) / se < Z_REJECT
            for f in (0.7, 1.3):  # power: a propagated sd 30% off is rejected
                assert abs(v / (f * s) ** 2 - 1.0) / se >= Z_REJECT
        for f in hits:
            hits[f] += int(np.sum(np.abs(err) <= f * moe))
        trials += reps
    # (c) coverage of ±moe (binomial test), and power against a margin 30% off
    assert stats.binomtest(hits[1.0], trials, coverage).pvalue > P_REJECT, hits[1.0] / trials
    for f in (0.7, 1.3):
        assert stats.binomtest(hits[f], trials, coverage).pvalue <= P_REJECT


def _truth(k: int, seed: int = 0, integer: bool = False) -> np.ndarray:
    v = np.random.default_rng(seed).uniform(0.0, 500.0, k)
    return np.round(v) if integer else v


@pytest.mark.parametrize("mech,kurt", [(Gaussian(sigma=4.0), 0.0), (Laplace(scale=3.0), 3.0)],
                         ids=["gaussian", "laplace"])
def test_simulation_continuous(mech: object, kurt: float) -> None:
    reps, counties, naics = 2000, 6, 4
    out, nat, _, _ = _simulate(mech, _truth(counties * naics), reps, seed=101,
                               counties=counties, naics=naics)
    assert set(out["cells"].to_list()) == {6} and set(nat["cells"].to_list()) == {24}
    # Laplace: excess kurtosis of a sum of n iid Laplace is 3/n
    _check_propagation(out, reps, kurt / 6, LEVEL)
    _check_propagation(nat, reps, kurt / 24, LEVEL)


def test_simulation_discrete_gaussian() -> None:
    mech = DiscreteGaussian(sigma=2.0)
    reps, counties, naics = 2000, 6, 4
    out, nat, _, how = _simulate(mech, _truth(counties * naics, integer=True), reps, seed=202,
                                 counties=counties, naics=naics)
    assert how == METHOD_LATTICE
    # exact coverage of the integer margin (>= level), by brute-force convolution of the pmf
    for frame, n in ((out, 6), (nat, 24)):
        h = int(frame["x_moe"][0])
        pmf, off = _brute_pmf(mech.noise, n)
        cov = float(pmf[off - h: off + h + 1].sum())
        assert cov >= LEVEL and float(pmf[off - h + 1: off + h].sum()) < LEVEL
        pmf1, off1 = _brute_pmf(mech.noise, 1)
        k1 = np.arange(-off1, off1 + 1)
        kurt = (float(np.sum(pmf1 * k1**4)) / float(np.sum(pmf1 * k1**2)) ** 2 - 3.0) / n
        _check_propagation(frame, reps, kurt, cov)


@pytest.mark.slow  # 2,500 replications (5 s); the stable moe and rollup are checked exactly above
def test_simulation_stable_coverage() -> None:
    mech = SymmetricStable(alpha=1.5, gamma=2.0)
    reps, counties, naics = 2500, 2, 2
    out, nat, _, how = _simulate(mech, _truth(4), reps, seed=303, counties=counties, naics=naics)
    assert how == METHOD_STABLE
    assert set(out["x_sd"].to_list()) == {math.inf}
    _check_propagation(out, reps, 0.0, LEVEL, check_sd=False)
    _check_propagation(nat, reps, 0.0, LEVEL, check_sd=False)


def test_simulation_log_transform() -> None:
    mech = LogTransform(sigma=0.1, offset=1.0)
    reps, counties, naics = 2000, 6, 4
    truth = np.random.default_rng(4).uniform(200.0, 5000.0, counties * naics)
    out, nat, _, how = _simulate(mech, truth, reps, seed=404, counties=counties, naics=naics)
    assert how == METHOD_NORMAL
    for g in out.partition_by(["state", "sector"]):
        err = (g["x"] - g["truth"]).to_numpy()
        sd = g["x_sd"].to_numpy()
        # (a) the mean-unbiased estimator sums to an unbiased total (z-test, p <= 1e-6)
        assert abs(err.mean()) / (sd.mean() / math.sqrt(reps)) < Z_REJECT
        # (b) propagated plug-in sd vs the empirical sd: the plug-in is biased by ~1% here
        # (sd is linear in q + a, evaluated at the estimate); the empirical sd of 2000 draws has
        # a relative standard error of ~1.6%, so 8% is about 5 standard errors plus the bias
        assert err.std(ddof=1) / math.sqrt(np.mean(sd**2)) == pytest.approx(1.0, abs=0.08)
    # (c) coverage of the normal approximation: measured 0.8976 with 20 000 repetitions for
    # sigma = 0.1 and 6 cells (bias <= 0.003); 8000 trials have a standard error of 0.0034, so
    # |coverage - 0.9| <= 0.02 allows ~5 standard errors plus the approximation bias
    for frame in (out, nat):
        err = (frame["x"] - frame["truth"]).to_numpy()
        cov = float(np.mean(np.abs(err) <= frame["x_moe"].to_numpy()))
        assert abs(cov - LEVEL) <= 0.02, cov
        for f in (0.7, 1.3):  # power: a margin 30% off misses by far more than the tolerance
            cov_f = float(np.mean(np.abs(err) <= f * frame["x_moe"].to_numpy()))
            assert abs(cov_f - LEVEL) > 0.05


# ----------------------------------------------------------------------------------------------
# scale (the time is a benchmark's business: no timed assertion here)
# ----------------------------------------------------------------------------------------------
def test_rollup_cbp_like_scale() -> None:
    counties = [f"{i:03d}" for i in range(300)]
    naics6 = [f"{i:06d}" for i in range(301)]
    rng = np.random.default_rng(0)
    k = len(counties) * len(naics6)
    t = pl.DataFrame({"county": np.repeat(counties, len(naics6)),
                      "naics6": np.tile(naics6, len(counties))})
    mechs = {"a": Gaussian(sigma=5.0), "b": Laplace(scale=3.0),
             "c": GeneralizedGaussian(sigma=1.0, p=0.5), "d": DiscreteGaussian(sigma=3.0)}
    for m, mech in mechs.items():
        t = t.with_columns(pl.Series(m, rng.normal(0.0, 100.0, k)),
                           pl.Series(f"{m}_sd", np.full(k, mech.noise.std())))
    geo = pl.DataFrame({"county": counties, "state": [f"S{i % 10}" for i in range(300)]})
    sec = pl.DataFrame({"naics6": naics6, "sector": [f"{10 + i % 19}" for i in range(301)]})
    kw = dict(by=["county", "naics6"], measures=list(mechs), mechanisms=mechs)
    rollup(t.head(50), target_by=["state"], maps={"state": geo}, **kw)  # type: ignore[arg-type]
    out, how = rollup(t, target_by=["state", "sector"], maps={"state": geo, "sector": sec},
                      **kw)  # type: ignore[arg-type]
    assert out.height == 190 and int(out["cells"].sum()) == k
    assert how["c"] == METHOD_NUMERICAL
    # national: n = 90 300 cells for every law
    nat, _ = rollup(t, target_by=[], maps={}, **kw)  # type: ignore[arg-type]
    for m, mech in mechs.items():
        normal = Z90 * mech.noise.std() * math.sqrt(k)
        assert nat[f"{m}_moe"][0] == pytest.approx(normal, rel=2e-3)  # CLT regime


def test_heavy_tail_cap_warns() -> None:
    # infinite variance and very many cells: the FFT cap forces a coarse lattice -> warning
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        moe, _ = sum_error_law(ExpPolyLog(sigma=1.0, a=1.0, d=3.0), [90_000])
    assert np.isfinite(moe).all()
    assert any(issubclass(w.category, RuntimeWarning) for w in rec)


# ----------------------------------------------------------------------------------------------
# validation
# ----------------------------------------------------------------------------------------------
def _kw(**over: object) -> dict[str, object]:
    kw: dict[str, object] = dict(by=["county", "naics"], measures=["x"], target_by=["state"],
                                 maps={"state": _geo()}, mechanisms=MECHS)
    kw.update(over)
    return kw


@pytest.mark.parametrize("over,match", [
    (dict(target_by=["region"]), "unknown target column 'region'"),
    (dict(measures=["z"]), "measure 'z' needs the columns"),
    (dict(measures=[]), "at least one column"),
    (dict(measures="x"), "list of column names"),
    (dict(by=["county", "zip"]), r"key column\(s\) \['zip'\]"),
    (dict(level=1.5), "level"),
    (dict(level=0.0), "level"),
    (dict(mechanisms={}), "no mechanism given for measure 'x'"),
    (dict(mechanisms={"x": "gauss"}), "must be the tabdp mechanism"),
    (dict(mechanisms={"x": Gaussian(sigma=3.0)}), "does not match the sd"),
    (dict(mechanisms={"x": LogTransform(sigma=0.1, offset=1.0, estimator="median")}),
     "median-unbiased"),
    (dict(maps={"state": pl.DataFrame({"county": ["c1", "c2"], "state": ["A", "B"]})}),
     r"no row for 2 'county' code\(s\) of the table: \['c3', 'c4'\]"),
    (dict(maps={"state": pl.DataFrame({"zip": ["c1"], "state": ["A"]})}),
     "not a column of by"),
    (dict(maps={"state": pl.DataFrame({"county": ["c1", "c1", "c2", "c3", "c4"],
                                       "state": ["A", "B", "A", "B", "B"]})}),
     "more than one"),
    (dict(maps={"state": pl.DataFrame({"county": ["c1"], "x": ["A"], "state": ["A"]})}),
     "exactly 2 columns"),
    (dict(target_keys=pl.DataFrame({"region": ["A"]})), "exactly the target_by columns"),
    (dict(target_keys=pl.DataFrame({"state": ["A", "A"]})), "duplicate rows"),
    (dict(target_by=["county"], maps={"county": _geo()}), "both a column of by"),
])
def test_rollup_validation(over: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        rollup(_table(), **_kw(**over))  # type: ignore[arg-type]


def test_rollup_validation_values() -> None:
    t = _table()
    with pytest.raises(InvalidParameterError, match="null"):
        rollup(t.with_columns(pl.when(pl.col("x") > 5).then(None).otherwise(pl.col("x"))
                              .alias("x")), **_kw())  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="NaN or infinite"):
        rollup(t.with_columns(pl.lit(math.nan).alias("x")), **_kw())  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="duplicate key"):
        rollup(pl.concat([t, t.head(1)]), **_kw())  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="LazyFrame"):
        rollup(t.lazy(), **_kw())  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="must be the tabdp mechanism"):
        rollup(t, **_kw(mechanisms={"x": object()}))  # type: ignore[arg-type]


# -- the memo of margins and sum_error_method (issue 29: a release's fixed cost) --------------
def test_margins_memo_returns_the_computed_values_without_recomputing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    mod = sys.modules["tabdp.release.rollup"]  # the module (tabdp.release.rollup is rollup())
    monkeypatch.setattr(mod, "_MEMO", type(mod._MEMO)())
    mech = ExpPolyLog(sigma=3.0, a=1.0, d=5.0)
    first, _ = sum_error_law(mech, [0, 2, 5, 2], level=0.9)
    calls: list[object] = []
    orig = mod._LatticeLaw.margins

    def counting(self: object, ns: np.ndarray, level: float) -> object:
        calls.append(ns.tolist())
        return orig(self, ns, level)  # type: ignore[arg-type]

    monkeypatch.setattr(mod._LatticeLaw, "margins", counting)
    # an equal mechanism (another object), the same distinct counts: served by the memo
    again, _ = sum_error_law(ExpPolyLog(sigma=3.0, a=1.0, d=5.0), [5, 2, 0], level=0.9)
    assert calls == []
    assert again.tolist() == [first[2], first[1], 0.0]
    # other counts, another level or another law: computed
    sum_error_law(mech, [2, 6], level=0.9)
    sum_error_law(mech, [2, 5], level=0.95)
    sum_error_law(ExpPolyLog(sigma=3.5, a=1.0, d=5.0), [2, 5], level=0.9)
    assert calls == [[2, 6], [2, 5], [2, 5]]
    assert len(mod._MEMO) == 4


def test_sum_error_method_matches_sum_error_law_and_refuses_the_same() -> None:
    for mech in (Gaussian(sigma=2.0), Laplace(scale=1.0), Logistic(scale=1.0),
                 DiscreteGaussian(sigma=2.0), DiscreteLaplace(scale=1.0),
                 ExpPolyLog(sigma=3.0, a=1.0, d=5.0), SymmetricStable(alpha=1.5, gamma=1.0)):
        assert sum_error_method(mech) == sum_error_law(mech, [2])[1]
    assert sum_error_method(Gaussian(sigma=2.0)) == METHOD_GAUSSIAN
    with pytest.raises(InvalidParameterError, match="sum_error_method"):
        sum_error_method(LogTransform(sigma=0.1, offset=1.0))
