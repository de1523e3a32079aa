"""Shared fixtures: every frame test runs over the five engines (input forms) of the accessor.

- ``"pandas"``: a ``pd.DataFrame``;
- ``"polars"``: a ``pl.DataFrame``;
- ``"lazy"``: a ``pl.LazyFrame`` from ``.lazy()`` (the plan holds the data in memory);
- ``"streaming"``: a ``pl.LazyFrame`` from ``pl.scan_parquet`` of a file written to the test's
  ``tmp_path``: an input the caller never materialises;
- ``"spark"``: a PySpark DataFrame (marker ``spark``; the Spark runs of frame tests that check
  no refusal also carry ``slow`` and ``spark_full``, see ``pytest_collection_modifyitems``).

``engine`` is the parametrized fixture; ``as_engine(df, engine, tmp_path)`` converts a frame
(pandas or Polars) to a form and ``as_polars`` normalises any returned frame for comparison.
``backend`` / ``make_frame`` are the older names the frame tests use (same five forms).
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _loop  # noqa: E402
from _engines import ENGINES, as_engine, as_polars, build_frame, spark_session  # noqa: E402

_CACHE_ENV = "TABDP_CACHE_DIR"
_SHARED_ENV = "TABDP_TEST_CACHE_SHARED"  # the run's folder, for pytest-xdist's workers
_CACHE_KEY = pytest.StashKey[tuple[str, "str | None"]]()


def pytest_configure(config: pytest.Config) -> None:
    """Give the whole test run its own empty on-disk table cache (``tabdp._cache``).

    It is removed at the end, so tests never read or write the user's cache. A test that needs
    another folder opts in with ``monkeypatch.setenv("TABDP_CACHE_DIR", ...)``. Under
    ``pytest -n`` (pytest-xdist) the workers share the controller's folder: a table is built
    once per run (the cache is safe for concurrent writers, tests/noise/test_table_cache.py).
    """
    # the local loop (`make test-fast`: -m "not slow ..."): tests/_loop.examples() draws fewer
    # Hypothesis examples there; CI (no -m) draws the full counts
    _loop.FAST_LOOP = "not slow" in (config.getoption("markexpr", "") or "")
    shared = os.environ.get(_SHARED_ENV) if hasattr(config, "workerinput") else None
    if shared:  # a pytest-xdist worker: the controller's folder (the controller removes it)
        config.stash[_CACHE_KEY] = (None, None)
        os.environ[_CACHE_ENV] = shared
        return
    folder = tempfile.mkdtemp(prefix="tabdp-test-cache-")
    config.stash[_CACHE_KEY] = (folder, os.environ.get(_CACHE_ENV))
    os.environ[_CACHE_ENV] = folder
    os.environ[_SHARED_ENV] = folder  # inherited by the workers `pytest -n` starts


def pytest_unconfigure(config: pytest.Config) -> None:
    """Restore ``TABDP_CACHE_DIR`` and remove the run's table cache."""
    folder, old = config.stash.get(_CACHE_KEY, (None, None))
    if folder is None:
        return
    os.environ.pop(_SHARED_ENV, None)
    if old is None:
        os.environ.pop(_CACHE_ENV, None)
    else:
        os.environ[_CACHE_ENV] = old
    shutil.rmtree(folder, ignore_errors=True)

