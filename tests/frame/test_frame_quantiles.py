"""Frame layer: ``df.dp.median`` / ``df.dp.quantile`` (smooth sensitivity, issue 4).

Every test taking ``make_frame`` runs once per backend (pandas, Polars, Polars lazy; see
``conftest.py``). The true quantiles and smooth sensitivities are computed here independently of
:mod:`tabdp.sensitivity` (sorting and a brute-force double loop over the padded order
statistics) for the small tables, and the noise is pinned with ``set_noise`` (the unit noise law
returns a constant) so that estimates can be compared exactly: with Z = 0 the estimate is the
true quantile, with Z = 1 it is the true quantile plus the smooth sensitivity. Pinning also pins
the private noise scale: its draw is ``ln SS + z`` (rounded to the 2**-20 log grid).

Issue 13: ``_sd`` and ``_moe`` are computed from a private estimate of the noise scale
(``ln SS + Laplace(γ/ε₂)``), never from SS; ``epsilon`` is the total ε₁ + ε₂ (by default ε₂ = 2γ,
so ε₁ = 0.6, γ = 0.2, ε₂ = 0.4 at ε = 1 with PolyPlace).
"""

from __future__ import annotations

import math
import pathlib
import sys
from fractions import Fraction

import numpy as np
import polars as pl
import pytest
from scipy import stats

import tabdp
from tabdp import mechanisms as mech
from tabdp.frame._quantiles import SS_FLOOR, floored_smooth_sensitivity
from tabdp.frame._release import quantile_release
from tabdp.mechanisms._base import pure_to_zcdp
from tabdp.mechanisms.smooth import (
    LOG_SCALE_GRID,
    SmoothSensitivityRelease,
    scale_adjusted_halfwidth,
)
from tabdp.noise import Laplace, exact
from tabdp.noise._base import NoiseDistribution
from tabdp.noise.exact import RelativeGrid, round_noisy
from tabdp.rng import RandomSource
from tabdp.sensitivity import group_sort, smooth_sensitivity_quantile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from _stats import assert_ks_fits, assert_power, scaled_cdfs  # noqa: E402

KEYS = tabdp.KeySet.from_dict({"county": ["c1", "c2", "c3"], "naics": ["11", "21"]})
# Statistical and noise-family tests run on one engine (the data path they use is the one
# the other tests and tests/frame/test_engines_equal.py check on every engine; the noise is drawn
# on the aggregated cells, identically on every engine), which keeps the suite's time in check.
ONE_ENGINE = pytest.mark.parametrize("engine", ["polars"])
BOUNDS = (0.0, 100.0)
SPAN = BOUNDS[1] - BOUNDS[0]
DATA = {
    "county": ["c1", "c1", "c1", "c2", "c3", "c3", "c3", "c3", "c9", "c1"],
    "naics": ["11", "11", "11", "21", "11", "11", "11", "11", "11", "99"],
    "x": [10.0, -5.0, 250.0, 40.0, 4.0, 2.0, 3.0, 1.0, 500.0, 8.0],
}
IN_KEYS = np.array([True] * 8 + [False, False])  # the last two rows are outside the key set
# Clipped values per key, in key-set order: (c1,11) (c1,21) (c2,11) (c2,21) (c3,11) (c3,21).
CELLS = [[0.0, 10.0, 100.0], [], [], [40.0], [1.0, 2.0, 3.0, 4.0], []]
MEDIAN = [10.0, 0.0, 0.0, 40.0, 2.0, 0.0]  # lower median; empty cells: the padded low bound
Q90 = [100.0, 0.0, 0.0, 40.0, 4.0, 0.0]
EPS1, EPS2 = 0.6, 0.4  # default split of ε = 1 for PolyPlace: value, noise scale (ε₂ = 2γ)


def rho_of(eps: float, k: float = 1.0) -> float:
    """ρ of a unit with k rows in a cell: ρ(k·ε₁) + ρ(k·ε₂), ρ(e) = e·tanh(e/2), default split."""
    e1, e2 = 0.6 * eps * k, 0.4 * eps * k
    return e1 * math.tanh(e1 / 2) + e2 * math.tanh(e2 / 2)


R1 = rho_of(1.0)  # ρ of one row at ε = 1
GAMMA_DEFAULT = 0.2  # PolyPlace default γ at ε = 1: ε₁/3


# ---------------------------------------------------------------------------------------------
# Independent references
# ---------------------------------------------------------------------------------------------
def rank(n: int, q: float) -> int:
    """1-based rank of the (inverted-CDF) q-quantile of n values; 0 for no values."""
    if n == 0:
        return 0
    return max(1, math.ceil(Fraction(str(q)) * n))


def true_quantile(values: list[float], q: float, bounds=BOUNDS) -> float:
    lo, hi = bounds
    x = sorted(min(max(v, lo), hi) for v in values)
    return x[rank(len(x), q) - 1] if x else lo


def brute_ss(values: list[float], q: float, gamma: float, bounds=BOUNDS) -> float:
    """Max over padded pairs a <= m <= b of (x_b − x_a)·e^{−γ(b−a−1)} (x_0 = lo, x_{n+1} = hi)."""
    lo, hi = bounds
    x = sorted(min(max(v, lo), hi) for v in values)
    n, m = len(x), rank(len(x), q)

    def pad(i: int) -> float:
        return lo if i < 1 else hi if i > n else x[i - 1]

    return max((pad(b) - pad(a)) * math.exp(-gamma * (b - a - 1))
               for a in range(m + 1) for b in range(max(m, a + 1), n + 2))


def key_rows(ks: tabdp.KeySet) -> list[tuple]:
    return ks.to_polars().rows()


@pytest.fixture
def set_noise(monkeypatch):
    """``set_noise(z)``: every unit noise law draws the constant z (pins the noise exactly).

    Releases go through :func:`tabdp.noise.exact.round_noisy` (exactly rounded noise); the pinned
    version releases ``q + ss·z`` rounded to the same grid, without drawing.
    """

    def set_(z: float) -> None:
        def sample(self, size, rng=None):  # noqa: ARG001
            return np.full(size, float(z))

        def pinned(noise, center, grid, rng=None, *, scale=None, **kw):  # noqa: ARG001
            c = np.asarray(center, dtype=np.float64).reshape(-1)
            s = np.ones_like(c) if scale is None else np.asarray(scale, dtype=np.float64)
            g = exact.as_grid(grid)
            x = c + s * float(z)  # pinned: the double q + ss·z, rounded exactly to the grid
            if isinstance(g, exact.RelativeGrid):
                k = g._index(x)
            else:
                k = np.rint(x / g.step).astype(np.int64)
            return exact.RoundedDraw(g.values(k), k, 0, g)

        monkeypatch.setattr(NoiseDistribution, "sample", sample)
        monkeypatch.setattr(exact, "round_noisy", pinned)

    return set_


