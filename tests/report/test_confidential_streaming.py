"""The confidential report from a LazyFrame: streaming summaries equal to the eager ones.

* :func:`tabdp.report.streaming.exact_quantiles` equals ``np.quantile`` (linear) bit for bit on
  adversarial arrays (ties, zeros, ±inf, NaN, denormals, n = 1, large n), also when every bin
  is narrowed to single values (collection cap 1);
* :func:`render_confidential_html` gives the same page for ``per_record`` as a DataFrame and as
  a LazyFrame (scan of a Parquet file), including NaN / null losses, missing columns, no rows;
* the histogram drawn from precomputed counts is the histogram of the values;
* above the scatter cap the plot is a systematic sample that keeps the most exposed units, and
  says so;
* the lazy path never collects a frame with as many rows as the input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

import tabdp.report.html as rh
import tabdp.report.streaming as st
from tabdp.exceptions import InvalidParameterError
from tabdp.plotting import histogram_bin_index, histogram_counts_svg, histogram_edges, histogram_svg
from tabdp.report.html import render_confidential_html
from tabdp.report.streaming import exact_quantiles, order_statistics

QS = [0.5, 0.9, 0.99, 0.999, 0.0, 1.0, 0.25, 0.123456789, 1 / 3]


def _adversarial() -> list[np.ndarray]:
    rng = np.random.default_rng(20261126)
    cases = [np.array([1.0]), np.array([0.0]), np.array([np.inf]), np.array([-np.inf, np.inf]),
             np.array([0.0, np.inf]), np.array([1.0, 2.0]), np.zeros(1000), np.full(777, 3.3),
             np.array([np.nan, 1.0]), np.array([np.inf, np.nan]), np.array([-0.0, 0.0, 1.0]),
             np.array([5e-324, 0.0, 1e-300]), np.array([1.0, 1.0 + 2 ** -52, 1.0 + 2 ** -51])]
    for n in (2, 3, 5, 10, 11, 100, 1001, 99_999):
        x = rng.lognormal(size=n) * rng.choice([0, 1], size=n)
        cases.append(x)
        y = x.copy()
        y[rng.integers(0, n, size=max(1, n // 100))] = np.inf
        cases.append(y)
        cases.append(np.round(rng.normal(size=n), 1))  # many ties, negatives
        cases.append(rng.choice([0.0, 1e-300, 5e-324, 1.0, 1e300, np.inf, -np.inf, -1.0],
                                size=n))
    cases.append(np.concatenate([np.full(200_000, 2.0), rng.random(1000)]))  # one huge tie
    return cases


@pytest.mark.parametrize("cap", [None, 1])
def test_exact_quantiles_equal_numpy(monkeypatch: pytest.MonkeyPatch, cap: int | None) -> None:
    """Bit-identical to np.quantile, also when every bin is narrowed down to one value."""
    if cap is not None:
        monkeypatch.setattr(st, "COLLECT_CAP", cap)
    for x in _adversarial():
        with np.errstate(invalid="ignore"):
            want = np.quantile(x, QS)
        got = exact_quantiles(pl.LazyFrame({"v": x}), "v", QS)
        assert np.array_equal(want, got, equal_nan=True), (x[:5], x.size, want, got)


def test_exact_quantiles_nulls_count_as_nan_and_empty_raises() -> None:
    got = exact_quantiles(pl.LazyFrame({"v": [1.0, None, 3.0]}), "v", [0.5])
    assert np.isnan(got).all()
    with pytest.raises(ValueError, match="no rows"):
        exact_quantiles(pl.LazyFrame({"v": pl.Series([], dtype=pl.Float64)}), "v", [0.5])


def test_order_statistics_against_sort() -> None:
    x = np.random.default_rng(1).standard_cauchy(5000)
    ranks = [0, 1, 2499, 2500, 4998, 4999]
    for cap in (1, 10, 10**6):
        got = order_statistics(pl.LazyFrame({"v": x}), "v", ranks, cap=cap)
        assert np.array_equal(got, np.sort(x)[ranks])
    with pytest.raises(ValueError, match="ranks"):
        order_statistics(pl.LazyFrame({"v": x}), "v", [5000])


def test_histogram_from_counts_is_the_histogram() -> None:
    v = np.random.default_rng(2).lognormal(size=3000)
    v[:4] = [0.0, np.inf, np.nan, -1.0]
    shown = v[np.isfinite(v) & (v > 0)]
    e = histogram_edges(shown.size, float(shown.min()), float(shown.max()))
    c = np.bincount(histogram_bin_index(shown, e), minlength=e.size - 1)
    assert np.array_equal(c, np.histogram(shown, bins=e)[0])
    assert histogram_counts_svg(e, c, left_out=4, title="t", xlabel="x") == \
        histogram_svg(v, title="t", xlabel="x")


def _per(n: int, seed: int = 3) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    rho = rng.lognormal(size=n)
    rho[: n // 100] = 0.0
    rho[n // 100: n // 50] = rho[-1]  # ties with the largest values
    if n > 20:
        rho[20] = np.inf
    return pl.DataFrame({"estab_id": np.arange(n), "rho": rho, "epsilon": rng.random(n) * 5,
                         "size": rng.lognormal(3, 2, size=n), "epsilon_delta": rng.random(n),
                         "rho_q1": rho / 2})


def _report(per: Any, **kw: Any) -> dict[str, Any]:
    return {"release": {"name": "demo", "delta": 1e-6}, "unit": "estab_id", "per_record": per,
            "top_n": 7, "budget": {"kind": "curve", "points": [[1.0, 0.5], [1e4, 20.0]]},
            "total_policy_curve": [{"delta": 1.0, "rho": 0.1}, {"delta": 1e5, "rho": 10.0}],
            **kw}


def _frames() -> list[pl.DataFrame]:
    base = _per(3000)
    nan_null = base.with_columns(
        rho=pl.when(pl.col("estab_id") == 5).then(float("nan"))
        .when(pl.col("estab_id") == 6).then(None).otherwise(pl.col("rho")),
        size=pl.when(pl.col("estab_id") == 7).then(None).otherwise(pl.col("size")))
    return [base, _per(1), _per(7).with_columns(rho=pl.lit(0.0)), nan_null,
            base.drop("size"), base.drop("rho"), base.drop("epsilon_delta", "epsilon"),
            base.head(0), base.with_columns(rho=pl.lit(float("inf")))]


@pytest.mark.parametrize("k", range(9))
def test_lazy_page_equals_eager_page(tmp_path: Path, k: int) -> None:
    """The same HTML, byte for byte, from the frame and from a scan of it written to Parquet."""
    per = _frames()[k]
    path = tmp_path / "per_record.parquet"
    per.write_parquet(path)
    for rep in (_report(per), _report(per, budget=None), _report(per, budget=2.0)):
        eager = render_confidential_html(rep)
        lazy = render_confidential_html({**rep, "per_record": pl.scan_parquet(path)})
        assert lazy == eager


def test_top_rows_equal_the_stable_sort() -> None:
    """Ties, NaN, nulls, k above and below the number of rows: the eager stable sort's rows."""
    rng = np.random.default_rng(5)
    for _ in range(150):
        n = int(rng.integers(1, 40))
        vals = [None if rng.random() < 0.2 else float(v)
                for v in rng.choice([0.0, 1.0, 2.0, np.nan, np.inf, 3.5], size=n)]
        df = pl.DataFrame({"rho": vals, "i": np.arange(n)},
                          schema={"rho": pl.Float64, "i": pl.Int64})
        for k in (1, 3, 7, 100):
            want = df.sort("rho", descending=True, nulls_last=True, maintain_order=True).head(k)
            assert rh._top_rows(df.lazy(), "rho", k).equals(want)