#: The local loop's (``make test-fast``) share of some costly parametrized tests: the test ids
#: listed run in every loop; the test's other parametrizations carry ``slow`` (CI runs them all,
#: ``make test``). Each subset keeps representative cases of the test (engines, budget forms,
#: edge cases); some paths the full set reaches run in CI only (named in the comments). Keys are
#: ``"<path under tests/>::<test name>"``; values the ids in brackets of the test's node id.
FAST_SUBSETS: dict[str, frozenset[str]] = {
    # review R14's neighbouring type edges and partition folders: one of each kind stays fast
    # (a float and a unit id; an escaped partition folder: the nested type, the text edges
    # and the default partition folder run in CI only)
    "release/test_author_declared_attacks.py::test_one_record_at_a_type_edge_changes_only_the_noise":
        frozenset({"float_nan", "unit_null"}),
    "release/test_author_declared_attacks.py::test_one_record_alone_in_its_partition_folder":
        frozenset({"state=%30%32/x.parquet"}),
    # the float-stored integer leak (issue 27): a fraction stays fast; a missing value, NaN
    # and 2**63 (the same scan, other values) run in CI
    "release/test_author_attacks.py::test_integer_column_stored_as_float_by_one_file":
        frozenset({"a fraction"}),
    # overwrite between authors: the default policy stays fast ("never" in CI)
    "release/test_author_attacks.py::test_overwrite_between_authors":
        frozenset({"None"}),
    # native stderr to the confidential folder: the author's run stays fast
    "release/test_author_attacks.py::test_native_stderr_goes_to_the_confidential_folder":
        frozenset({"author"}),
    # seeded reruns (two whole runs each, 3 s): both modes in CI
    "release/test_cli.py::test_seeded_runs_reproduce_the_confidential_folder":
        frozenset(),
    # 9 frames x 3 reports, each page rendered twice (plots): seven rows in the loop (one row,
    # 5 s, and no rows, NaN/null: 14 s, in CI)
    "report/test_confidential_streaming.py::test_lazy_page_equals_eager_page":
        frozenset({"7"}),
    # one moderate law per family (each builds its own certified table: 3-36 s under load);
    # CI checks all 21 shapes (the extremes: t_df0.5, gcauchy_c1.2, subbotin_r20, epl_p2_a1e3)
    "noise/test_certified_tables.py::test_table_internals": frozenset(
        {"gg_p0.5", "gg_p1", "subbotin_r1", "t_df3", "gcauchy_c4", "epl_p1_d4"}),
    # 200 000 cells on the default grid per law (8-14 s each): one law in the loop
    "noise/test_certified_tables.py::test_fallbacks_on_the_default_grid_are_rare":
        frozenset({"gg_p0.5"}),
    # the tabdp side is the same for both methods (the method is tau-argus' option; pytauargus
    # runs 2-15 s per method): both in CI
    "compare/test_compare.py::test_audit_agrees_with_pytauargus": frozenset(),
    # the SaS certified tables (each builds its own: alpha = 1.5 took 4 s): in CI
    "noise/test_certified_tables.py::test_sas_table_internals": frozenset(),
    # 120 values per delta against a 50-digit minimisation (8 s for 1e-9): in CI
    "privacy/test_approx_accounting.py::test_zcdp_epsilon_is_valid_on_a_grid_around_the_zero_crossing":
        frozenset(),
    # 2 mechanisms x 4 budgets x 4 engines: three budgets, each mechanism, the pandas and the
    # streaming ledgers (16 of them took 28 s here on 2026-12-03; curve+total in CI)
    "frame/test_streaming.py::test_streaming_equals_the_in_memory_ledger": frozenset(
        {"pure-none-pandas", "approx-constant-streaming", "pure-curve-streaming"}),
    # an in-memory engine with a unit id and the streaming one without (pandas and lazy: CI)
    "privacy/test_session.py::test_recorded_loss_matches_neighbouring_datasets": frozenset(
        {"polars-u", "streaming-None"}),
    # in memory: every budget; streaming (a Parquet scan per release, 3.7 s) in CI
    "frame/test_batched.py::test_a_batch_equals_the_releases_one_by_one": frozenset(
        {f"{b}-in-memory" for b in ("none", "constant", "curve", "curve-total")}),
    # every multiset of up to 4 values on a 5-point grid, plus each added value (24-29 s wall
    # per q under load 13): the median stays fast; the extreme ranks and the interior ranks
    # 0.25 and 0.9 run in CI (the hypothesis test beside it still draws every q locally)
    "sensitivity/test_smooth_sensitivity.py::"
    "test_properties_hold_for_add_remove_neighbours_exhaustively": frozenset({"0.5"}),
    # author-mode neighbours: NaN payroll and null id in the loop; negative, huge, inf in CI
    "release/test_cli.py::test_author_mode_neighbours_are_indistinguishable":
        frozenset({"nan-null_id"}),
    # -- 2026-12-03: the local loop's costliest parametrizations (pytest --durations, load 2-7)
    # exact rounding: one law of each family at one centre (12.3), the two common laws at the
    # other two (0.0, 0.5: a centre on a grid point and on a breakpoint); 45 cases, 24 s. The
    # costlier shapes (exp_polylog p = 1.5 and 2, gen_gaussian p = 2.5, subbotin r = 4,
    # gen_cauchy: 1.2-2.6 s each) run in CI
    "noise/test_exact_rounding.py::test_small_scale_released_values_follow_the_exactly_rounded_law":
        frozenset({f"12.3-{law}" for law in (
            "gaussian", "laplace", "gen_gaussian_p0.5", "exp_polylog_p1", "polyplace",
            "student_t", "logistic", "subbotin_r1.5", "sas_cauchy", "sas_gaussian")}
            | {"0.0-gaussian", "0.5-laplace"}),
    # the float64 quantile hooks against 50-digit references (22 laws, 40 s): one law of each
    # family (both SaS closed forms, both ExpPolyLog powers); the extreme shapes run in CI
    "noise/test_exact_rounding.py::test_common_case_hook_bounds_contain_the_exact_quantile":
        frozenset({"Gaussian(sigma=1.0)", "Laplace(scale=1.0)",
                   "GeneralizedGaussian(sigma=2.0, p=0.5)",
                   "ExpPolyLog(sigma=3.0, a=1.0, d=4.0, p=1.0)",
                   "ExpPolyLog(sigma=1.0, a=2.8, d=0.3, p=2.0)", "PolyPlace(s=10.0, alpha=10.0)",
                   "GeneralizedCauchy(c=50.0, scale=1.0)", "Logistic(scale=1.0)",
                   "Subbotin(r=4.0, scale=1.0)", "SymmetricStable(alpha=1.0, gamma=1.0)",
                   "SymmetricStable(alpha=2.0, gamma=7.5)"}),
    # dense float bounds: both Logistic scales, both SaS, Subbotin at r = 1 and r = 2 (6 Subbotin
    # shapes, 19 s: r = 1.2, 3, 8 and 15.9 in CI)
    "noise/test_exact_rounding.py::test_float_bounds_dense_for_logconcave_and_stable_closed_forms":
        frozenset({"Logistic(scale=1.0)", "Logistic(scale=0.001)", "Subbotin(r=1.0, scale=1.0)",
                   "Subbotin(r=2.0, scale=5.0)", "SymmetricStable(alpha=1.0, gamma=1.0)",
                   "SymmetricStable(alpha=2.0, gamma=3.0)"}),
    # the decision rule on rationals: a non-dyadic step (the dyadic and tiny steps in CI)
    "noise/test_exact_rounding.py::test_decision_rule_is_exact_on_rationals":
        frozenset({"0.1"}),
    # smooth-sensitivity grids: Student's t (5 s) in CI; Cauchy keeps a heavy tail in the loop
    "noise/test_exact_rounding.py::test_smooth_sensitivity_release_is_on_its_relative_grid":
        frozenset({"polyplace", "laplace", "cauchy"}),
    # one sampler of each family (gauss, laplace, gg, each ExpPolyLog power)
    "noise/test_noise.py::test_sampler_ks_and_power": frozenset(
        {"gauss-1.5", "laplace-0.7", "gg-p0.5", "gg-p1.0", "epl1-d2.5-a1.0", "epl2-d1.0-a2.72",
         "epl1.5-d2-a3", "epl3-d1-a10"}),
    # 6-15 s per shape parameter: in CI
    "mechanisms/test_logconcave.py::test_vectorized_epsilon_many_distinct_values":
        frozenset(),
    # every policy and case but unit splitting's (11-14 s each: in CI)
    "frame/test_policy_expr.py::test_never_below_numpy_and_exact_where_claimed": frozenset(
        f"{p}-{i}" for p, n in (("gaussian", 3), ("laplace", 2), ("generalized_gaussian", 3),
                                ("exp_polylog", 3), ("root", 5), ("log", 3),
                                ("unit_splitting", 0), ("symmetric_stable", 3), ("logistic", 1),
                                ("subbotin", 2), ("vector_subbotin", 2),
                                ("discrete_gaussian", 3), ("discrete_laplace", 2),
                                ("smooth_sensitivity", 3))
        for i in range(n)),
    # unit splitting's lazy/streaming run takes 18 s (CI); the two other policies stay
    "frame/test_policy_expr.py::test_lazy_and_streaming_give_the_same_values":
        frozenset({"LogTransform", "SymmetricStable"}),
    # the Subbotin case (29 s: a certified root per value among 20 000) runs in CI
    "privacy/test_delta_edge.py::test_a_values_epsilon_does_not_depend_on_the_other_values":
        frozenset({"gaussian-None", "laplace-None", "logistic-None"}),
    # a normal, a tiny, a subnormal near the smallest normal and the smallest subnormal delta
    "privacy/test_delta_edge.py::test_gaussian_epsilon_for_scale_and_gdp_epsilon_are_safe_and_tight":
        frozenset({"0.01", "1e-06", "1e-300", "2e-308", "5e-324"}),
    # each engine once, each budget twice
    "privacy/test_end_to_end_privacy.py::test_no_unit_is_ever_charged_past_its_budget":
        frozenset({"pandas-curve", "polars-constant", "lazy-curve", "streaming-constant"}),
    # every q on 1-3 records; 4 and 5 records (up to 1.7 s each) for the median and the ends
    "sensitivity/test_smooth_sensitivity.py::test_against_brute_force_over_all_neighbours":
        frozenset({f"{q}-{n}" for q in ("0.5", "0.25", "0.9", "0.0", "1.0") for n in (1, 2, 3)}
                  | {"0.5-4", "0.5-5", "0.0-4", "1.0-5"}),
    # no budget without delta and a curve with a total and delta (the other two in CI)
    "frame/test_batched.py::test_a_batch_writes_its_report_in_its_own_pass":
        frozenset({"none-no-delta", "curve-total-delta"}),
    # (1, 700 and 30 000 records: 8-24 s each; all in CI since 2026-12-03's third pass)
    "report/test_confidential_streaming.py::test_batched_losses_equal_the_query_path":
        frozenset(),
    # (13-19 s each, 9 s for the case of the fix, shares2: all in CI)
    "hierarchy/test_discrete_coverage.py::test_discrete_gaussian_margins_cover":
        frozenset(),
    # one more firm in the ledger: the state at its budget in the loop (absent, half in CI)
    "release/test_author_ledger_attacks.py::test_one_more_firm_in_any_ledger_state_looks_alike":
        frozenset({"at_budget"}),
    # R12 stray files: a marker file, a hidden Parquet file in a subfolder, another format
    "release/test_author_attacks.py::test_r12_non_parquet_file_in_the_dataset_folder":
        frozenset({"sub/.hidden.parquet", "s03.csv"}),
    # a time unit differing in one file (a time zone, 3 s, in CI)
    "release/test_author_attacks.py::test_r12_datetime_unit_or_zone_differs_in_one_file":
        frozenset({"ns-None"}),
    # one key type edge per type (float, signed, unsigned, date)
    "release/test_author_declared_attacks.py::test_a_key_at_a_type_edge": frozenset(
        {"Float64-[1, 2]-nan", "Int64-[1, 2]-9223372036854775807",
         "UInt64-[1, 2]-18446744073709551615", 'Date-["2020-01-01", "2020-01-02"]-2147483647'}),
    # -- 2026-12-03, second pass: one case of each of these in the loop
    "release/test_author_declared_attacks.py::test_timestamp_out_of_text_range_declared_string":
        frozenset({"ms-4611686018427387904"}),
    "release/test_author_attacks.py::test_partition_columns_come_from_each_files_own_path":
        frozenset({"False"}),
    # R15: an empty partition folder; a zero-row file (3 s) and no dataset at all (9 s) in CI
    "release/test_author_boundary.py::test_r15_empty_dataset_against_one_record":
        frozenset({"empty_partition_folder"}),
    "release/test_left_out.py::test_guarantee_text_against_multi_cell_units":
        frozenset({"max_cells = 3"}),
    "release/test_left_out.py::test_neighbours_left_out_unit_changes_nothing_public":
        frozenset({"author"}),
    "hierarchy/test_consistent_options.py::test_consistent_from_release_equals_the_in_run_tables":
        frozenset(),  # (4 s: in CI)
    "mechanisms/test_discrete.py::test_vectorized_matches_reference": frozenset(),  # (CI)
    "mechanisms/test_logconcave.py::test_vectorized_epsilon_matches_scalar_root_find":
        frozenset({"gaussian-None", "subbotin-3.0"}),
    # -- 2026-12-03, third pass (the loop took 6 min 22 s quiet; --durations=0)
    "frame/test_batched.py::test_releases_one_by_one_write_the_report_in_the_last_pass":
        frozenset({"curve-audit", "none-no-audit"}),
    "release/test_cli.py::test_coverage_warning_for_the_curator_only": frozenset({"author"}),
    # a wrong density and a wrong degree (the other two shapes in CI)
    "noise/test_certified_tables.py::test_wrong_density_or_degree_is_caught":
        frozenset({"t_df3_x1.001", "epl_p1_degree2"}),
    # each engine and each level once
    "frame/test_frame_quantiles.py::test_moe_level":
        frozenset({"pandas-0.95", "polars-0.5", "lazy-0.99", "streaming-0.5"}),
    # three of the five mechanisms (ExpPolyLog, 1.8 s, and RootTransform in CI)
    "planning/test_planning.py::test_forecast_agrees_with_simulation":
        frozenset({"DiscreteGaussian", "Laplace", "LogTransform"}),
    # the tampering kinds: a flipped byte, a truncated file, a deleted and a reordered
    # release, another series' entry (the other ten edits in CI)
    "privacy/test_lifetime.py::test_tampered_ledger_is_refused_before_data_is_read":
        frozenset({"flip_state", "truncate_history", "delete_middle", "reorder",
                   "other_series_entry"}),
    "frame/test_frame_quantiles.py::test_ss_floor_keeps_noise_in_huge_identical_cells":
        frozenset({"polars-0.45-far-from-0", "polars-0.9-far-from-0"}),
    "privacy/test_delta_edge.py::test_subbotin_epsilon_is_certified_near_the_threshold_and_far":
        frozenset({"1e-09-1.5", "0.001-3.0", "1e-09-7.5"}),
    "mechanisms/test_smooth_mechanisms.py::test_log_scale_release_is_eps2_dp_on_real_neighbours":
        frozenset({"0.1-2.0-0.6", "0.5-0.3-None"}),
    "release/test_author_declared_attacks.py::test_folder_name_not_utf8":
        frozenset({"state=\\xff"}),
    "frame/test_streaming.py::test_streaming_without_the_cell_audit_equals_the_in_memory_ledger":
        frozenset({"none"}),
    # the quadrature tail: 1 cell in the loop, 2 and 6 in CI (about 1.5 s of CPU per cell)
    "noise/test_exact_rounding.py::test_quadrature_tail_releases_the_closed_form_values":
        frozenset({"1"}),
    # -- 2026-12-04 (the loop took 5 min 15 s, 522 CPU-s, at load 1-3; --durations=80): the
    # costlier shapes of the large-scale law (ExpPolyLog p = 1.5 and 2, generalized Gaussian
    # p = 2.5: 2.2-2.8 s each) and the stable sampler at alpha = 1.2 run in CI
    "noise/test_exact_rounding.py::test_large_scale_released_values_follow_the_continuous_law":
        frozenset({"gaussian", "laplace", "gen_gaussian_p0.5", "exp_polylog_p1", "polyplace",
                   "student_t", "gen_cauchy", "logistic", "subbotin_r1.5", "subbotin_r4",
                   "sas_cauchy", "sas_gaussian"}),
    "mechanisms/test_stable.py::test_inverse_cdf_sampler_ks_and_power": frozenset({"1.8"}),
    # -- 2026-12-07 (the loop took 4 min 43 s quiet, 6,400 tests; --durations=0)
    # the batch-size invariance: 211 batch rows (fourteen batches) against the program's; 1,000
    # rows (three batches, the same code path: a fresh process's whole run, 3-4 s) in CI
    # (stop 68: 211 too, 7 CPU-s, two fresh processes: frame/test_batched's streaming passes
    # over 500-700-row groups keep a pass's output equal to its replay in the loop, and
    # test_a_row_mode_run_reads_its_report_row_group_by_row_group the program's row-mode run)
    "release/test_cli.py::test_a_row_mode_run_is_the_same_at_any_batch_size":
        frozenset(),
    # a reader gone before the summary: the unbuffered stdout (the buffered one, a whole run in
    # a fresh process, in CI; test_stderr_closed_too keeps a buffered closed pipe in the loop)
    "release/test_cli_pipe.py::test_stdout_closed_before_the_summary":
        frozenset({"unbuffered"}),
    # a full disk: the unbuffered stdout (each print fails) in the loop; the buffered one (a
    # whole run in a fresh process, the failure at the exit's flush) in CI, its exit flush
    # failing on a closed pipe kept here by test_stderr_closed_too (stop 68)
    "release/test_cli_pipe.py::test_stdout_on_a_full_disk_is_not_a_failed_release":
        frozenset({"unbuffered"}),
    # alpha = 1.99 at d = 15 stays (d = 1, the costliest grid, in CI); every alpha = 1.5 case
    "mechanisms/test_stable.py::test_pure_dp_numerically_on_a_grid":
        frozenset({"1.5-0.3", "1.5-1.0", "1.5-40.0", "1.99-15.0"}),
}