def reference(rel, truth, ss, seed, level=0.9):
    """Reproduce a release from its seed: the value draws, then ln SS + Laplace(b) on the log grid.

    Returns (estimate, sd, moe) computed only from those two draws.
    """
    src = RandomSource(seed)
    truth = np.asarray(truth, dtype=np.float64)
    ss = np.asarray(ss, dtype=np.float64)
    draw = round_noisy(rel.value.unit, truth, rel.value.default_grid(), src, scale=ss)
    log_scale = round_noisy(Laplace(rel.log_noise), np.log(ss), LOG_SCALE_GRID, src).values
    sd = rel.value.unit.std() * np.exp(log_scale)
    h = scale_adjusted_halfwidth(rel.value.unit, level, rel.log_noise)
    moe = h * np.exp(log_scale + LOG_SCALE_GRID / 2) + draw.grid.halfstep(draw.values)
    return draw.values, sd, moe


def pinned_sd(rel, ss, z):
    """Published sd under ``set_noise(z)``: the log-scale draw is ln SS + z, rounded."""
    log_scale = np.rint((np.log(np.asarray(ss, dtype=np.float64)) + z) / LOG_SCALE_GRID)
    return rel.value.unit.std() * np.exp(log_scale * LOG_SCALE_GRID)


def _median(frame, session, **kw):
    args = dict(by=["county", "naics"], keys=KEYS, bounds=BOUNDS, epsilon=1.0, session=session)
    args.update(kw)
    return frame.dp.median("x", **args)


# ---------------------------------------------------------------------------------------------
# Schema, key coverage, true quantiles and smooth sensitivities
# ---------------------------------------------------------------------------------------------
def test_median_schema_keys_truth_ss_sd_and_moe(make_frame, out_type, to_pl):
    seed = 11
    s = tabdp.Session(seed=seed)
    out = _median(make_frame(DATA), s)
    assert type(out) is out_type
    o = to_pl(out)
    # interval ends added on purpose (issue 16): estimate -+ moe for smooth-sensitivity releases
    assert o.columns == ["county", "naics", "x_median", "x_median_sd", "x_median_moe",
                         "x_median_lower", "x_median_upper"]
    np.testing.assert_array_equal(o["x_median_lower"].to_numpy(),
                                  (o["x_median"] - o["x_median_moe"]).to_numpy())
    np.testing.assert_array_equal(o["x_median_upper"].to_numpy(),
                                  (o["x_median"] + o["x_median_moe"]).to_numpy())
    assert o.select("county", "naics").rows() == key_rows(KEYS)  # every key once, in order
    for c in ("x_median", "x_median_sd", "x_median_moe"):
        assert o[c].dtype == pl.Float64
    truth = np.array([true_quantile(c, 0.5) for c in CELLS])
    np.testing.assert_array_equal(truth, MEDIAN)
    ss = np.array([brute_ss(c, 0.5, GAMMA_DEFAULT) for c in CELLS])
    assert ss[1] == ss[2] == ss[5] == SPAN  # empty cells: SS = hi − lo
    # the noise: one exactly rounded draw of the unit law per key (32-bit relative grid), from
    # the session's generator
    rel = SmoothSensitivityRelease("polyplace", 1.0)
    unit = rel.value.unit
    assert (rel.eps_value, rel.eps_scale, rel.gamma) == pytest.approx((EPS1, EPS2, 0.2))
    draw = round_noisy(unit, truth, RelativeGrid(32), RandomSource(seed), scale=ss)
    np.testing.assert_array_equal(o["x_median"].to_numpy(), draw.values)
    # sd and moe: from the second draw, ln SS + Laplace(γ/ε₂), only
    est, sd, moe = reference(rel, truth, ss, seed)
    np.testing.assert_array_equal(est, draw.values)
    np.testing.assert_allclose(o["x_median_sd"].to_numpy(), sd, rtol=1e-15)
    np.testing.assert_allclose(o["x_median_moe"].to_numpy(), moe, rtol=1e-15)
    # not SS × a constant: the three empty cells share SS = hi − lo but not their sd
    assert len(set(o["x_median_sd"].to_numpy()[[1, 2, 5]].tolist())) == 3
    assert unit.std() == pytest.approx(math.sqrt(PolyPlaceVariance(5.0, 3.0)), rel=1e-9)


def PolyPlaceVariance(s: float, alpha: float) -> float:  # noqa: N802
    """Variance by numerical integration of the PolyPlace density (independent of Lemma 13)."""
    from scipy import integrate

    law = tabdp.noise.PolyPlace(s, alpha)
    br = s / alpha
    inner = integrate.quad(lambda x: x * x * float(law.pdf(x)), 0.0, br)[0]
    outer = integrate.quad(lambda x: x * x * float(law.pdf(x)), br, np.inf)[0]
    return 2.0 * (inner + outer)


def test_pinned_noise_gives_truth_and_ss(make_frame, to_pl, set_noise):
    set_noise(0.0)
    o = to_pl(_median(make_frame(DATA), tabdp.Session(seed=1)))
    np.testing.assert_array_equal(o["x_median"].to_numpy(), MEDIAN)
    set_noise(1.0)
    o = to_pl(_median(make_frame(DATA), tabdp.Session(seed=1), gamma=0.2))
    ss = np.array([brute_ss(c, 0.5, 0.2) for c in CELLS])
    # (z = 1: MEDIAN + ss rounded to the 32-bit relative grid: relative error <= 2**-32)
    np.testing.assert_allclose(o["x_median"].to_numpy() - MEDIAN, ss, rtol=1e-8)
    # empty cells: the padded low bound plus noise scaled to hi − lo
    np.testing.assert_allclose(o["x_median"].to_numpy()[[1, 2, 5]], BOUNDS[0] + SPAN, rtol=1e-12)


@pytest.mark.parametrize("q, label", [(0.9, "x_q90"), (0.0, "x_q0"), (1.0, "x_q100"),
                                      (0.25, "x_q25"), (0.975, "x_q97.5"), (0.5, "x_q50")])
def test_quantile_labels_truth_and_ss(make_frame, to_pl, set_noise, q, label):
    set_noise(0.0)
    frame = make_frame(DATA)
    o = to_pl(frame.dp.quantile("x", q, by=["county", "naics"], keys=KEYS, bounds=BOUNDS,
                                epsilon=1.0, session=tabdp.Session(seed=2)))
    assert o.columns == ["county", "naics", label, f"{label}_sd", f"{label}_moe",
                         f"{label}_lower", f"{label}_upper"]  # ends: on purpose (issue 16)
    assert o.select("county", "naics").rows() == key_rows(KEYS)
    truth = [true_quantile(c, q) for c in CELLS]
    if q == 0.9:
        assert truth == Q90
    for c, t in zip(CELLS, truth, strict=True):  # agrees with numpy's inverted-CDF quantile
        if c:
            assert t == np.quantile(c, q, method="inverted_cdf")
    np.testing.assert_array_equal(o[label].to_numpy(), truth)
    rel = SmoothSensitivityRelease("polyplace", 1.0)
    ss = np.array([brute_ss(c, q, GAMMA_DEFAULT) for c in CELLS])
    # pinned: the log-scale draw is ln SS itself, rounded to the 2**-20 grid
    np.testing.assert_allclose(o[f"{label}_sd"].to_numpy(), pinned_sd(rel, ss, 0.0),
                               rtol=1e-12)


# origin: review rev64b. ``100q`` was written to 6 significant digits: q = 0.9999999 (a level
# below 1, rank ceil(q·n)) was labelled ``x_q100``, the maximum's label, and q = 0.1234567 was
# ``x_q12.3457``.
@pytest.mark.parametrize("q, label", [(0.9999999, "x_q99.99999"), (0.1234567, "x_q12.34567"),
                                      (0.07, "x_q7"), (0.29, "x_q29")])