def test_large_scatter_is_a_systematic_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above the cap: at most the cap of points, the most exposed units kept, a caption."""
    monkeypatch.setattr(rh, "_SCATTER_POINTS", 500)
    per = _per(5000)
    n_ok = per.filter(pl.col("rho").is_finite() & (pl.col("rho") > 0)).height
    x, y, sample = rh._scatter_points(per.lazy(), rh._f64("rho").is_finite()
                                      & (rh._f64("rho") > 0) & (rh._f64("size") > 0)
                                      & rh._f64("size").is_finite(), n_ok, top_n=7)
    assert sample is not None and sample[0] == n_ok and x.size <= 500
    k_top, step = sample[1], sample[2]
    assert k_top == 50 and step == -(-n_ok // 450)
    ok = per.filter(pl.col("rho").is_finite() & (pl.col("rho") > 0))["rho"].to_numpy()
    order = np.lexsort((-np.arange(ok.size), ok))  # by rho, ties: the first row last
    want = np.union1d(np.arange(0, ok.size, step), order[-k_top:])
    assert np.array_equal(y, ok[want])  # row order kept
    page = render_confidential_html(_report(per.lazy()))
    assert f"a systematic sample of {x.size:,} of {n_ok:,} units" in page


@pytest.mark.slow  # 11 s of the local loop (2026-12-03): CI only
def test_lazy_path_never_collects_the_whole_frame(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Every collected result of the lazy path is small, with 2M rows in the input."""
    n = 2_000_000
    rng = np.random.default_rng(4)
    pl.DataFrame({"estab_id": np.arange(n), "rho": rng.lognormal(size=n),
                  "epsilon": rng.random(n), "size": rng.lognormal(3, 2, size=n)}
                 ).write_parquet(tmp_path / "p.parquet")
    heights: list[int] = []
    streaming = []
    real = pl.LazyFrame.collect

    def spy(self: pl.LazyFrame, *args: Any, **kwargs: Any) -> pl.DataFrame:
        out = real(self, *args, **kwargs)
        heights.append(out.height)
        streaming.append(kwargs.get("engine") == "streaming")
        return out

    if not hasattr(pl.LazyFrame, "collect_batches"):
        pytest.skip("this Polars has no LazyFrame.collect_batches (the sliced fallback is tested)")
    real_batches = pl.LazyFrame.collect_batches
    batches: list[int] = []

    def spy_batches(self: pl.LazyFrame, *args: Any, **kwargs: Any) -> Any:
        for b in real_batches(self, *args, **kwargs):
            batches.append(b.height)
            yield b

    monkeypatch.setattr(pl.LazyFrame, "collect", spy)
    monkeypatch.setattr(pl.LazyFrame, "collect_batches", spy_batches)
    monkeypatch.setattr(rh, "_KEEP_ROWS", n)
    page = render_confidential_html(_report(pl.scan_parquet(tmp_path / "p.parquet")))
    assert "Units: <b>2,000,000</b>" in page or "Units: <b>2000000</b>" in page
    assert all(streaming) and max(heights) <= max(st.COLLECT_CAP, rh._SCATTER_POINTS)
    # the loss columns are read batch by batch, never whole: once, the later passes using the
    # rho and size columns kept from it (at most `_KEEP_ROWS` rows)
    assert sum(batches) == n and max(batches) < n // 2
    assert "a systematic sample of" in page
    # above `_KEEP_ROWS` rows nothing is kept: two to four reads, the same page
    batches.clear()
    monkeypatch.setattr(rh, "_KEEP_ROWS", n // 3)
    again = render_confidential_html(_report(pl.scan_parquet(tmp_path / "p.parquet")))
    assert sum(batches) in (2 * n, 3 * n, 4 * n) and max(batches) < n // 2
    assert again == page


@pytest.mark.parametrize("cap", [None, 1, 3])
def test_batched_order_statistics_equal_numpy(cap: int | None) -> None:
    """Fed in uneven batches over its passes: np.quantile's order statistics, bit for bit."""
    rng = np.random.default_rng(11)
    for x in _adversarial():
        if np.isnan(x).any():
            continue
        ranks, finish = st.quantile_ranks(x.size, QS)
        os_ = st.BatchedOrderStatistics(cap=cap)
        cuts = np.sort(rng.integers(0, x.size + 1, size=3))
        first, passes = True, 0
        while True:
            for part in np.split(x, cuts):
                os_.feed(st.sortable_keys(part))
            passes += 1
            if not os_.end_pass(ranks if first else None):
                break
            first = False
        with np.errstate(invalid="ignore"):
            want = np.quantile(x, QS)
        assert np.array_equal(finish(os_.values(ranks)), want, equal_nan=True), (x[:5], x.size)
        assert passes <= 5


@pytest.mark.parametrize("n", [1, 700, 30_000])
def test_batched_losses_equal_the_query_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             n: int) -> None:
    """The batched statistics give the page of the per-statistic queries, byte for byte.

    With a small scatter cap (systematic sample) and collection cap (quantiles narrowed over
    several reads), ties, zeros and infinite losses, and several Parquet row groups.
    """
    monkeypatch.setattr(rh, "_SCATTER_POINTS", 500)
    monkeypatch.setattr(st, "COLLECT_CAP", 2)
    rng = np.random.default_rng(n)
    rho = np.round(rng.lognormal(size=n), 2) * rng.choice([0, 1, 1, 1], size=n)
    rho[rng.integers(0, n, size=max(1, n // 500))] = np.inf
    per = pl.DataFrame({"estab_id": np.arange(n), "rho": rho, "epsilon": rng.random(n),
                        "size": np.round(rng.lognormal(3, 2, size=n), 1),
                        "epsilon_delta": rng.random(n) * 5})
    path = tmp_path / "p.parquet"
    per.write_parquet(path, row_group_size=max(1, n // 7))
    for rep in (_report(pl.scan_parquet(path)), _report(pl.scan_parquet(path), budget=None)):
        fast = render_confidential_html(rep)
        with monkeypatch.context() as m:
            m.setattr(rh, "_losses_batched", lambda *a: None)
            slow = render_confidential_html(rep)
        assert fast == slow
        with monkeypatch.context() as m:  # rho and size not kept: the file read again
            m.setattr(rh, "_KEEP_ROWS", max(0, n // 3))
            assert render_confidential_html(rep) == fast
        with monkeypatch.context() as m:  # Polars without collect_batches: sliced reads
            m.setattr(rh, "_SLICE_ROWS", 97)
            if hasattr(pl.LazyFrame, "collect_batches"):
                m.delattr(pl.LazyFrame, "collect_batches")
            assert render_confidential_html(rep) == fast
        if n < 500:  # the eager page draws every point (no sample)
            assert render_confidential_html({**rep, "per_record": per}) == fast


def test_bin_counts_equal_numpys_histogram() -> None:
    """The histogram's counts from buckets of the values' bits: those of `histogram_bin_index`.

    And of ``numpy.histogram`` with the same edges: edges and their neighbouring doubles, one
    bucket per value (narrow spans), all values equal, extreme spans, values fed in batches.
    """
    rng = np.random.default_rng(3)
    for lo, hi, n in ((1e-3, 1e3, 1000), (0.5, 0.5, 10), (1.0, 1.0 + 1e-12, 50),
                      (1e-300, 1e300, 400), (2.0, 3.0, 100_000), (5e-324, 1.7e308, 90),
                      (1.0, np.nextafter(1.0, 2.0), 30)):
        edges = histogram_edges(n, lo, hi)
        with np.errstate(over="ignore"):
            v = np.concatenate([np.exp(rng.uniform(np.log(edges[0]) - 1,
                                                   np.log(edges[-1]) + 1, size=20_000)),
                                edges, np.nextafter(edges, 0), np.nextafter(edges, np.inf),
                                [lo, hi]])
        v = v[(v >= lo) & (v <= hi)]  # what the batched statistics count: within [lo, hi]
        counts = rh._BinCounts(edges, lo, hi)
        for part in np.array_split(v, 3):
            counts.add(part)
        idx = histogram_bin_index(v, edges)
        want = np.bincount(idx[idx >= 0], minlength=edges.size - 1)
        assert np.array_equal(counts.counts(), want), (lo, hi)
        assert np.array_equal(counts.counts(), np.histogram(v, edges)[0]), (lo, hi)


@pytest.mark.parametrize("budget", [{1.0: 0.2, 1e2: 11.5, 1e4: 41.0, 1e10: 251.0}, 2.0,
                                    {5.0: 1.0}])
def test_budget_shares_equal_every_units_share(budget: Any) -> None:
    """`_Shares` (limits only where a share may matter): the figures of every unit's share.

    Shares near 0.9 and 1 (+ 1e-12) and at the largest share, ties at it, sizes 0, negative,
    tiny, huge and infinite, ρ 0, negative and infinite, fed in batches (the first one alone
    computed for every unit).
    """
    from tabdp.privacy.budget import Budget

    bud = Budget(budget)
    rng = np.random.default_rng(5)
    n = 60_000
    s = np.exp(rng.uniform(-5, 26, size=n)) * rng.choice([1, 1, 1, -1], size=n)
    s[rng.integers(0, n, size=50)] = rng.choice([0.0, -0.0, np.inf, -np.inf, 5e-324, 1e308],
                                               size=50)
    lim = bud.limit(s)
    r = lim * rng.choice([0.1, 0.5, 0.8999999999, 0.9, 1.0, 1.0 + 1e-12, 1.0 + 3e-12, 0.97],
                         size=n) * rng.uniform(0.999, 1.0, size=n) ** rng.integers(0, 2, size=n)
    r[rng.integers(0, n, size=40)] = rng.choice([0.0, -1.0, np.inf, -np.inf], size=40)
    for rr in (r, r * 0.5, r * 1e-3, -np.abs(r), np.zeros(n)):
        with np.errstate(divide="ignore", invalid="ignore"):
            sh = np.where(~np.isnan(lim) & (lim > 0), rr / lim, np.inf)
        want = (float(sh.max()), int(np.sum(sh >= 0.9)), int(np.sum(~(sh <= 1.0 + 1e-12))))
        got = rh._Shares(bud)
        for part in np.array_split(np.arange(n), [100, 7000, 7001, 30_000]):
            got.add(rr[part], s[part])
        assert got.result() == want


def test_the_lazy_statistics_batch_functions_run_with_numpys_errors_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lazy path's batch functions (budget limits, histogram bins) warn nothing.

    Polars runs them on its own threads, which keep NumPy's defaults (a warning per overflow):
    a value that overflowed there would warn, a warning depending on one record. Both run inside
    ``engine_thread``; steps that overflow (patched in) warn nothing, on a report with a NaN ρ
    (the lazy path: the batched one returns None) read from Parquet in several row groups.
    """
    import warnings

    from tabdp.privacy.budget import Budget

    real_bins, real_limit = rh.histogram_bin_index, Budget.limit

    def bins(v: np.ndarray, edges: np.ndarray) -> np.ndarray:
        _ = np.array([1e308]) * 10.0  # overflows: warns under NumPy's defaults
        return real_bins(v, edges)

    def limit(self: Budget, size: Any, *a: Any, **k: Any) -> np.ndarray:
        _ = np.array([1e308]) * 10.0
        return real_limit(self, size, *a, **k)

    monkeypatch.setattr(rh, "histogram_bin_index", bins)
    monkeypatch.setattr(Budget, "limit", limit)
    per = _per(3000).with_columns(
        rho=pl.when(pl.col("estab_id") == 5).then(float("nan")).otherwise(pl.col("rho")))
    path = tmp_path / "p.parquet"
    per.write_parquet(path, row_group_size=300)
    lf = pl.scan_parquet(path)
    assert rh._losses_batched(lf, rh._budget_object(_report(lf)["budget"]), 7) is None
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        stats = rh.loss_statistics(lf, _report(lf)["budget"])
    assert [str(w.message) for w in seen] == []
    assert stats.hist[1] is not None and stats.share is not None
    with warnings.catch_warnings(record=True) as seen:  # the control: the steps do warn
        warnings.simplefilter("always")
        bins(np.array([1.0]), np.array([0.5, 2.0]))
    assert seen


@pytest.mark.parametrize("nan", [False, True], ids=["batched", "queries"])
def test_top_n_zero_gives_no_top_rows_and_a_negative_one_is_refused(
        tmp_path: Path, nan: bool) -> None:
    """``loss_statistics(top_n=0)``: the same figures, no top rows; a negative one refused.

    Review r88: the lazy paths raised an internal ``kth out of bounds`` for ``top_n=0``.
    """
    per = _per(500)
    if nan:  # the lazy query path (the batched one returns None on a NaN ρ)
        per = per.with_columns(
            rho=pl.when(pl.col("estab_id") == 5).then(float("nan")).otherwise(pl.col("rho")))
    path = tmp_path / "p.parquet"
    per.write_parquet(path, row_group_size=100)
    for frame in (per, pl.scan_parquet(path)):
        got = rh.loss_statistics(frame, None, 0)
        want = rh.loss_statistics(frame, None, 5)
        assert got.top is not None and got.top.height == 0
        assert got.max_rho == want.max_rho or (np.isnan(got.max_rho) and np.isnan(want.max_rho))
    with pytest.raises(InvalidParameterError, match="top_n"):
        rh.loss_statistics(per, None, -1)


def test_loss_statistics_of_a_file_read_row_group_by_row_group(tmp_path: Path,
                                                              monkeypatch: Any) -> None:
    """A Parquet file's path: slices of the report's row groups, never collect_batches.

    (Polars' ``collect_batches`` decodes several row groups ahead of its reader: at 10M rows
    about 120 MB against 45 for one row group at a time; docs/performance.md, "Stop 66".)
    The slices are `PER_RECORD_ROW_GROUP` rows, the row groups a streaming release writes,
    known without reading the footer (stop 67); a file of other row groups gives the same page.
    """
    n, group = 50_000, 7_000
    rng = np.random.default_rng(9)
    path = tmp_path / "p.parquet"
    pq = pytest.importorskip("pyarrow.parquet")
    # pyarrow's writer makes row groups of exactly ``group`` rows (Polars 1.32's did not)
    pq.write_table(pl.DataFrame({"estab_id": np.arange(n), "rho": rng.lognormal(size=n),
                                 "epsilon": rng.random(n), "epsilon_delta": rng.random(n),
                                 "size": rng.lognormal(3, 2, size=n)}).to_arrow(),
                   path, row_group_size=group)
    budget = _report(None)["budget"]
    lazy = rh.loss_statistics(pl.scan_parquet(path), budget, 7)
    page = render_confidential_html(_report(pl.scan_parquet(path), losses=lazy))
    real = pl.LazyFrame.collect
    for rows in (group, 3 * group, 5_000, n):  # whole row groups, and slices across them
        monkeypatch.setattr(rh, "PER_RECORD_ROW_GROUP", rows)
        monkeypatch.setattr(rh, "_KEEP_ROWS", 0)  # every pass reads the file
        heights: list[int] = []

        def spy(self: pl.LazyFrame, *args: Any, heights: list[int] = heights,
                **kwargs: Any) -> pl.DataFrame:
            out = real(self, *args, **kwargs)
            heights.append(out.height)
            return out

        def refuse(self: pl.LazyFrame, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("collect_batches called")

        monkeypatch.setattr(pl.LazyFrame, "collect", spy)
        monkeypatch.setattr(pl.LazyFrame, "collect_batches", refuse, raising=False)
        got = rh.loss_statistics(str(path), budget, 7)
        assert max(heights) <= rows and sum(h == rows for h in heights) >= 2 * (n // rows)
        monkeypatch.undo()
        assert render_confidential_html(_report(pl.scan_parquet(path), losses=got)) == page
        assert got.rho_summary() == lazy.rho_summary()


def test_a_streaming_report_is_written_in_the_row_groups_its_reader_slices(
        tmp_path: Path) -> None:
    """A streaming report's row groups: `PER_RECORD_ROW_GROUP` rows, the last one shorter.

    `sink_report` states them, and the page's reader takes them as its slices (whole row
    groups, each decoded once; Polars' own choice depends on its input's morsels).
    """
    import tabdp
    from tabdp.frame._stream import sink_report
    from tabdp.privacy.ledger import PER_RECORD_ROW_GROUP

    pq = pytest.importorskip("pyarrow.parquet")
    n = 2 * PER_RECORD_ROW_GROUP + 123
    s = tabdp.Session(seed=1, streaming=True)
    df = pl.DataFrame({"c": ["a", "b"] * (n // 2) + ["a"] * (n % 2), "x": np.ones(n)})
    _ = df.dp.count(by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]),
                    mechanism=tabdp.mechanisms.Gaussian(2.0), session=s)
    path = tmp_path / "r.parquet"
    sink_report(s.ledger, s, None, path)
    meta = pq.read_metadata(path)
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [
        PER_RECORD_ROW_GROUP, PER_RECORD_ROW_GROUP, 123]