#: Doctests of whole releases (the example spec end to end, about 4-6 s each): CI only. Their
#: modules' other examples and the CLI and runner tests cover the same calls in the local loop.
CI_ONLY_DOCTESTS = frozenset({"tabdp.release.runner.run_release",
                              "tabdp.release._plan.write_plan",
                              # the module's example: plan_table's own example (the same call
                              # with a third family) stays in the loop
                              "tabdp.planning"})


def _fast_subset_key(item: pytest.Item) -> str:
    path = Path(str(item.path))
    parts = path.parts[path.parts.index("tests") + 1:] if "tests" in path.parts else path.parts
    return "/".join(parts) + "::" + getattr(item, "originalname", item.name)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``slow`` what the local loop leaves to CI.

    The parametrizations of a test in :data:`FAST_SUBSETS` outside its subset carry ``slow``, and
    so do the doctests in :data:`CI_ONLY_DOCTESTS`.

    A test that asks for the ``spark`` fixture carries ``spark`` (one without the mark started
    a JVM in the local loop).

    Spark runs of the frame suite beyond the default set are marked ``slow`` and ``spark_full``:
    on the ``spark`` engine the default set is the engine equality test and every frame test
    that asserts a refusal (bad input: ``pytest.raises`` in its body); the other frame tests'
    Spark runs and the privacy suite's Spark runs carry ``spark_full``. CI runs them all
    (``make test``); a developer deselects them with ``-m "not spark_full"``.
    """
    seen: dict[str, set[str]] = {}
    no_pyspark = importlib.util.find_spec("pyspark") is None
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)  # a Spark session (a JVM): never in the loop
        dtest = getattr(item, "dtest", None)
        if dtest is not None and any("pyspark" in ex.source for ex in dtest.examples):
            # a doctest of Spark's types needs PySpark (the spark extra), as the Spark tests:
            # a fresh clone's `make test-fast` failed on one without it (stop 66)
            item.add_marker(pytest.mark.spark)
            if no_pyspark:
                item.add_marker(pytest.mark.skip(reason="PySpark is not installed (the spark "
                                                        "extra)"))
        if item.name in CI_ONLY_DOCTESTS:
            item.add_marker(pytest.mark.slow)
        callspec = getattr(item, "callspec", None)
        key = _fast_subset_key(item)
        keep = FAST_SUBSETS.get(key) if callspec is not None else None
        if keep is None:
            continue
        seen.setdefault(key, set()).add(callspec.id)
        if callspec.id not in keep:
            item.add_marker(pytest.mark.slow)
    # a subset naming ids its test no longer has would silently keep nothing in the local loop
    stale = {k: sorted(FAST_SUBSETS[k] - ids) for k, ids in seen.items() if FAST_SUBSETS[k] - ids}
    whole = not config.getoption("-k") and not any("::" in a for a in config.args)
    if stale and whole:  # (node ids or -k given on the command line select fewer ids)
        raise pytest.UsageError(f"tests/conftest.py FAST_SUBSETS names test ids that are no "
                                f"longer collected: {stale}; update it to the test's ids.")
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if params.get("engine") != "spark" or not isinstance(item, pytest.Function):
            continue
        path = Path(str(item.path))
        if path.parent.name == "privacy":
            # the privacy suite on Spark (tens of Spark sessions' worth of releases, several
            # hypothesis searches): minutes, run by CI, deselectable locally
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.spark_full)
            continue
        if path.parent.name != "frame" or path.name == "test_engines_equal.py":
            continue
        try:
            body = inspect.getsource(item.function)
        except (OSError, TypeError):
            body = ""
        if "pytest.raises" not in body:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.spark_full)


@pytest.fixture(params=[pytest.param(e, marks=pytest.mark.spark) if e == "spark" else e
                        for e in ENGINES])
def engine(request: pytest.FixtureRequest) -> str:
    """Name of the engine (input form) under test (``"spark"`` starts or skips Spark)."""
    if request.param == "spark":
        request.getfixturevalue("spark")
    return str(request.param)


@pytest.fixture
def backend(engine: str) -> str:
    """The older name of ``engine``."""
    return engine


@pytest.fixture
def to_engine(engine: str, tmp_path: Path) -> Callable[[Any], Any]:
    """``to_engine(df) -> df`` in the form of the engine under test."""

    def convert(df: Any) -> Any:
        return as_engine(df, engine, tmp_path)

    return convert


@pytest.fixture
def make_frame(engine: str, tmp_path: Path) -> Callable[..., Any]:
    """``make_frame(dict, dtypes=None) -> native frame`` of the engine under test."""

    def make(data: Mapping[str, Any], dtypes: Mapping[str, Any] | None = None) -> Any:
        return build_frame(engine, data, dtypes, tmp_path)

    return make


@pytest.fixture
def out_type(engine: str) -> type:
    """The frame type tabdp must return for the engine (pandas → pandas, Polars → eager)."""
    if engine == "spark":
        try:  # PySpark >= 4.0: the classic (non-Connect) DataFrame
            from pyspark.sql.classic.dataframe import DataFrame
        except ImportError:
            from pyspark.sql import DataFrame

        return DataFrame
    return pd.DataFrame if engine == "pandas" else pl.DataFrame




@pytest.fixture
def to_pl() -> Callable[[Any], pl.DataFrame]:
    """Convert a returned frame to Polars."""
    return as_polars


def rng_state(session: Any) -> Any:
    """Snapshot of a seeded session's generator state (to prove no noise was drawn)."""
    return copy.deepcopy(session.rng._gen.bit_generator.state)