def test_quantile_labels_write_the_level_in_full(q, label):
    out = pl.DataFrame(DATA).dp.quantile("x", q, by=["county", "naics"], keys=KEYS,
                                         bounds=BOUNDS, epsilon=1.0,
                                         session=tabdp.Session(seed=2))
    assert out.columns[2] == label


def test_quantile_half_equals_median_with_the_same_seed(make_frame, to_pl):
    a = to_pl(_median(make_frame(DATA), tabdp.Session(seed=5)))
    b = to_pl(make_frame(DATA).dp.quantile("x", 0.5, by=["county", "naics"], keys=KEYS,
                                           bounds=BOUNDS, epsilon=1.0,
                                           session=tabdp.Session(seed=5)))
    np.testing.assert_array_equal(a["x_median"].to_numpy(), b["x_q50"].to_numpy())
    np.testing.assert_array_equal(a["x_median_moe"].to_numpy(), b["x_q50_moe"].to_numpy())
    # and the noise really is random: another seed gives other values
    c = to_pl(_median(make_frame(DATA), tabdp.Session(seed=6)))
    assert np.all(a["x_median"].to_numpy() != c["x_median"].to_numpy())


def test_key_set_order_absent_keys_and_null_key(make_frame, to_pl, set_noise):
    set_noise(0.0)
    ks = tabdp.KeySet.from_dict(county=["c3", "zz", "c1"])
    o = to_pl(make_frame(DATA).dp.median("x", by="county", keys=ks, bounds=BOUNDS, epsilon=1.0,
                                         session=tabdp.Session(seed=0)))
    assert o["county"].to_list() == ["c3", "zz", "c1"]
    # c3: 1..4 → 2; zz: empty → low bound; c1: [0, 10, 100, 8] → rank 2 → 8
    np.testing.assert_array_equal(o["x_median"].to_numpy(), [2.0, 0.0, 8.0])
    # a key set with a null cell (not a cross product)
    kn = tabdp.KeySet.from_frame(pl.DataFrame({"c": ["a", None]}))
    data = {"c": ["a", None, None, None, "b"], "x": [5.0, 7.0, 1.0, 3.0, 9.0]}
    s = tabdp.Session(seed=0)
    o = to_pl(make_frame(data).dp.median("x", by="c", keys=kn, bounds=BOUNDS, epsilon=1.0,
                                         session=s))
    assert o["c"].to_list() == ["a", None]
    np.testing.assert_array_equal(o["x_median"].to_numpy(), [5.0, 3.0])
    assert s.report().confidential_summary()["queries"][0]["rows_outside_keys"] == 1
    np.testing.assert_allclose(to_pl(s.report().per_record)["rho"].to_numpy(),
                               [R1, R1, R1, R1, 0.0])


@pytest.mark.parametrize("dtype", [pl.Categorical, pl.String])
def test_categorical_keys_and_integer_measure(make_frame, to_pl, set_noise, dtype):
    set_noise(0.0)
    data = {**DATA, "x": [10, -5, 250, 40, 4, 2, 3, 1, 500, 8]}
    frame = make_frame(data, dtypes={"county": dtype, "naics": dtype, "x": pl.Int64})
    o = to_pl(_median(frame, tabdp.Session(seed=0)))
    assert o.select("county", "naics").rows() == key_rows(KEYS)
    np.testing.assert_array_equal(o["x_median"].to_numpy(), MEDIAN)


def test_empty_frame_every_cell_is_padded(to_engine, to_pl, set_noise):
    set_noise(1.0)
    frame = to_engine(pl.DataFrame({"c": [], "x": []}, schema={"c": pl.String, "x": pl.Float64}))
    ks = tabdp.KeySet.from_dict(c=["a", "b"])
    s = tabdp.Session(seed=0)
    o = to_pl(frame.dp.median("x", by="c", keys=ks, bounds=(-10.0, 30.0), epsilon=1.0,
                              session=s))
    np.testing.assert_allclose(o["x_median"].to_numpy(), [-10.0 + 40.0] * 2, rtol=1e-12)
    rel = SmoothSensitivityRelease("polyplace", 1.0)
    np.testing.assert_allclose(o["x_median_sd"].to_numpy(), pinned_sd(rel, [40.0] * 2, 1.0),
                               rtol=1e-12)  # e·40·std(Z): the pinned log draw is ln 40 + 1
    assert s.report().confidential_summary()["queries"][0]["rows_in_released_cells"] == 0


# ---------------------------------------------------------------------------------------------
# Clipping and the confidential report
# ---------------------------------------------------------------------------------------------
def test_clipping_counted_and_rows_outside_keys(make_frame, to_pl, set_noise):
    set_noise(0.0)
    s = tabdp.Session(seed=3)
    frame = make_frame(DATA)
    o = to_pl(frame.dp.quantile("x", 1.0, by=["county", "naics"], keys=KEYS, bounds=BOUNDS,
                                epsilon=1.0, session=s))
    # (c1,11) holds 250 (clipped to 100) and −5 (clipped to 0): its maximum is the bound
    assert o["x_q100"].to_list()[0] == 100.0
    frame.dp.quantile("x", 0.0, by=["county", "naics"], keys=KEYS, bounds=BOUNDS, epsilon=1.0,
                      session=s)
    assert to_pl(s.report().per_record).height == 10
    o0 = to_pl(frame.dp.quantile("x", 0.0, by=["county", "naics"], keys=KEYS, bounds=(2.0, 30.0),
                                 epsilon=1.0, session=s))
    np.testing.assert_array_equal(o0["x_q0"].to_numpy(), [2.0, 2.0, 2.0, 30.0, 2.0, 2.0])
    conf = s.report().confidential_summary()["queries"]
    # 500 (outside the keys) is not counted although it is out of bounds
    assert conf[0]["values_clipped_to_bounds"] == 2
    assert conf[0]["rows_outside_keys"] == 2
    assert conf[0]["rows_read"] == 10
    assert conf[0]["rows_in_released_cells"] == 8
    # bounds (2, 30): −5, 250, 40 and 1 are outside
    assert conf[2]["values_clipped_to_bounds"] == 4
    # neither the counts nor the values are in the public report
    pub = str(s.report().to_dict())
    assert "clipped" not in pub and "rows_outside" not in pub


