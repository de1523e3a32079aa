"""Tests of tabdp.calibrate: targets met, σ minimal, shapes optimal, closed forms, errors."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from scipy.optimize import brentq

from tabdp.calibrate import (
    FAMILIES,
    CalibrationResult,
    FamilyComparison,
    calibrate,
    compare_families,
)
from tabdp.exceptions import CalibrationError, InvalidParameterError
from tabdp.mechanisms import (
    ExpPolyLog,
    Gaussian,
    GeneralizedGaussian,
    Laplace,
    LogTransform,
    Mechanism,
    RootTransform,
    UnitSplitting,
    pure_to_zcdp,
)

DESIGN = {1e3: 0.5, 1e7: 10.0}  # DESIGN.md "Planning": records of 1e3 at most 0.5, 1e7 at most 10
TYPICAL = 1e6
SPREAD = {10.0: 0.05, 1e3: 1.0, 1e5: 4.0}  # three sizes; several families bind at the small one
SPREAD_TYPICAL = 5e3

SCALE_NAME = {Laplace: "scale"}
CLASS = {"gaussian": Gaussian, "laplace": Laplace, "generalized_gaussian": GeneralizedGaussian,
         "exp_polylog": ExpPolyLog, "root": RootTransform, "log": LogTransform,
         "unit_splitting": UnitSplitting}


# -- independent helpers ------------------------------------------------------------------------
def _with(mech: Mechanism, **changes: Any) -> Mechanism:
    return type(mech)(**{**mech.params(), **changes})


def _scale_of(mech: Mechanism) -> tuple[str, float]:
    name = SCALE_NAME.get(type(mech), "sigma")
    return name, float(mech.params()[name])


def _ratio(mech: Mechanism, targets: Mapping[float, float]) -> float:
    d = np.array(list(targets), dtype=float)
    t = np.array(list(targets.values()), dtype=float)
    return float(np.max(np.asarray(mech.rho(d)) / t))


def _min_scale_mechanism(mech: Mechanism, targets: Mapping[float, float]) -> Mechanism:
    """Independent re-solve of the smallest scale meeting the targets (bisection on log σ)."""
    name, s0 = _scale_of(mech)

    def f(ls: float) -> float:
        return math.log(_ratio(_with(mech, **{name: math.exp(ls)}), targets))

    lo, hi = math.log(s0) - 1.0, math.log(s0) + 1.0
    while f(lo) < 0:
        lo -= 2.0
    while f(hi) > 0:
        hi += 2.0
    ls = brentq(f, lo, hi, xtol=1e-13, rtol=1e-15)
    m = _with(mech, **{name: math.exp(ls)})
    k = 0
    while _ratio(m, targets) > 1.0:
        k += 1
        m = _with(mech, **{name: math.exp(ls) * (1.0 + 1e-15 * 2**k)})
    return m


def _error(mech: Mechanism, res: CalibrationResult) -> float:
    q = np.array([res.typical_total])
    if res.objective == "sd":
        return float(mech.sd_at(q)[0])
    return float(mech.moe_at(q, res.level)[0])


def _check_targets(res: CalibrationResult, targets: Mapping[float, float]) -> None:
    mech = res.mechanism
    sizes = np.array(list(targets), dtype=float)
    got = np.asarray(mech.rho(sizes), dtype=float)
    tgt = np.array(list(targets.values()), dtype=float)
    assert np.all(got <= tgt), (mech, got, tgt)
    assert dict(res.achieved) == pytest.approx(dict(zip(targets, got, strict=True)), rel=1e-12)
    assert len(res.binding) >= 1
    for d in res.binding:
        assert res.achieved[d] == pytest.approx(targets[d], rel=1e-9)
    for d in targets:
        if d not in res.binding:
            assert res.achieved[d] < targets[d] * (1 - 1e-9)
    # the scale is minimal: 0.1% less noise breaks a target
    name, s = _scale_of(mech)
    assert _ratio(_with(mech, **{name: s * 0.999}), targets) > 1.0
    # reported errors are the mechanism's own
    q = np.array([res.typical_total])
    assert res.sd == pytest.approx(float(mech.sd_at(q)[0]), rel=1e-12)
    assert res.moe == pytest.approx(float(mech.moe_at(q, res.level)[0]), rel=1e-12)
    assert res.error == (res.sd if res.objective == "sd" else res.moe)
    assert dict(res.params) == mech.params()


def _check_optimal(res: CalibrationResult, targets: Mapping[float, float],
                   shapes: tuple[str, ...], tol: float = 1e-9) -> None:
    """Perturbing each shape parameter by ±5% (σ re-solved) never lowers the objective.

    At the edge of a searched range (e.g. ExpPolyLog d -> infinity, the Laplace limit) the result
    must say so, and going past the edge may only gain a negligible amount.
    """
    best = res.error
    at_edge = any("edge of the searched range" in n for n in res.notes)
    params = res.mechanism.params()
    tried = 0
    for name in shapes:
        for f in (0.95, 1.05):
            try:
                trial = _with(res.mechanism, **{name: params[name] * f})
            except InvalidParameterError:
                continue  # outside the valid range (e.g. GG p > 1, ExpPolyLog a < e^(p-1))
            trial = _min_scale_mechanism(trial, targets)
            floor = best * (1 - 1e-3) if at_edge else best * (1 - tol)
            assert _error(trial, res) >= floor, (name, f, trial, res.mechanism)
            tried += 1
    assert tried >= len(shapes)


# -- every family meets the targets with a minimal scale and optimal shapes ----------------------
CASES = [
    # (family, pinned, shape parameters to perturb)
    ("gaussian", {}, ()),
    ("laplace", {}, ()),
    ("generalized_gaussian", {}, ("p",)),
    ("generalized_gaussian", {"p": 0.5}, ()),
    ("exp_polylog", {}, ("a", "d")),
    ("exp_polylog", {"p": 1}, ("d",)),
    ("exp_polylog", {"p": 2}, ("a", "d")),
    ("exp_polylog", {"p": 2, "a": 10.0}, ("d",)),
    ("root", {}, ("offset",)),
    ("root", {"k": 4}, ("offset",)),
    ("root", {"k": 3, "estimator": "median"}, ("offset",)),
    ("root", {"estimator": "median"}, ("k", "offset")),
    ("log", {}, ("offset",)),
    ("log", {"estimator": "median"}, ("offset",)),
    ("unit_splitting", {}, ("threshold",)),
    ("unit_splitting", {"threshold": 3e5}, ()),
]


@pytest.mark.parametrize("targets,typical", [(DESIGN, TYPICAL), (SPREAD, SPREAD_TYPICAL)],
                         ids=["design", "spread"])
@pytest.mark.parametrize("family,pinned,shapes", CASES,
                         ids=[f"{c[0]}-{'-'.join(f'{k}{v}' for k, v in c[1].items())}"
                              for c in CASES])
def test_targets_met_scale_minimal_shapes_optimal(family: str, pinned: dict[str, Any],
                                                  shapes: tuple[str, ...],
                                                  targets: dict[float, float],
                                                  typical: float) -> None:
    res = calibrate(family, targets, typical, **pinned)
    assert res.family == family
    assert type(res.mechanism) is CLASS[family]
    assert res.objective == "sd" and math.isfinite(res.sd)
    _check_targets(res, targets)
    _check_optimal(res, targets, shapes)
    for k, v in pinned.items():
        assert res.mechanism.params()[k] == v
        assert k not in res.searched


def test_optimum_beats_a_shape_grid() -> None:
    """The searched log offset is at least as good as every offset of a wide grid."""
    res = calibrate("log", SPREAD, SPREAD_TYPICAL)
    for a in np.logspace(-6, 12, 73):
        trial = _min_scale_mechanism(LogTransform(sigma=1.0, offset=float(a)), SPREAD)
        assert _error(trial, res) >= res.sd * (1 - 1e-9)


def test_root_integer_k_is_best_over_all_k() -> None:
    res = calibrate("root", SPREAD, SPREAD_TYPICAL)
    for k in range(1, 17):
        other = calibrate("root", SPREAD, SPREAD_TYPICAL, k=k)
        assert other.sd >= res.sd * (1 - 1e-9)


def test_exp_polylog_p_searched_over_one_and_two() -> None:
    res = calibrate("exp_polylog", DESIGN, TYPICAL)
    p1 = calibrate("exp_polylog", DESIGN, TYPICAL, p=1)
    p2 = calibrate("exp_polylog", DESIGN, TYPICAL, p=2)
    assert res.sd == pytest.approx(min(p1.sd, p2.sd), rel=1e-12)
    assert res.searched[0] == "p"


# -- closed forms -------------------------------------------------------------------------------
def test_gaussian_closed_form_single_target() -> None:
    res = calibrate("gaussian", {1e3: 0.5}, 0.0)
    assert res.mechanism == Gaussian(sigma=1000.0)
    assert res.binding == (1e3,)
    assert res.sd == 1000.0
    assert res.achieved[1e3] == 0.5


def test_gaussian_closed_form_max_over_targets() -> None:
    res = calibrate("gaussian", DESIGN, TYPICAL)
    expected = max(d / math.sqrt(2 * r) for d, r in DESIGN.items())
    assert res.mechanism.sigma == pytest.approx(expected, rel=1e-15)
    assert res.binding == (1e7,)


def test_laplace_closed_form_inverts_tanh_conversion() -> None:
    rho = float(pure_to_zcdp(2.0))  # ε = 2 at Δ = 4 → scale 2
    res = calibrate("laplace", {4.0: rho}, 0.0)
    assert res.mechanism.scale == pytest.approx(2.0, rel=1e-13)
    assert float(res.mechanism.epsilon(4.0)) == pytest.approx(2.0, rel=1e-13)
    # tiny and huge targets invert accurately too
    for r in (1e-12, 1e-3, 50.0, 1e6):
        m = calibrate("laplace", {1.0: r}, 0.0).mechanism
        assert float(m.rho(1.0)) == pytest.approx(r, rel=1e-12)


def test_generalized_gaussian_closed_form() -> None:
    eps = 3.0
    res = calibrate("generalized_gaussian", {100.0: float(pure_to_zcdp(eps))}, 0.0, p=0.5)
    assert res.mechanism.sigma == pytest.approx(100.0 / eps**2, rel=1e-12)


def test_log_closed_form_with_pinned_offset() -> None:
    res = calibrate("log", {1e4: 10.6036}, 0.0, offset=1.0)
    assert res.mechanism.sigma == pytest.approx(math.log1p(1e4) / math.sqrt(2 * 10.6036),
                                                rel=1e-14)
    assert res.searched == ()


def test_root_closed_form_with_pinned_k_and_offset() -> None:
    # seed 001 Example 4.6: k = 4, a = 0, σ = 2 gives ρ(10000) = 12.5
    res = calibrate("root", {1e4: 12.5}, 100.0, k=4, offset=0.0)
    assert res.mechanism.sigma == pytest.approx(2.0, rel=1e-14)
    res = calibrate("root", {50.0: 0.3}, 100.0, k=2, a=7.0)
    expected = (math.sqrt(57.0) - math.sqrt(7.0)) / math.sqrt(0.6)
    assert res.mechanism.sigma == pytest.approx(expected, rel=1e-13)
    assert res.mechanism.offset == 7.0


def test_exp_polylog_p1_closed_form() -> None:
    eps, d = 5.0, 4.0
    res = calibrate("exp_polylog", {1e3: float(pure_to_zcdp(eps))}, 0.0, p=1, d=d)
    m = res.mechanism
    assert m.sigma * m.a == pytest.approx(1e3 / math.expm1(eps / d), rel=1e-12)
    assert res.sd == pytest.approx(m.sigma * m.a * math.sqrt(2 / ((d - 2) * (d - 3))), rel=1e-12)


def test_unit_splitting_closed_form_seed_example() -> None:
    # seed 001 Example 2.16: τ = 10, σ² = 50 → one row costs ρ = 1
    res = calibrate("unit_splitting", {10.0: 1.0}, 0.0, threshold=10.0)
    assert res.mechanism.sigma == pytest.approx(math.sqrt(50.0), rel=1e-14)
    assert res.mechanism.rho([5, 5, 10, 20, 30, 10000]).round(6).tolist() == \
        [1.0, 1.0, 1.0, 4.0, 9.0, 1e6]


def test_unit_splitting_never_beats_gaussian_and_matches_it_when_free() -> None:
    for targets in (DESIGN, SPREAD, {3.0: 0.2, 7.0: 0.9}):
        g = calibrate("gaussian", targets, 0.0)
        u = calibrate("unit_splitting", targets, 0.0)
        assert u.sd == pytest.approx(g.sd, rel=1e-9)
        assert "never beats the Gaussian" in u.explain()
        pinned = calibrate("unit_splitting", targets, 0.0, threshold=0.3)
        assert pinned.sd >= g.sd * (1 - 1e-12)


# -- the DESIGN planning example ----------------------------------------------------------------
@pytest.mark.parametrize("family", ["log", "root", "exp_polylog"])
def test_design_example_slowly_scaling_families(family: str) -> None:
    res = calibrate(family, DESIGN, TYPICAL)
    assert float(res.mechanism.rho(1e3)) <= 0.5
    assert float(res.mechanism.rho(1e7)) <= 10.0
    assert res.binding == (1e7,)
    gauss = calibrate("gaussian", DESIGN, TYPICAL)
    assert res.sd < gauss.sd
    text = res.explain()
    assert "binding" in text and "1e+07" in text and "slack" in text


def test_targets_where_small_records_bind() -> None:
    # a loose target at 1e7 leaves the 1e3 target binding for the log transform
    res = calibrate("log", {1e3: 0.5, 1e7: 1000.0}, 1e4, offset=1.0)
    assert res.binding == (1e3,)
    assert res.achieved[1e7] < 1000.0


def test_equal_targets_note_implied_target() -> None:
    # equal targets are accepted: the larger size's target implies the smaller one's
    targets = {1e3: 1.0, 1e5: 1.0}
    res = calibrate("log", targets, 1e4)
    _check_targets(res, targets)
    assert res.binding == (1e5,)
    assert any("implied" in n for n in res.notes)
    assert "cannot bind" in res.explain()


def test_decreasing_targets_are_refused() -> None:
    # issue 28: a larger record allowed less loss than a smaller one gives a useless mechanism
    with pytest.raises(InvalidParameterError, match="targets decrease with record size") as info:
        calibrate("log", {1e3: 2.0, 1e5: 1.0}, 1e4)
    assert "size 100000 is allowed rho = 1" in str(info.value)


# -- objectives ---------------------------------------------------------------------------------
def test_infinite_variance_falls_back_to_moe_and_says_so() -> None:
    res = calibrate("exp_polylog", DESIGN, TYPICAL, p=1, d=2.5)
    assert res.objective == "moe"
    assert math.isinf(res.sd) and math.isfinite(res.moe)
    assert any("margin of error was minimized" in n for n in res.notes)
    assert "margin of error" in res.explain().splitlines()[1]
    _check_targets(res, DESIGN)


def test_infinite_variance_with_sd_objective_is_explained() -> None:
    with pytest.raises(CalibrationError, match=r"infinite.*\n.*objective='moe'.*d > 3"):
        calibrate("exp_polylog", DESIGN, TYPICAL, p=1, d=2.5, objective="sd")


def test_moe_objective() -> None:
    res = calibrate("exp_polylog", DESIGN, TYPICAL, p=1, objective="moe", level=0.95)
    assert res.objective == "moe" and res.level == 0.95
    _check_targets(res, DESIGN)
    _check_optimal(res, DESIGN, ("d",))
    sd_res = calibrate("exp_polylog", DESIGN, TYPICAL, p=1, level=0.95)
    assert res.moe <= sd_res.moe * (1 + 1e-12)
    assert res.mechanism.d < 3.0 < sd_res.mechanism.d  # the moe search may use d <= 3


def test_exp_polylog_pinned_d_below_three_prefers_p2_when_p_free() -> None:
    res = calibrate("exp_polylog", DESIGN, TYPICAL, d=2.5)
    assert res.mechanism.p == 2.0 and res.objective == "sd"


def test_exp_polylog_pinned_a_excludes_p2() -> None:
    res = calibrate("exp_polylog", DESIGN, TYPICAL, a=1.0)
    assert res.mechanism.p == 1.0
    assert any("not possible" in n for n in res.notes)


# -- compare_families ---------------------------------------------------------------------------
def test_compare_families_orders_by_error() -> None:
    cmp = compare_families(DESIGN, TYPICAL)
    assert isinstance(cmp, FamilyComparison)
    assert sorted(r.family for r in cmp) == sorted(FAMILIES)
    sds = [r.sd for r in cmp]
    assert sds == sorted(sds)
    assert cmp.best is cmp[0] and len(cmp) == len(FAMILIES)
    for r in cmp:
        alone = calibrate(r.family, DESIGN, TYPICAL)
        assert alone.sd == pytest.approx(r.sd, rel=1e-12)
        _check_targets(r, DESIGN)
    # slowly scaling families beat the Gaussian baselines for these targets
    rank = {r.family: i for i, r in enumerate(cmp)}
    for fam in ("log", "root", "exp_polylog", "generalized_gaussian"):
        assert rank[fam] < rank["gaussian"]
    text = str(cmp)
    for fam in FAMILIES:
        assert fam in text
    rows = cmp.to_rows()
    assert [row["rank"] for row in rows] == list(range(1, len(FAMILIES) + 1))
    assert rows[0]["family"] == cmp.best.family


def test_compare_families_subset_pins_and_moe_ranking() -> None:
    cmp = compare_families(SPREAD, SPREAD_TYPICAL, families=["RootTransform", "gaussian"],
                           fixed={"root": {"k": 2}}, objective="moe")
    assert {r.family for r in cmp} == {"root", "gaussian"}
    assert cmp.sort_by == "moe"
    assert [r.moe for r in cmp] == sorted(r.moe for r in cmp)
    root = next(r for r in cmp if r.family == "root")
    assert root.mechanism.k == 2.0 and root.objective == "moe"


def test_compare_families_records_failures() -> None:
    cmp = compare_families(DESIGN, TYPICAL, families=["gaussian", "generalized_gaussian"],
                           fixed={"generalized_gaussian": {"p": 2.0}})
    assert [r.family for r in cmp] == ["gaussian"]
    assert "generalized_gaussian" in cmp.failed
    assert "failed" in cmp.to_text()


def test_compare_families_rejects_pins_for_absent_family() -> None:
    with pytest.raises(InvalidParameterError, match="not among the families"):
        compare_families(DESIGN, TYPICAL, families=["gaussian"], fixed={"root": {"k": 4}})
    with pytest.raises(InvalidParameterError, match="families is empty"):
        compare_families(DESIGN, TYPICAL, families=[])


# -- names and results --------------------------------------------------------------------------
@pytest.mark.parametrize("name,family", [
    ("Gaussian", "gaussian"), ("LAPLACE", "laplace"),
    ("GeneralizedGaussian", "generalized_gaussian"),
    ("generalized-gaussian", "generalized_gaussian"),
    ("ExpPolyLog", "exp_polylog"), ("RootTransform", "root"), ("root_transform", "root"),
    ("LogTransform", "log"), ("UnitSplitting", "unit_splitting"), (" log ", "log"),
])
def test_family_names(name: str, family: str) -> None:
    assert calibrate(name, {1e3: 0.5}, 1e3, **({"p": 1} if family == "exp_polylog" else {})) \
        .family == family


def test_unknown_family_lists_valid_ones() -> None:
    with pytest.raises(InvalidParameterError, match=r"unknown mechanism family 'gausian'.*"
                                                    r"Did you mean 'gaussian'") as info:
        calibrate("gausian", DESIGN, TYPICAL)
    for fam in FAMILIES:
        assert fam in str(info.value)
    with pytest.raises(InvalidParameterError, match="family must be a string"):
        calibrate(Gaussian, DESIGN, TYPICAL)  # type: ignore[arg-type]


def test_result_is_frozen_and_read_only() -> None:
    res = calibrate("gaussian", DESIGN, TYPICAL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.sd = 0.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        res.achieved[1e3] = 0.0  # type: ignore[index]
    assert str(res) == res.explain()


def test_explain_reports_everything() -> None:
    res = calibrate("root", DESIGN, TYPICAL, k=4)
    text = res.explain()
    assert text.startswith("Calibrated root mechanism: RootTransform(")
    assert "standard deviation" in text and "1e+06" in text
    assert "searched: offset" in text and "pinned: k=4" in text
    assert "0.5" in text and "10" in text and "binding" in text


# -- invalid input ------------------------------------------------------------------------------
@pytest.mark.parametrize("targets,match", [
    ({}, "targets is empty"),
    ([(1e3, 0.5)], "must be a mapping"),
    ({0.0: 0.5}, r"record size .* > 0; got 0\.0"),
    ({-5.0: 0.5}, r"got -5\.0"),
    ({math.inf: 0.5}, "record size"),
    ({1e3: 0.0}, r"target ρ for record size Δ=1000\.0 must be finite and > 0; got 0\.0"),
    ({1e3: -1.0}, "target ρ"),
    ({1e3: math.nan}, "target ρ"),
    ({1e3: math.inf}, "target ρ"),
    ({1e3: "0.5"}, "must be a real number"),
    ({1e3: 0.5, "x": 1.0}, "record size"),
])
def test_invalid_targets(targets: Any, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match) as info:
        calibrate("gaussian", targets, TYPICAL)
    assert "Hint:" in str(info.value)


def test_invalid_typical_total_level_objective() -> None:
    with pytest.raises(InvalidParameterError, match=r"typical_total must be finite and >= 0; "
                                                    r"got -1\.0"):
        calibrate("log", DESIGN, -1.0)
    with pytest.raises(InvalidParameterError, match="level"):
        calibrate("log", DESIGN, 1.0, level=1.5)
    with pytest.raises(InvalidParameterError, match="objective must be one of"):
        calibrate("log", DESIGN, 1.0, objective="variance")


def test_invalid_pins() -> None:
    with pytest.raises(InvalidParameterError, match=r"'gaussian' has no parameter 'k'.*\n"
                                                    r".*nothing"):
        calibrate("gaussian", DESIGN, TYPICAL, k=4)
    with pytest.raises(InvalidParameterError, match=r"accepts a, d, offset, p"):
        calibrate("exp_polylog", DESIGN, TYPICAL, k=4)
    with pytest.raises(InvalidParameterError, match="'sigma' cannot be pinned"):
        calibrate("log", DESIGN, TYPICAL, sigma=1.0)
    with pytest.raises(InvalidParameterError, match="'scale' cannot be pinned"):
        calibrate("laplace", DESIGN, TYPICAL, scale=1.0)
    with pytest.raises(InvalidParameterError, match="pinned twice"):
        calibrate("log", DESIGN, TYPICAL, offset=1.0, a=2.0)


@pytest.mark.parametrize("family,pinned,match", [
    ("generalized_gaussian", {"p": 2.0}, r"p must be finite and > 0 and <= 1"),
    ("generalized_gaussian", {"p": 0.0}, r"p must be"),
    ("exp_polylog", {"p": 2.0, "a": 1.5}, r"e\^\(p-1\)"),
    ("exp_polylog", {"p": 0.5}, r"p must be finite and >= 1"),
    ("exp_polylog", {"p": 1, "d": 0.9}, r"d must be finite and > 1"),
    ("exp_polylog", {"p": 1, "d": 1.0001}, r"overflows"),
    ("exp_polylog", {"a": -1.0}, r"a must be"),
    ("root", {"k": 0.5}, r"k must be finite and >= 1"),
    ("root", {"k": 2.5}, r"whole-number k.*\n.*estimator='median'"),
    ("root", {"offset": -1.0}, r"offset must be"),
    ("root", {"estimator": "mode"}, r"estimator must be 'mean' or 'median'"),
    ("log", {"offset": 0.0}, r"offset must be finite and > 0"),
    ("unit_splitting", {"threshold": -1.0}, r"threshold must be"),
])
def test_invalid_pinned_values_are_calibration_errors(family: str, pinned: dict[str, Any],
                                                      match: str) -> None:
    with pytest.raises(CalibrationError, match=match) as info:
        calibrate(family, DESIGN, TYPICAL, **pinned)
    assert "pinned parameters" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_targets_beyond_floating_point_range() -> None:
    with pytest.raises(CalibrationError, match="outside the range of floating point"):
        calibrate("gaussian", {1e300: 1e-300}, 0.0)
    with pytest.raises(CalibrationError, match="outside the range of floating point"):
        calibrate("laplace", {1e300: 1e-300}, 0.0)


# -- calibration targets -----------------------------------------------------------------------
def test_decreasing_targets_refused_python() -> None:
    with pytest.raises(InvalidParameterError, match="targets decrease with record size"):
        calibrate("log", {1e3: 0.5, 1e7: 0.2}, typical_total=1e6)
    with pytest.raises(InvalidParameterError, match="targets decrease with record size"):
        compare_families({1e3: 0.5, 1e7: 0.2}, typical_total=1e6)
    # equal targets are accepted (the smaller one is redundant)
    res = calibrate("gaussian", {1e3: 0.5, 1e7: 0.5}, typical_total=1e6)
    assert res.binding == (1e7,)