@pytest.fixture
def snapshot() -> Callable[[Any], tuple[int, Any]]:
    """``snapshot(session) -> (number of records, generator state)``."""

    def snap(session: Any) -> tuple[int, Any]:
        return len(session.records), rng_state(session)

    return snap


# -- Spark (marker ``spark``; skipped when PySpark or a Java runtime is missing) ---------------
def _java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    return shutil.which("java") is not None or bool(home and os.path.exists(
        os.path.join(home, "bin", "java")))


@pytest.fixture(scope="session")
def spark() -> Any:
    """One local SparkSession for every Spark test (``local[2]``, 2 shuffle partitions, no UI).

    Skips when PySpark is not installed (``pip install tabdp[spark]``) or no ``java`` is found
    (``.ci/java`` installs one). Locally, ``pytest -m "not spark"`` deselects these tests.
    """
    pytest.importorskip("pyspark")
    if not _java_available():
        pytest.skip("no Java runtime (java / $JAVA_HOME) for PySpark; run .ci/java")
    import sys

    # the Python workers must be this interpreter (with tabdp, numpy, pyarrow)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.environ.get("PYTHONPATH", "")
    if root not in path.split(os.pathsep):  # the workers import tabdp from this checkout
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, path) if p)
    session = spark_session()
    yield session
    session.stop()