# ---------------------------------------------------------------------------------------------
# Accounting
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("eps", [1.0, 0.3])
def test_row_mode_losses(make_frame, to_pl, eps):
    s = tabdp.Session(seed=4)
    _median(make_frame(DATA), s, epsilon=eps, name="m")
    pr = to_pl(s.report().per_record)
    assert pr["row"].to_list() == list(range(10))
    e1, e2 = EPS1 * eps, EPS2 * eps
    rho = e1 * math.tanh(e1 / 2.0) + e2 * math.tanh(e2 / 2.0)  # value and noise scale compose
    assert rho == pytest.approx(rho_of(eps), rel=1e-15)
    np.testing.assert_allclose(pr["rho_m"].to_numpy(), np.where(IN_KEYS, rho, 0.0), rtol=1e-14)
    np.testing.assert_allclose(pr["rho"].to_numpy(), np.where(IN_KEYS, rho, 0.0), rtol=1e-14)
    np.testing.assert_allclose(pr["epsilon"].to_numpy(), np.where(IN_KEYS, eps, 0.0))
    np.testing.assert_allclose(pr["size"].to_numpy(), np.where(IN_KEYS, 1.0, 0.0))
    curve = s.report().to_dict()["queries"][0]["policy_curve"]
    assert curve[0] == {"delta": 0.0, "rho": 0.0, "epsilon": 0.0}
    assert curve[1]["epsilon"] == pytest.approx(eps, rel=1e-15)
    assert curve[1]["rho"] == pytest.approx(rho, rel=1e-14)
    assert curve[2]["epsilon"] == pytest.approx(10 * eps)  # 10 rows of a unit in one cell
    assert curve[2]["rho"] == pytest.approx(rho_of(eps, 10), rel=1e-14)
    # the public curve includes the noise scale's ε₂: without it ρ would be ρ(ε₁) only
    assert curve[1]["rho"] > e1 * math.tanh(e1 / 2.0) * (1 + 1e-3)
    pub = s.report().to_dict()["queries"][0]["mechanism"]
    assert pub["uncertainty"]["epsilon"] == pytest.approx(e2, rel=1e-14)
    assert pub["value"]["params"]["epsilon"] == pytest.approx(e1, rel=1e-14)
    assert pub["guarantee"] == {"type": "pure", "epsilon": eps, "delta": 0.0}


UNIT_DATA = {
    "u": ["a", "a", "a", "b", "b", "b", "c", "d", "e"],
    "county": ["c1", "c1", "c3", "c3", "c3", "c3", "c9", "c2", "c2"],
    "naics": ["11", "11", "11", "11", "11", "11", "11", "21", "21"],
    "x": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, None],
}


def test_unit_mode_group_privacy(make_frame, to_pl):
    """A unit with k rows in a cell pays k·ε there; units in several cells pay the sum."""
    eps = 0.4
    s = tabdp.Session(unit="u", seed=5)
    _median(make_frame(UNIT_DATA), s, epsilon=eps, nulls="drop", name="m")
    pr = to_pl(s.report().per_record).sort("u")
    got = {r["u"]: r for r in pr.iter_rows(named=True)}
    # ρ of a unit with k rows in a cell: ρ(k·ε₁) + ρ(k·ε₂), ε₁ = 0.6ε, ε₂ = 0.4ε
    f = lambda e: float(pure_to_zcdp(0.6 * e) + pure_to_zcdp(0.4 * e))  # noqa: E731
    # a: 2 rows in (c1,11) and 1 in (c3,11); b: 3 rows in (c3,11); c: outside the keys;
    # d: 1 row in (c2,21); e: its only row is a dropped null
    assert got["a"]["rho_m"] == pytest.approx(f(2 * eps) + f(eps), rel=1e-14)
    assert got["a"]["epsilon"] == pytest.approx(3 * eps) and got["a"]["size"] == 2.0
    assert got["b"]["rho_m"] == pytest.approx(f(3 * eps), rel=1e-14)
    assert got["b"]["epsilon"] == pytest.approx(3 * eps) and got["b"]["size"] == 3.0
    assert got["d"]["rho_m"] == pytest.approx(f(eps), rel=1e-14)
    for u in ("c", "e"):
        assert u not in got or got[u]["rho"] == 0.0
    # not merely ρ(ε) per row: 2ε in one cell costs more than twice ε
    assert f(2 * eps) > 2 * f(eps)


def test_composes_with_sums_row_mode(make_frame, to_pl):
    g = mech.Gaussian(sigma=20.0)
    s = tabdp.Session(seed=6)
    frame = make_frame(DATA)
    frame.dp.sum("x", by=["county", "naics"], keys=KEYS, mechanism=g, session=s, name="s",
                 negatives="allow")
    _median(frame, s, name="m")
    frame.dp.count(by=["county", "naics"], keys=KEYS, mechanism=g, session=s, name="n")
    pr = to_pl(s.report().per_record)
    x = np.abs(np.array(DATA["x"]))
    rho_s = np.where(IN_KEYS, g.rho(x), 0.0)
    rho_n = np.where(IN_KEYS, g.rho(1.0), 0.0)
    np.testing.assert_allclose(pr["rho_s"].to_numpy(), rho_s)
    np.testing.assert_allclose(pr["rho_m"].to_numpy(), np.where(IN_KEYS, R1, 0.0))
    np.testing.assert_allclose(pr["rho"].to_numpy(), rho_s + rho_n + np.where(IN_KEYS, R1, 0.0))
    total = s.report().to_dict()["total_policy_curve"][1]
    assert total["rho"] == pytest.approx(2 * float(g.rho(1.0)) + R1)


def test_composes_with_counts_unit_mode(make_frame, to_pl):
    g = mech.Gaussian(sigma=2.0)
    s = tabdp.Session(unit="u", seed=7)
    frame = make_frame(UNIT_DATA)
    frame.dp.count(by=["county", "naics"], keys=KEYS, mechanism=g, session=s, name="n")
    _median(frame, s, nulls="drop", name="m")
    pr = to_pl(s.report().per_record).sort("u")
    got = {r["u"]: r for r in pr.iter_rows(named=True)}
    f = lambda e: float(pure_to_zcdp(0.6 * e) + pure_to_zcdp(0.4 * e))  # noqa: E731
    assert got["a"]["rho"] == pytest.approx(4 / 8 + 1 / 8 + f(2.0) + f(1.0), rel=1e-12)
    assert got["b"]["rho"] == pytest.approx(9 / 8 + f(3.0), rel=1e-12)
    assert got["e"]["rho_m"] == 0.0 and got["e"]["rho_n"] == pytest.approx(1 / 8)


def test_public_report_is_data_independent(make_frame):
    reports = []
    for seed, data in ((1, DATA), (2, {"county": ["c2"] * 3, "naics": ["21"] * 3,
                                       "x": [1e6, -3.0, 7.0]})):
        s = tabdp.Session(seed=seed)
        frame = make_frame(data)
        _median(frame, s, name="m")
        frame.dp.quantile("x", 0.9, by=["county", "naics"], keys=KEYS, bounds=BOUNDS,
                          epsilon=0.5, noise="laplace", session=s, name="q")
        reports.append(s)
    a, b = (r.report().to_dict() for r in reports)
    assert a == b
    q = a["queries"]
    assert q[0]["kind"] == "median" and q[1]["kind"] == "quantile"
    assert q[0]["measures"] == ["x_median"] and q[1]["measures"] == ["x_q90"]
    assert q[0]["keys"]["bounds"] == [0.0, 100.0] and q[1]["keys"]["q"] == 0.9
    m = q[0]["mechanism"]
    assert m["family"] == "smooth_sensitivity"
    assert {k: m["params"][k] for k in ("noise", "epsilon", "delta", "shape")} == {
        "noise": "polyplace", "epsilon": 1.0, "delta": None, "shape": None}
    assert m["params"]["gamma"] == pytest.approx(GAMMA_DEFAULT, rel=1e-14)
    assert m["params"]["uncertainty_share"] == pytest.approx(EPS2, rel=1e-14)
    assert m["unit_noise"]["name"] == "polyplace"
    assert (m["unit_noise"]["s"], m["unit_noise"]["alpha"]) == pytest.approx((5.0, 3.0))
    assert m["guarantee"] == {"type": "pure", "epsilon": 1.0, "delta": 0.0}
    lap = q[1]["mechanism"]
    assert lap["params"]["noise"] == "laplace" and lap["params"]["delta"] == 1e-5
    assert lap["guarantee"] == {"type": "approximate", "epsilon": 0.5, "delta": 1e-5}
    assert q[1]["policy_curve"][1]["epsilon"] is None  # not pure: no finite ε per record
    # the confidential parts do differ
    ca, cb = (r.report().confidential_summary()["queries"] for r in reports)
    assert ca != cb


# ---------------------------------------------------------------------------------------------
# Noise families
# ---------------------------------------------------------------------------------------------
FAMILIES = [("polyplace", None), ("polyplace", 0.05), ("student_t", None), ("student_t", 0.1),
            ("cauchy", None), ("laplace", None), ("laplace", 0.02)]


@ONE_ENGINE
@pytest.mark.parametrize("noise, gamma", FAMILIES)
def test_noise_families_run(make_frame, to_pl, noise, gamma):
    s = tabdp.Session(seed=8)
    o = to_pl(_median(make_frame(DATA), s, noise=noise, gamma=gamma, name="m"))
    rel = SmoothSensitivityRelease(noise, 1.0, gamma)
    ss = np.array([brute_ss(c, 0.5, rel.gamma) for c in CELLS])
    assert o.height == len(KEYS) and np.all(np.isfinite(o["x_median"].to_numpy()))
    est, sd, moe = reference(rel, [true_quantile(c, 0.5) for c in CELLS], ss, 8)
    np.testing.assert_array_equal(o["x_median"].to_numpy(), est)
    np.testing.assert_allclose(o["x_median_sd"].to_numpy(), sd, rtol=1e-15)
    np.testing.assert_allclose(o["x_median_moe"].to_numpy(), moe, rtol=1e-15)
    assert np.all(np.isfinite(o["x_median_sd"].to_numpy()))
    pub = s.report().to_dict()["queries"][0]["mechanism"]
    assert pub["params"]["noise"] == noise and pub["params"]["gamma"] == rel.gamma
    pr = to_pl(s.report().per_record)
    if noise == "laplace":  # approximate DP: no finite per-record ε
        assert pub["guarantee"]["type"] == "approximate"
        assert np.all(np.isinf(pr["epsilon"].to_numpy()[IN_KEYS]))
        assert np.all(np.isinf(pr["rho"].to_numpy()[IN_KEYS]))
        assert np.all(pr["epsilon"].to_numpy()[~IN_KEYS] == 0.0)
        conf = s.report().confidential_summary()  # quantiles of infinite losses are inf, not NaN
        assert conf["rho_max"] == conf["rho_q0.5"] == conf["rho_q0.999"] == math.inf
    else:
        assert pub["guarantee"] == {"type": "pure", "epsilon": 1.0, "delta": 0.0}
        e1, e2 = rel.eps_value, rel.eps_scale
        np.testing.assert_allclose(pr["rho"].to_numpy(), np.where(
            IN_KEYS, e1 * math.tanh(e1 / 2) + e2 * math.tanh(e2 / 2), 0.0), rtol=1e-14)


@pytest.mark.parametrize("level", [0.5, 0.95, 0.99])
def test_moe_level(make_frame, to_pl, level):
    s = tabdp.Session(seed=9)
    o = to_pl(_median(make_frame(DATA), s, level=level, noise="student_t"))
    rel = SmoothSensitivityRelease("student_t", 1.0)
    assert rel.gamma == pytest.approx(0.15 / 1.3, rel=1e-14)  # 0.15·ε₁, ε₁ = ε/1.3
    ss = np.array([brute_ss(c, 0.5, rel.gamma) for c in CELLS])
    _, _, moe = reference(rel, [true_quantile(c, 0.5) for c in CELLS], ss, 9, level)
    np.testing.assert_allclose(o["x_median_moe"].to_numpy(), moe, rtol=1e-15)
    assert s.report().to_dict()["queries"][0]["moe_level"] == level


def test_polyplace_gamma_above_half_epsilon_has_infinite_sd(make_frame, to_pl):
    # γ = 0.6 ≥ ε₁/2 with ε₁ = 0.8 (the default split would leave no budget for the value)
    o = to_pl(_median(make_frame(DATA), tabdp.Session(seed=9), gamma=0.6,
                      uncertainty_share=0.2))
    assert np.all(np.isinf(o["x_median_sd"].to_numpy()))
    assert np.all(np.isfinite(o["x_median_moe"].to_numpy()) & (o["x_median_moe"] > 0).to_numpy())


def test_laplace_left_out_by_a_budget(make_frame, to_pl):
    """Laplace smooth sensitivity is approximate DP only (rho = inf).

    A finite budget leaves every unit out (individual filter); the query still runs.
    """
    s = tabdp.Session(seed=10, budget=100.0)
    out = to_pl(_median(make_frame(DATA), s, noise="laplace"))
    assert out.height == len(KEYS)
    # the rows inside the keys
    assert s.report().confidential_summary()["queries"][0]["units_left_out_by_budget"] == 8
    assert to_pl(s.report().per_record)["rho"].to_list() == [0.0] * 10


def test_budget_leaves_units_out_before_noise(make_frame, to_pl):
    s = tabdp.Session(seed=10, budget=R1 + 0.01)
    _median(make_frame(DATA), s)  # ρ = R1 = 0.254 per row: within the budget
    _median(make_frame(DATA), s, epsilon=0.3, name="second")
    pr = to_pl(s.report().per_record)
    assert pr["rho_second"].to_list() == [0.0] * 10
    # the rows inside the keys
    assert s.report().confidential_summary()["queries"][1]["units_left_out_by_budget"] == 8


# ---------------------------------------------------------------------------------------------
# Bad input: right error class, nothing recorded, no noise drawn
# ---------------------------------------------------------------------------------------------
def _session_with_one_release(frame):
    s = tabdp.Session(seed=13)
    _median(frame, s)
    return s


BAD_ARGS = {
    "bounds-reversed": dict(bounds=(5.0, 1.0)),
    "bounds-equal": dict(bounds=(1.0, 1.0)),
    "bounds-inf": dict(bounds=(0.0, math.inf)),
    "bounds-nan": dict(bounds=(math.nan, 1.0)),
    "bounds-str": dict(bounds="x"),
    "bounds-str-pair": dict(bounds=("0", "10")),
    "bounds-one": dict(bounds=(0.0,)),
    "bounds-three": dict(bounds=(0.0, 1.0, 2.0)),
    "bounds-none": dict(bounds=None),
    "bounds-span-overflows": dict(bounds=(-1.5e308, 1.5e308)),
    "grid-uniform-unbounded-output": dict(bounds=(0.0, 1e306), grid=1e300),
    "q-neg": dict(q=-0.1),
    "q-big": dict(q=1.5),
    "q-nan": dict(q=math.nan),
    "q-str": dict(q="0.5"),
    "eps-0": dict(epsilon=0.0),
    "eps-neg": dict(epsilon=-1.0),
    "eps-inf": dict(epsilon=math.inf),
    "eps-nan": dict(epsilon=math.nan),
    "eps-str": dict(epsilon="1"),
    "noise-unknown": dict(noise="gaussian"),
    "noise-none": dict(noise=None),
    "gamma-0": dict(gamma=0.0),
    "gamma-neg": dict(gamma=-0.1),
    "polyplace-gamma-eps": dict(gamma=1.0),
    "polyplace-gamma-big": dict(gamma=1.5),
    "student_t-gamma-limit": dict(noise="student_t", gamma=1.0),
    "student_t-no-finite-sd": dict(noise="student_t", gamma=0.4),
    "cauchy-gamma-limit": dict(noise="cauchy", gamma=0.5),
    "laplace-gamma-limit": dict(noise="laplace", gamma=0.09),
    "laplace-delta-0": dict(noise="laplace", delta=0.0),
    "laplace-delta-1": dict(noise="laplace", delta=1.0),
    "delta-for-pure": dict(delta=1e-5),
    "share-0": dict(uncertainty_share=0.0),
    "share-1": dict(uncertainty_share=1.0),
    "share-neg": dict(uncertainty_share=-0.1),
    "share-nan": dict(uncertainty_share=math.nan),
    "share-str": dict(uncertainty_share="0.3"),
    "gamma-eats-default-split": dict(gamma=0.5),   # ε₂ = 2γ = ε
    "gamma-invalid-after-split": dict(gamma=0.5, uncertainty_share=0.6),   # γ ≥ ε₁ = 0.4
    "keys-columns": dict(keys=tabdp.KeySet.from_dict(county=["c1"])),
    "keys-dict": dict(keys={"county": ["c1"], "naics": ["11"]}),
    "by-short": dict(by=["county"]),
    "level-0": dict(level=0.0),
    "level-1.5": dict(level=1.5),
    "nulls": dict(nulls="ignore"),
    "session": dict(session="new"),
    "name": dict(name="bad name!"),
    "name-taken": dict(name="q1_median"),
    "column-list": dict(column=["x"]),
}


@pytest.mark.parametrize("call", list(BAD_ARGS.values()), ids=list(BAD_ARGS))
def test_bad_arguments(make_frame, snapshot, call):
    frame = make_frame(DATA)
    s = _session_with_one_release(frame)
    before = snapshot(s)
    kw = dict(column="x", q=0.9, by=["county", "naics"], keys=KEYS, bounds=BOUNDS, epsilon=1.0,
              session=s)
    kw.update(call)
    column, q = kw.pop("column"), kw.pop("q")
    with pytest.raises(tabdp.InvalidParameterError) as info:
        frame.dp.quantile(column, q, **kw)
    assert isinstance(info.value, ValueError)
    if "q" not in call:  # the same through dp.median
        with pytest.raises(tabdp.InvalidParameterError):
            frame.dp.median(column, **kw)
    assert snapshot(s) == before


def test_bounds_message_is_helpful(make_frame):
    with pytest.raises(tabdp.InvalidParameterError, match=r"(?s)low < high.*clipped"):
        _median(make_frame(DATA), tabdp.Session(seed=0), bounds=(5.0, 1.0))


def test_non_numeric_and_boolean_measures(make_frame, snapshot):
    s = _session_with_one_release(make_frame(DATA))
    before = snapshot(s)
    for x in (["1"] * 10, [True, False] * 5):
        with pytest.raises(tabdp.ColumnTypeError) as info:
            _median(make_frame({**DATA, "x": x}), s)
        assert isinstance(info.value, TypeError) and "'x'" in str(info.value)
    assert snapshot(s) == before


def test_missing_columns(make_frame, snapshot):
    s = _session_with_one_release(make_frame(DATA))
    before = snapshot(s)
    with pytest.raises(tabdp.ColumnNotFoundError) as info:
        make_frame(DATA).dp.median("xx", by=["county", "naics"], keys=KEYS, bounds=BOUNDS,
                                   epsilon=1.0, session=s)
    assert isinstance(info.value, KeyError) and "did you mean 'x'" in str(info.value)
    with pytest.raises(tabdp.ColumnNotFoundError):
        make_frame({k: v for k, v in DATA.items() if k != "naics"}).dp.median(
            "x", by=["county", "naics"], keys=KEYS, bounds=BOUNDS, epsilon=1.0, session=s)
    su = tabdp.Session(unit="estab", seed=0)
    with pytest.raises(tabdp.ColumnNotFoundError, match="estab"):
        _median(make_frame(DATA), su)
    assert snapshot(s) == before and len(su.records) == 0


NULLY = {
    "county": ["c1", "c1", "c1", "c1", "c3", "c3"],
    "naics": ["11"] * 6,
    "x": [50.0, None, 30.0, 40.0, math.nan, 70.0],
}
NULL_BOUNDS = (5.0, 100.0)


def test_nulls_error(make_frame, snapshot):
    frame = make_frame(NULLY)
    s = tabdp.Session(seed=14)
    before = snapshot(s)
    with pytest.raises(tabdp.DataValidationError) as info:
        _median(frame, s, bounds=NULL_BOUNDS)
    assert isinstance(info.value, ValueError) and "'x' holds missing" in str(info.value)
    assert info.value.confidential == {"missing_values:x": 2}
    assert snapshot(s) == before and len(s.records) == 0


@pytest.mark.parametrize("nulls", ["error", "zero", "drop"])
@pytest.mark.parametrize("bad", [math.inf, -math.inf])
def test_infinite_values_refused_under_every_policy(make_frame, snapshot, nulls, bad):
    s = tabdp.Session(seed=15)
    before = snapshot(s)
    with pytest.raises(tabdp.DataValidationError, match="infinite"):
        _median(make_frame({**DATA, "x": [bad, *DATA["x"][1:]]}), s, nulls=nulls)
    assert snapshot(s) == before


def test_nulls_zero(make_frame, to_pl, set_noise):
    set_noise(0.0)
    s = tabdp.Session(seed=16)
    o = to_pl(_median(make_frame(NULLY), s, bounds=NULL_BOUNDS, nulls="zero", name="m"))
    # (c1,11): [50, 0→5, 30, 40] → 30; (c3,11): [0→5, 70] → 5
    np.testing.assert_array_equal(o["x_median"].to_numpy(), [30.0, 5.0, 5.0, 5.0, 5.0, 5.0])
    conf = s.report().confidential_summary()["queries"][0]
    assert conf["missing_values_zero:x"] == 2
    assert conf["values_clipped_to_bounds"] == 2  # the two zeros are below the low bound
    assert conf["rows_in_released_cells"] == 6
    np.testing.assert_allclose(to_pl(s.report().per_record)["rho_m"].to_numpy(), [R1] * 6)
    assert s.report().to_dict()["queries"][0]["null_policy"] == "zero"


def test_nulls_drop(make_frame, to_pl, set_noise):
    set_noise(0.0)
    s = tabdp.Session(seed=17)
    o = to_pl(_median(make_frame(NULLY), s, bounds=NULL_BOUNDS, nulls="drop", name="m"))
    # (c1,11): [50, 30, 40] → 40; (c3,11): [70] → 70
    np.testing.assert_array_equal(o["x_median"].to_numpy(), [40.0, 5.0, 5.0, 5.0, 70.0, 5.0])
    conf = s.report().confidential_summary()["queries"][0]
    assert conf["missing_values_drop:x"] == 2
    assert conf["values_clipped_to_bounds"] == 0
    assert conf["rows_in_released_cells"] == 4
    pr = to_pl(s.report().per_record)
    assert pr["row"].to_list() == list(range(6))
    np.testing.assert_allclose(pr["rho_m"].to_numpy(), [R1, 0.0, R1, R1, 0.0, R1])


def test_other_refusals(make_frame, snapshot):
    # a row-mode session must see the same rows in every call
    s = _session_with_one_release(make_frame(DATA))
    before = snapshot(s)
    with pytest.raises(tabdp.InvalidParameterError, match="number of rows"):
        _median(make_frame(NULLY), s, nulls="drop")
    # the unit column can be neither the measure nor a key
    for unit in ("county", "x"):
        su = tabdp.Session(unit=unit, seed=0)
        with pytest.raises(tabdp.InvalidParameterError):
            _median(make_frame(DATA), su)
        assert len(su.records) == 0
    # null unit ids
    su = tabdp.Session(unit="u", seed=0)
    with pytest.raises(tabdp.DataValidationError, match="'u'"):
        _median(make_frame({**DATA, "u": [1, None] * 5}), su)
    # an output column would overwrite a key
    ks = tabdp.KeySet.from_dict(x_median=["a"])
    with pytest.raises(tabdp.InvalidParameterError, match="clash"):
        make_frame({"x_median": ["a"], "x": [1.0]}).dp.median(
            "x", by="x_median", keys=ks, bounds=BOUNDS, epsilon=1.0, session=s)
    assert snapshot(s) == before
    # not a frame at all
    with pytest.raises(tabdp.UnsupportedBackendError):
        quantile_release({"c": ["a"], "x": [1.0]}, column="x", q=0.5, median=True, by="c",
                         keys=tabdp.KeySet.from_dict(c=["a"]), bounds=BOUNDS, epsilon=1.0)


def test_one_off_session(make_frame):
    _median(make_frame(DATA), None, name="solo")
    last = tabdp.last_session()
    assert [r.name for r in last.records] == ["solo"]
    assert last.report().to_dict()["session"]["randomness"] == "secure (OS CSPRNG)"


# ---------------------------------------------------------------------------------------------
# Smooth-sensitivity floor
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bounds, value", [((0.0, 10.0), 5.0), ((1e9, 1e9 + 10.0), 1e9 + 5.0)],
                         ids=["near-0", "far-from-0"])
@pytest.mark.parametrize("gamma", [0.9, 0.45])
@ONE_ENGINE
def test_ss_floor_keeps_noise_in_huge_identical_cells(make_frame, to_pl, bounds, value, gamma):
    """10,000 identical values: SS = span·e^{−γ·5000} underflows to 0; the floor keeps noise."""
    lo, hi = bounds
    n = 10_000
    assert smooth_sensitivity_quantile([value] * n, 0.5, gamma, bounds) == 0.0  # it underflows
    frame = make_frame({"c": ["a"] * n, "x": [value] * n})
    ks = tabdp.KeySet.from_dict(c=["a"])
    o = to_pl(frame.dp.median("x", by="c", keys=ks, bounds=bounds, epsilon=1.0, gamma=gamma,
                              uncertainty_share=0.05, session=tabdp.Session(seed=18)))
    est, sd, moe, lower, upper = o.row(0)[1:]  # interval ends added on purpose (issue 16)
    assert (lower, upper) == (est - moe, est + moe)
    # The release is the exact value + floor·Z rounded to the default 32-bit relative grid. The
    # floor's noise (1e-12 of the bounds' magnitude) is below that grid's resolution (2.3e-10
    # relative), so the release may equal the rounded true value: still ε-DP (the exact
    # mechanism with the floored SS is, and rounding is post-processing); the floor shows in the
    # sd and the moe, which would be 0 without it.
    rel = SmoothSensitivityRelease("polyplace", 1.0, gamma, uncertainty_share=0.05)
    floor = SS_FLOOR * max(hi - lo, abs(lo), abs(hi))
    ref_est, ref_sd, ref_moe = reference(rel, [value], [floor], 18)
    assert est == ref_est[0]
    assert abs(est - value) < 1e-6 * max(abs(lo), hi - lo)
    assert sd > 0 and moe > 0
    assert moe == pytest.approx(ref_moe[0], rel=1e-15)
    if gamma < 0.475:
        assert sd == pytest.approx(ref_sd[0], rel=1e-15)
    else:
        assert sd == math.inf  # PolyPlace with γ ≥ ε₁/2 has no finite variance


# ---------------------------------------------------------------------------------------------
# Statistics over many cells (fixed seeds)
# ---------------------------------------------------------------------------------------------
N_CELLS = 5000  # KS power against scale x1.3 is marginal at 2000 cells (p ~ 1e-5)
CELL_VALUES = [10.0 * k for k in range(1, 12)] + [-50.0, 5000.0]  # two clipped values per cell
STAT_BOUNDS = (0.0, 1000.0)


@pytest.mark.parametrize("noise, gamma, check_sd", [
    ("polyplace", 0.1, True),      # α = 10: a light enough tail for the sample sd
    ("laplace", None, True),
    ("polyplace", None, False),    # α = 3: finite variance, infinite 4th moment
    ("student_t", None, False),
    ("cauchy", None, False),
])
@pytest.mark.slow
@ONE_ENGINE
def test_noise_law_sd_and_coverage_over_many_cells(make_frame, to_pl, noise, gamma, check_sd):
    k = len(CELL_VALUES)
    data = {"cell": np.repeat(np.arange(N_CELLS), k).tolist(),
            "x": CELL_VALUES * N_CELLS}
    ks = tabdp.KeySet.from_dict(cell=list(range(N_CELLS)))
    s = tabdp.Session(seed=19)
    o = to_pl(make_frame(data).dp.median("x", by="cell", keys=ks, bounds=STAT_BOUNDS,
                                         epsilon=1.0, noise=noise, gamma=gamma, session=s))
    rel = SmoothSensitivityRelease(noise, 1.0, gamma)
    m = rel.value
    truth = true_quantile(CELL_VALUES, 0.5, STAT_BOUNDS)
    assert truth == 60.0
    ss = brute_ss(CELL_VALUES, 0.5, m.gamma, STAT_BOUNDS)
    est = o["x_median"].to_numpy()
    sd = o["x_median_sd"].to_numpy()
    moe = o["x_median_moe"].to_numpy()
    # (estimate − truth)/SS follows the unit noise law, and not a rescaled one
    z = (est - truth) / ss
    assert_ks_fits(z, m.unit.cdf)
    assert_power(z, scaled_cdfs(m.unit.cdf))  # scale × 0.7 and × 1.3
    true_sd = ss * m.unit.std()
    if check_sd:
        assert np.std(est) == pytest.approx(true_sd, rel=0.10)
        assert abs(np.mean(est) - truth) < 4 * true_sd / math.sqrt(N_CELLS)
    # the published sd is not SS × a constant: ln(sd / true sd) is Laplace(γ/ε₂) noise, exactly
    assert rel.log_noise == pytest.approx(0.5, rel=1e-7)  # default split: ε₂ = 2γ
    err = np.log(sd / true_sd)
    lap = stats.laplace(scale=rel.log_noise).cdf
    assert_ks_fits(err, lap)
    assert_power(err, scaled_cdfs(lap))
    # the moe covers the true median with probability >= 0.9 (scale error included) ...
    cover = int(np.sum(np.abs(est - truth) <= moe))
    assert stats.binomtest(cover, N_CELLS, 0.9).pvalue > 1e-6
    # ... while the plug-in margin (unit quantile × estimated scale) would under-cover
    plug = sd / m.unit.std() * m.unit.interval_halfwidth(0.9)
    low = int(np.sum(np.abs(est - truth) <= plug))
    assert stats.binomtest(low, N_CELLS, 0.9).pvalue < 1e-6
    assert s.report().confidential_summary()["queries"][0]["values_clipped_to_bounds"] == \
        2 * N_CELLS


# ---------------------------------------------------------------------------------------------
# Issue 13: nothing published is computed from SS
# ---------------------------------------------------------------------------------------------
def _neighbour_frames(n_cells: int):
    """D: n cells holding CELL_VALUES and n empty cells; D′: every cell has one more record."""
    k = len(CELL_VALUES)
    full = {"cell": np.repeat(np.arange(n_cells), k).tolist(), "x": CELL_VALUES * n_cells}
    # an empty cell's SS is hi − lo; with one record at the midpoint it is (hi − lo)·e^{−γ}
    extra = {"cell": list(range(2 * n_cells)), "x": [5000.0] * n_cells + [500.0] * n_cells}
    d = pl.DataFrame(full)
    d2 = pl.concat([d, pl.DataFrame(extra)])
    return d, d2, tabdp.KeySet.from_dict(cell=list(range(2 * n_cells)))


def test_secure_runs_publish_different_uncertainty(to_engine, to_pl):
    """The attack of issue 13.

    With SS × a constant, secure runs on D published identical sd and moe, and an empty cell's sd
    was exactly (hi − lo)·std(Z). Now they are drawn.
    """
    d, d2, ks = _neighbour_frames(50)
    d = to_engine(d)
    outs = [to_pl(d.dp.median("x", by="cell", keys=ks, bounds=STAT_BOUNDS, epsilon=1.0,
                        session=tabdp.Session())) for _ in range(2)]
    for col in ("x_median_sd", "x_median_moe"):
        a, b = (o[col].to_numpy() for o in outs)
        assert np.all(a != b)
        # the empty cells too: drawn, not one constant (the published sd is exactly rounded to
        # a grid, so two of 50 draws may coincide: CI saw 49 distinct once)
        assert np.unique(a[50:]).size >= 45
    rel = SmoothSensitivityRelease("polyplace", 1.0)
    span_sd = (STAT_BOUNDS[1] - STAT_BOUNDS[0]) * rel.value.unit.std()
    assert not np.any(outs[0]["x_median_sd"].to_numpy() == span_sd)


def test_published_sd_on_neighbours_is_laplace_on_log_scale_within_eps2():
    """D and D plus one record per cell (non-empty and empty cells).

    The published ln sd is ln std(Z) + ln SS + Laplace(b) on each (KS + power), the centres differ
    by at most γ (SS from the release's own function), and the exact log probability ratio of every
    published value under the two datasets is at most ε₂.
    """
    n = 3000
    d, d2, ks = _neighbour_frames(n)
    rel = SmoothSensitivityRelease("polyplace", 1.0)
    g, b, eps2 = rel.gamma, rel.log_noise, rel.eps_scale
    centres = []
    for frame, seed in ((d, 31), (d2, 32)):
        with warnings_as_errors():
            o = frame.dp.median("x", by="cell", keys=ks, bounds=STAT_BOUNDS, epsilon=1.0,
                                session=tabdp.Session(seed=seed))
        cells = frame.sort("cell")
        vals, off = group_sort(np.clip(cells["x"].to_numpy(), *STAT_BOUNDS),
                               cells["cell"].to_numpy(), 2 * n)
        c = np.log(floored_smooth_sensitivity(vals, off, 0.5, g, STAT_BOUNDS))
        centres.append(c)
        log_scale = np.log(o["x_median_sd"].to_numpy() / rel.value.unit.std())
        lap = stats.laplace(scale=b).cdf
        for part in (slice(0, n), slice(n, 2 * n)):        # non-empty, empty (D) cells
            assert_ks_fits(log_scale[part] - c[part], lap)
            assert_power(log_scale[part] - c[part], scaled_cdfs(lap))
        centres.append(np.rint(log_scale / LOG_SCALE_GRID))  # the published grid indices
    c1, k1, c2, k2 = centres
    shift = np.abs(c1 - c2)
    assert np.all(shift <= g * (1 + 1e-12))
    assert shift[n:] == pytest.approx(g, rel=1e-12)         # empty vs one record: ln SS moves γ
    for k in (k1, k2):   # exact log P(L = k) under D and under D′, for every published value
        ratio = np.abs(_cell_logprob(k, c1, b) - _cell_logprob(k, c2, b))
        assert ratio.max() <= eps2 * (1 + 1e-9)
        assert ratio.max() >= 0.99 * eps2                    # attained: the bound is sharp


def _cell_logprob(k, c, b):
    """Natural log of P(round(c + Laplace(b)) = k·grid) on the log-scale grid, per cell."""
    gstep = LOG_SCALE_GRID
    lo, hi = (k - 0.5) * gstep - c, (k + 0.5) * gstep - c
    out = np.empty(k.shape)
    r, lft = lo >= 0, hi <= 0
    m = ~(r | lft)
    out[r] = -lo[r] / b + np.log(-np.expm1(-gstep / b)) - math.log(2)
    out[lft] = hi[lft] / b + np.log(-np.expm1(-gstep / b)) - math.log(2)
    out[m] = np.log1p(-0.5 * np.exp(lo[m] / b) - 0.5 * np.exp(-hi[m] / b))
    return out


class warnings_as_errors:  # noqa: N801
    """Context manager: any warning (e.g. an overflow computed from SS) fails the test."""

    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("error")
        return self

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)


def test_grid_fineness_never_depends_on_the_data(make_frame, to_pl):
    """A uniform grid is never refused because of the data.

    Beyond 2**40 steps the public grid keeps 40 significant bits (exact-rounding.md §5), so a grid
    far finer than the bounds' size is accepted on every dataset (before, the check read max|q| and
    SS: a refusal depended on the data).
    """
    rel = SmoothSensitivityRelease("polyplace", 1.0)
    bounds = (0.0, 1e6)
    mag = exact.grid_magnitude(rel.value.unit, np.array([1e6]), np.array([1e6]))
    fine = 0.5 * exact.MIN_GRID_RATIO * mag       # refused by the old check for every dataset
    ks = tabdp.KeySet.from_dict(c=["a"])
    for data in ({"c": [], "x": []}, {"c": ["a"] * 200, "x": [5.0] * 200}):
        frame = make_frame(data, {"c": pl.String, "x": pl.Float64})
        s = tabdp.Session(seed=0)
        out = frame.dp.median("x", by="c", keys=ks, bounds=bounds, epsilon=1.0, grid=fine,
                              session=s)
        assert to_pl(out).height == 1 and len(s.records) == 1
