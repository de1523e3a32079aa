"""``[ledger]`` in a release spec: yearly runs of the release workflow (issue 31)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp.cli import main as cli_main
from tabdp.exceptions import SpecError
from tabdp.release._plan import plan_summary
from tabdp.release.runner import run_release
from tabdp.release.spec import load_spec

pytest.importorskip("deltalake")

from _ledger_specs import COUNTIES, series_spec  # noqa: E402  (tests/ is on sys.path)

LIFETIME = 3.0


def _sample(year: int, n: int = 90) -> pl.DataFrame:
    rng = np.random.default_rng(year)
    first = 10 * (year - 2020)
    ids = np.arange(first, first + n, dtype=np.int64)
    df = pl.DataFrame({"estab": ids, "county": np.array(COUNTIES)[ids % 3],
                       "payroll": np.round(rng.lognormal(3.0, 1.0, n), 2)})
    return pl.concat([df, pl.DataFrame({"estab": [9999], "county": ["c1"], "payroll": [60.0]})])


def _init(folder: Path, ledger: str = "ledger") -> None:
    """Start the series once, as a curator would: ``tabdp ledger init`` (a run never creates)."""
    if not (folder / ledger).exists():
        out = io.StringIO()
        assert cli_main(["ledger", "init", str(folder / ledger), "--series", "test-series",
                         "--lifetime-budget", str(LIFETIME)], stdout=out) == 0
        assert "started (0 releases)" in out.getvalue()


def _spec(folder: Path, year: int, ledger: str = "ledger", extra: str = "",
          init: bool = True) -> Path:
    _sample(year).write_parquet(folder / f"data_{year}.parquet")
    if init and "out/" not in ledger:
        _init(folder, ledger)
    text = series_spec(name=f"series_{year}", data=f"data_{year}.parquet", ledger=ledger,
                       series="test-series", lifetime=LIFETIME, seed=year,
                       public=f"out/{year}/public", confidential=f"out/{year}/confidential",
                       extra=extra)
    path = folder / f"release_{year}.toml"
    path.write_text(text)
    return path


@pytest.mark.slow  # eight yearly runs through the spec (about 10-20 s); CI runs it
def test_eight_yearly_runs_through_the_spec(tmp_path):
    runs = []
    for year in range(2021, 2029):
        res = run_release(load_spec(_spec(tmp_path, year)), test_seed=True)
        pr = pl.read_parquet(res.confidential / "per_record_losses.parquet")
        assert "rho_lifetime" in pr.columns
        runs.append(pr.select("estab", "rho", "rho_lifetime").with_columns(year=pl.lit(year)))
        summary = json.loads((res.public / "summary.json").read_text())
        # public: from the spec and curves only, never the ledger's contents (no count)
        assert "releases_before" not in summary["lifetime"]
        assert summary["lifetime"]["series"] == "test-series"
        note = json.loads((res.confidential / "ledger.json").read_text())
        assert note["release"] == year - 2020
        # the chain entry holds the public manifest's hash
        import hashlib

        digest = hashlib.sha256((res.public / "manifest.json").read_bytes()).hexdigest()
        assert note["manifest_sha256"] == digest
        assert not any("ledger" in p.name for p in res.public.iterdir())
    allr = pl.concat(runs).sort("year")
    cum = allr.with_columns(pl.col("rho").cum_sum().over("estab").alias("cum"))
    np.testing.assert_allclose(cum["rho_lifetime"], cum["cum"], rtol=1e-12)
    with tabdp.Ledger.open(tmp_path / "ledger") as led:
        st = led.state()
        assert led.releases == 8
        assert led.entries[-1]["manifest_hash"] == note["manifest_sha256"]
    assert st["rho"].max() <= LIFETIME
    # unit 9999 (1.25 a run) is charged in early years and left out later
    u = allr.filter(pl.col("estab") == 9999)
    assert u["rho"].to_list()[:2] == pytest.approx([1.25, 1.25])
    assert u["rho_lifetime"].max() <= LIFETIME
    assert u.height < 8
    out = io.StringIO()
    assert cli_main(["ledger", "verify", str(tmp_path / "ledger"), "--series", "test-series"],
                    stdout=out) == 0
    assert "8 release(s)" in out.getvalue()


def test_ledger_spec_refusals(tmp_path):
    with pytest.raises(SpecError, match="overlaps the public output folder"):
        load_spec(_spec(tmp_path, 2021, ledger="out/2021/public/ledger"))
    with pytest.raises(SpecError, match="overlaps the confidential output folder"):
        load_spec(_spec(tmp_path, 2021, ledger="out/2021/confidential/l"))
    p = _spec(tmp_path, 2021)
    p.write_text(p.read_text().replace('unit = "estab"\n', ""))
    with pytest.raises(SpecError, match="needs input.unit"):
        load_spec(p)
    # review rev66w: a lifetime budget curve that falls with the size is refused with its key
    # path when the spec is read (it was refused only when the ledger's Budget was built)
    p = _spec(tmp_path, 2022, ledger="ledger2", init=False)
    p.write_text(p.read_text().replace(f"lifetime_budget = {LIFETIME}",
                                       'lifetime_budget = { "1e3" = 2.0, "1e7" = 1.0 }'))
    with pytest.raises(SpecError, match=r"ledger\.lifetime_budget\.1e7: the lifetime budget "
                                        "curve falls with the size"):
        load_spec(p)


def test_cli_run_refused_before_data_when_ledger_busy_or_tampered(tmp_path):
    spec = _spec(tmp_path, 2021)
    err = io.StringIO()
    assert cli_main(["run", str(spec), "--test-seed", "--quiet"], stderr=err) == 0, err.getvalue()
    spec2 = _spec(tmp_path, 2022)
    # busy: another run holds the ledger
    with tabdp.Ledger.open(tmp_path / "ledger"):
        err = io.StringIO()
        assert cli_main(["run", str(spec2), "--test-seed", "--quiet"], stderr=err) == 2
    assert "in use by another run" in err.getvalue()
    assert not (tmp_path / "out" / "2022").exists()
    # tampered: a flipped byte in the state
    f = next((tmp_path / "ledger" / "state").glob("*.parquet"))
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 1
    f.write_bytes(bytes(data))
    err = io.StringIO()
    assert cli_main(["run", str(spec2), "--test-seed", "--quiet"], stderr=err) == 2
    assert "does not verify" in err.getvalue()
    assert not (tmp_path / "out" / "2022").exists()


def test_failed_run_leaves_the_ledger_unchanged(tmp_path, monkeypatch):
    run_release(load_spec(_spec(tmp_path, 2021)), test_seed=True)
    with tabdp.Ledger.open(tmp_path / "ledger") as led:
        before = (led.releases, led.state())
    from tabdp.release import _tables

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(_tables, "render_confidential_html", boom, raising=False)
    import tabdp.report.html as html

    monkeypatch.setattr(html, "render_confidential_html", boom)
    with pytest.raises(tabdp.TabdpError):
        run_release(load_spec(_spec(tmp_path, 2022)), test_seed=True)
    with tabdp.Ledger.open(tmp_path / "ledger") as led:
        assert led.releases == before[0]
        assert led.state().equals(before[1])


def test_a_missing_ledger_is_refused_never_recreated(tmp_path):
    """A vanished ledger (deleted, moved, a typo) must not restart every lifetime at zero."""
    spec = _spec(tmp_path, 2021)
    assert cli_main(["run", str(spec), "--test-seed", "--quiet"], stderr=io.StringIO()) == 0
    import shutil

    shutil.rmtree(tmp_path / "ledger")
    spec2 = _spec(tmp_path, 2022, init=False)
    err = io.StringIO()
    assert cli_main(["run", str(spec2), "--test-seed", "--quiet"], stderr=err) == 2
    assert "never created implicitly" in err.getvalue()
    assert "tabdp ledger init" in err.getvalue()
    assert not (tmp_path / "ledger").exists()
    assert not (tmp_path / "out" / "2022").exists()
    # init refuses an existing folder; a bad budget is refused with the fix
    err = io.StringIO()
    assert cli_main(["ledger", "init", str(tmp_path / "out"), "--series", "s",
                     "--lifetime-budget", "4"], stderr=err) == 2
    assert "already there" in err.getvalue()
    err = io.StringIO()
    assert cli_main(["ledger", "init", str(tmp_path / "l2"), "--series", "s",
                     "--lifetime-budget", "lots"], stderr=err) == 2
    assert "must be a number or a JSON object" in err.getvalue()
    out = io.StringIO()
    assert cli_main(["ledger", "init", str(tmp_path / "l3"), "--series", "s",
                     "--lifetime-budget", '{"1": 4.0, "1e6": 12.0}'], stdout=out) == 0
    with tabdp.Ledger.open(tmp_path / "l3", series="s") as led:
        assert led.releases == 0


def _html_section(page: str, anchor: str) -> str:
    start = page.index(f'<div id="{anchor}">')
    return page[start:page.index("</div>", start)]


@pytest.mark.slow  # 8 s of the local loop (2026-12-03): CI only
def test_public_lifetime_statement_is_from_public_curves_only(tmp_path):
    """summary.json/html, plan and validate state the lifetime guarantee in words.

    ``tabdp plan`` and ``validate`` (no ledger opened) state the cap and the filter; the run
    adds the bound over the series' releases, from the ledger's public entries: the same words
    on neighbouring datasets, whatever per-unit state the ledgers hold.
    """
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    for folder in (a, b):  # one release before, on neighbouring datasets (b lacks unit 9999)
        spec = _spec(folder, 2021)
        if folder == b:
            pl.read_parquet(a / "data_2021.parquet").filter(pl.col("estab") != 9999) \
                .write_parquet(b / "data_2021.parquet")
        run_release(load_spec(spec), test_seed=True)
    spec_a, spec_b = _spec(a, 2022), _spec(b, 2022)
    # neighbouring datasets: b lacks unit 9999 (in every release of a, near its budget)
    pl.read_parquet(a / "data_2022.parquet").filter(pl.col("estab") != 9999).write_parquet(
        b / "data_2022.parquet")
    got = []
    for spec in (spec_a, spec_b):
        validate, plan = io.StringIO(), io.StringIO()
        assert cli_main(["validate", str(spec)], stdout=validate) == 0
        assert cli_main(["plan", str(spec), "--out", str(spec.parent / "plan")],
                        stdout=plan) == 0
        res = run_release(load_spec(spec), test_seed=True)
        summary = json.loads((res.public / "summary.json").read_text())
        page = (res.public / "summary.html").read_text()
        plan_json = json.loads((spec.parent / "plan" / "plan.json").read_text())
        words = summary["lifetime"]["guarantee_in_words"]
        # the plan's sentences (the cap, the filter) are all in the run's, in order
        assert [w for w in words if w in plan_json["lifetime"]["guarantee_in_words"]] == \
            plan_json["lifetime"]["guarantee_in_words"]
        for line in plan_json["lifetime"]["guarantee_in_words"]:
            assert line in validate.getvalue() and line in plan.getvalue()
        got.append((summary["lifetime"], _html_section(page, "lifetime"),
                    validate.getvalue().split("Lifetime guarantee", 1)[1]))
    assert got[0] == got[1]
    words = got[0][0]["guarantee_in_words"]
    assert words[0] == ("Over the releases of the series 'test-series' (this one, 'series_2022', "
                        "included), every unit loses at most rho = 3 in all (zCDP): the "
                        "series' lifetime budget.")
    # a unit of size 1: sum 1/(2*40^2) + count 1/(2*2^2) = 0.1253 per release: 23 releases
    assert any("size 1 (at most rho = 0.126" in w and "at least 23 release(s)" in w
               for w in words)
    # over the two releases: 2 x 0.1253125 = 0.250625, rounded up
    assert ("Over the releases 'series_2021' and 'series_2022' (this one) of series "
            "'test-series', a unit of size 1 in each of them has lost at most rho = 0.251 "
            "(zCDP).") in words
    assert "Over the releases of the series" in got[0][1]
    assert "has lost at most rho = 0.251" in got[0][1]
    assert got[0][0]["lifetime_budget"]["rho"] == 3.0
    assert got[0][0]["releases"] == ["series_2021", "series_2022"]


def _bound(summary: dict, size: float) -> float:
    return next(r["rho"] for r in summary["lifetime"]["bound_over_releases"]
                if r["delta"] == size)


@pytest.mark.slow  # CI only: a costly case the local loop leaves out (3-4 s)
def test_run_states_the_bound_over_three_releases(tmp_path):
    """The third release's summary: min(sum of the three public curves, lifetime budget).

    Tables: a payroll sum (Gaussian sigma 40: rho = s^2/3200) and a count (sigma 2, one row:
    0.125 whatever the size). Constant budget 3: at size 1 the curves bind (3 x 0.1253125),
    at 100 the budget does (3 x 3.25 > 3). Each entry records its name and curves.
    """
    for year in (2021, 2022, 2023):
        res = run_release(load_spec(_spec(tmp_path, year, extra=_SIZES)), test_seed=True)
    summary = json.loads((res.public / "summary.json").read_text())
    life = summary["lifetime"]
    assert life["releases"] == ["series_2021", "series_2022", "series_2023"]
    assert _bound(summary, 1.0) == pytest.approx(3 * (1 / 3200 + 0.125), rel=1e-12)
    assert _bound(summary, 1.0) >= 3 * (1 / 3200 + 0.125)  # never below the exact sum
    assert _bound(summary, 10.0) == pytest.approx(3 * (100 / 3200 + 0.125), rel=1e-12)
    assert _bound(summary, 100.0) == 3.0  # 3 x 3.25 = 9.75: the lifetime budget binds
    words = life["guarantee_in_words"]
    head = ("Over the releases 'series_2021', 'series_2022' and 'series_2023' (this one) of "
            "series 'test-series', ")
    assert head + "a unit of size 1 in each of them has lost at most rho = 0.376 (zCDP)." in words
    assert head + "a unit of size 10 in each of them has lost at most rho = 0.469 (zCDP)." in words
    assert head + "a unit of size 100 in each of them has lost at most rho = 3 (zCDP)." in words
    with tabdp.Ledger.open(tmp_path / "ledger") as led:
        rels = led.releases_public()
    assert [r["release"] for r in rels] == ["series_2021", "series_2022", "series_2023"]
    cur = rels[0]["curve"]["currencies"]
    assert sorted(cur) == ["payroll", "rows"] and cur["rows"]["rows"] == 1.0
    # no input.max_cells: the curves bound units in one cell of each table, and say so
    assert rels[0]["curve"]["holds_for"].startswith("units contributing to one cell")
    assert any(w.startswith("The curves of 'series_2021', 'series_2022' and 'series_2023' "
                            "(this one) bound units contributing to one cell") for w in words)
    out = io.StringIO()
    assert cli_main(["ledger", "show", str(tmp_path / "ledger")], stdout=out) == 0
    assert "release=series_2023" in out.getvalue() and "curve=recorded (1: 0.126" in \
        out.getvalue()


_SIZES = """
[plan]
record_sizes = [1.0, 10.0, 100.0]
"""


def test_run_bound_under_a_curve_lifetime_budget(tmp_path):
    """Curve budget {1: 0.2, 100: 5}: per currency min(sum of curves, the curve at the size).

    payroll (sigma 40): 3 x s^2/3200; rows (count, 1 row): 3 x 0.125 = 0.375, its limit the
    curve at 1 row, 0.2. At size 1: payroll 3/3200 (below 0.2) + rows 0.2. At 100: payroll
    min(9.375, 5) + 0.2.
    """
    curve = '{ "1" = 0.2, "100" = 5.0 }'
    out = io.StringIO()
    assert cli_main(["ledger", "init", str(tmp_path / "ledger"), "--series", "test-series",
                     "--lifetime-budget", '{"1": 0.2, "100": 5.0}'], stdout=out) == 0
    for year in (2021, 2022, 2023):
        _sample(year).write_parquet(tmp_path / f"data_{year}.parquet")
        text = series_spec(name=f"series_{year}", data=f"data_{year}.parquet", ledger="ledger",
                           series="test-series", lifetime=curve, seed=year,
                           public=f"out/{year}/public",
                           confidential=f"out/{year}/confidential", extra=_SIZES)
        (tmp_path / f"r{year}.toml").write_text(text)
        res = run_release(load_spec(tmp_path / f"r{year}.toml"), test_seed=True)
    summary = json.loads((res.public / "summary.json").read_text())
    assert _bound(summary, 1.0) == pytest.approx(3 / 3200 + 0.2, rel=1e-12)
    assert _bound(summary, 100.0) == pytest.approx(5.0 + 0.2, rel=1e-12)
    # at 10: payroll limit = 0.2 + (5 - 0.2)/2 = 2.6 (linear in log size), sum 3 x 1/32
    assert _bound(summary, 10.0) == pytest.approx(3 * 100 / 3200 + 0.2, rel=1e-12)
    assert any("a unit of size 100 in each of them has lost at most rho = 5.2 (zCDP)." in w
               for w in summary["lifetime"]["guarantee_in_words"])


@pytest.mark.slow  # 20 s of the local loop (2026-12-03): CI only
def test_run_lifetime_blocks_identical_on_neighbouring_ledgers(tmp_path):
    """Three series on neighbouring datasets: the same public lifetime statements.

    D, D with a unit less, D with a unit's size changed: the same summary.json ``lifetime``
    block, the same html block and the same ``Ledger.public()``.
    """
    folders = [tmp_path / n for n in ("a", "b", "c")]
    blocks = []
    for k, folder in enumerate(folders):
        folder.mkdir()
        for year in (2021, 2022, 2023):
            spec = _spec(folder, year)
            df = pl.read_parquet(folder / f"data_{year}.parquet")
            if k == 1:  # one unit less
                df = df.filter(pl.col("estab") != 9999)
            elif k == 2:  # one unit's size changed
                df = df.with_columns(payroll=pl.when(pl.col("estab") == 9999).then(7.5e4)
                                     .otherwise(pl.col("payroll")))
            df.write_parquet(folder / f"data_{year}.parquet")
            res = run_release(load_spec(spec), test_seed=True)
        summary = json.loads((res.public / "summary.json").read_text())
        with tabdp.Ledger.open(folder / "ledger") as led:
            assert led.state().height != 0
            pub = led.public()
        blocks.append((summary["lifetime"],
                       _html_section((res.public / "summary.html").read_text(), "lifetime"),
                       pub))
    assert blocks[0] == blocks[1] == blocks[2]
    assert "series_2021" in blocks[0][0]["guarantee_in_words"][1]


def test_run_cap_sentences_add_the_currencies_limits(tmp_path):
    """Under a curve budget the per-size cap is the sum of the currencies' limits.

    Budget {1: 0.2, 100: 5} per currency; the release charges payroll (at the unit's size)
    and rows (a count cell of 1 row): a unit of size 1 may lose 0.2 in payroll and 0.2 in rows
    over the series (0.4 in all), not the generic curve at size 1 (0.2); at size 100,
    5 + 0.2. Releases charged in full: the fewest over the currencies (rows: 0.125 a release
    against 0.2: one).
    """
    curve = '{ "1" = 0.2, "100" = 5.0 }'
    _sample(2021).write_parquet(tmp_path / "data_2021.parquet")
    text = series_spec(name="series_2021", data="data_2021.parquet", ledger="ledger",
                       series="test-series", lifetime=curve, seed=1, public="out/public",
                       confidential="out/confidential", extra=_SIZES)
    (tmp_path / "r.toml").write_text(text)
    words = plan_summary(load_spec(tmp_path / "r.toml"))["lifetime"]["guarantee_in_words"]
    at1 = next(w for w in words if w.startswith("a unit of size 1 "))
    at100 = next(w for w in words if w.startswith("a unit of size 100 "))
    assert "loses at most rho = 0.4 over the series" in at1, at1
    assert "loses at most rho = 5.2 over the series" in at100, at100
    assert "charged in full in at least 1 release(s)" in at1, at1
    assert "past its lifetime budget in a currency" in at1, at1
    # the head says the curve holds each currency, not a unit's total (review r59: a unit of
    # size 1 may lose 0.4 > the curve's 0.2 at size 1; the head promised 0.2)
    head = next(w for w in words if w.startswith("Over the releases"))
    assert "curve at that size" not in head, head
    assert ("in each currency it contributes to (each summed measure; rows for counts, "
            "medians and quantiles; a joint release of several measures: their names joined by "
            "'+'), at most the lifetime budget curve at its size in that currency") in head, head
    assert "at most the sum of those limits over its currencies:" in head, head


def _html_block(page: str, tag: str, sec_id: str) -> str:
    start = page.index(f'<{tag} id="{sec_id}">')
    return page[start:page.index(f"</{tag}>", start)]


def _ledger_only(folder: Path, *, big: bool, extra_ledger: str = "", extra: str = "") -> Path:
    """A series' first release (the ledger started, lifetime budget 1.0): the spec's path.

    60 small units, each within the lifetime budget, and with ``big`` one more (payroll 60:
    60^2/3200 + 0.125 = 1.25 > 1 in one release, so the lifetime budget leaves it out of
    ``pay``).
    """
    rng = np.random.default_rng(5)
    ids = np.arange(60, dtype=np.int64)
    frame = pl.DataFrame({"estab": ids, "county": np.array(COUNTIES)[ids % 3],
                          "payroll": np.round(np.minimum(rng.lognormal(2.0, 1.0, 60), 30.0),
                                              2)})
    if big:
        frame = pl.concat([frame, pl.DataFrame({"estab": [9999], "county": ["c1"],
                                                "payroll": [60.0]})])
    folder.mkdir(parents=True)
    frame.write_parquet(folder / "data.parquet")
    assert cli_main(["ledger", "init", str(folder / "ledger"), "--series", "test-series",
                     "--lifetime-budget", "1.0"], stdout=io.StringIO()) == 0
    text = series_spec(name="series_2021", data="data.parquet", ledger="ledger",
                       series="test-series", lifetime=1.0, seed=7, public="out/public",
                       confidential="out/confidential", extra=extra)
    text = text.replace("lifetime_budget = 1.0\n", "lifetime_budget = 1.0\n" + extra_ledger)
    (folder / "r.toml").write_text(text)
    return folder / "r.toml"


def test_ledger_only_spec_states_left_out_bias_whatever_the_data(tmp_path):
    """A ledger alone is an individual filter: the left-out bias text, from the spec alone.

    Review (A): a ``[ledger]`` spec without ``[budget]`` whose lifetime filter left units out
    published ``left_out_in_words: []`` and "No per-record budget was set", and the curator's
    terminal said nothing. Neighbouring datasets: ``b`` (every unit within the lifetime
    budget) and ``a`` = ``b`` plus one unit that the lifetime budget leaves out of ``pay``.
    The public sentences are the same; only the curator's terminal tells them apart.
    """
    from tabdp.release.runner import LIFETIME_LEFT_OUT_BIAS_TEXT

    got = {}
    for name in ("a", "b"):
        folder = tmp_path / name
        spec = _ledger_only(folder, big=name == "a")
        out, err = io.StringIO(), io.StringIO()
        code = cli_main(["run", str(spec), "--test-seed", "--quiet"], stdout=out, stderr=err)
        assert code == 0, err.getvalue()
        public = folder / "out" / "public"
        summary = json.loads((public / "summary.json").read_text())
        page = (public / "summary.html").read_text()
        conf = json.loads((folder / "out" / "confidential" / "confidential.json").read_text())
        got[name] = (summary["left_out_in_words"], _html_block(page, "section", "budget"),
                     err.getvalue(),
                     {t: r["left_out_by_budget"]["units"] for t, r in conf["releases"].items()})
    (words_a, html_a, err_a, lo_a), (words_b, html_b, err_b, lo_b) = got["a"], got["b"]
    assert lo_a == {"pay": 1, "n": 0} and lo_b == {"pay": 0, "n": 0}
    # public: the same words whether or not a unit was left out
    assert words_a == words_b == [LIFETIME_LEFT_OUT_BIAS_TEXT]
    assert "contributions are missing from the published values" in words_a[0]
    assert "sd and moe do not include" in words_a[0]
    assert html_a == html_b
    assert "No per-record budget was set" not in html_a
    assert "Lifetime budget of the series" in html_a and "ρ ≤ <b>1" in html_a
    assert "Units left out by the lifetime budget" in html_a
    # the curator's terminal: what was left out (confidential), or that nothing was
    assert ("WARNING (curator, do not publish): pay: 1 units (1 rows, " in err_a
            and "left out by the lifetime budget" in err_a), err_a
    assert "no unit was left out" in err_b and "WARNING (curator" not in err_b, err_b


def test_ledger_max_left_out(tmp_path):
    """``[ledger] max_left_out`` fails a curator run above the share, uncharged.

    Set in both ``[budget]`` and ``[ledger]``, the spec is refused (exit 2).
    """
    spec = _ledger_only(tmp_path / "a", big=True, extra_ledger="max_left_out = 0.01\n")
    assert load_spec(spec).ledger.max_left_out == 0.01  # type: ignore[union-attr]
    err = io.StringIO()
    assert cli_main(["run", str(spec), "--test-seed", "--quiet"], stderr=err) == 4
    assert "data-dependent failure" in err.getvalue()
    conf = tmp_path / "a" / "out" / "confidential"
    failure = json.loads((conf / "failure.json").read_text())
    assert failure["error"] == "LeftOutError"
    assert "the lifetime budget left out more than ledger.max_left_out = 0.01" in \
        failure["message"]
    assert set(failure["confidential"]["tables_over_limit"]) == {"pay"}
    assert not (tmp_path / "a" / "out" / "public").exists()
    with tabdp.Ledger.open(tmp_path / "a" / "ledger") as led:
        assert led.releases == 0
    # within the limit (no unit left out): the run goes through
    spec = _ledger_only(tmp_path / "b", big=False, extra_ledger="max_left_out = 0.01\n")
    assert cli_main(["run", str(spec), "--test-seed", "--quiet"], stderr=io.StringIO()) == 0
    # set twice: refused from the spec
    spec = _ledger_only(tmp_path / "c", big=False, extra_ledger="max_left_out = 0.01\n",
                        extra="[budget]\nrho = 5.0\nmax_left_out = 0.02\n")
    err = io.StringIO()
    assert cli_main(["validate", str(spec)], stdout=io.StringIO(), stderr=err) == 2
    assert "ledger.max_left_out" in err.getvalue() and "in both" in err.getvalue()
    spec.write_text(spec.read_text().replace("max_left_out = 1.5", "").replace(
        "max_left_out = 0.01", "max_left_out = 1.5"))
    err = io.StringIO()
    assert cli_main(["validate", str(spec)], stdout=io.StringIO(), stderr=err) == 2
    assert "ledger.max_left_out" in err.getvalue() and "1.5" in err.getvalue()


def test_output_folder_appearing_fails_before_the_ledger_is_charged(tmp_path):
    """Review (B): a check of the move into place that fails comes before the ledger commit.

    The public output folder appears while the run writes its outputs (here: made by the
    progress callback). The run fails ("nothing was written") and the ledger is not charged:
    before the fix it was committed first, and ``tabdp ledger show`` listed the release.
    """
    from tabdp.release.runner import DataDependentFailure

    spec = load_spec(_spec(tmp_path, 2021))

    def progress(step: int, steps: int, what: str) -> None:
        if what.startswith("writing outputs"):
            spec.output.public.mkdir(parents=True, exist_ok=True)

    with pytest.raises(DataDependentFailure) as got:
        run_release(spec, test_seed=True, progress=progress)
    with tabdp.Ledger.open(tmp_path / "ledger") as led:
        assert led.releases == 0
    out = io.StringIO()
    assert cli_main(["ledger", "show", str(tmp_path / "ledger")], stdout=out) == 0
    assert "series_2021" not in out.getvalue()
    failure = json.loads((spec.output.confidential / "failure.json").read_text())
    assert "appeared while the release was running; nothing was written" in failure["message"]
    assert "ledger" not in failure and "WAS charged" not in failure["message"]
    assert list(spec.output.public.iterdir()) == []
    assert got.value.ledger_release is None


def test_failure_after_the_ledger_commit_is_reported_and_a_rerun_warned(tmp_path, monkeypatch):
    """Review (B): a run failing after its ledger commit says so (curator only).

    The commit goes through, then writing the confidential ``ledger.json`` fails (a full
    disk). Nothing public is written; ``failure.json`` says the ledger was charged as release
    1 with its chain head, and the curator's terminal says so. Opening the ledger for the same
    release again (the same name and spec hash as the chain's last entry) warns the curator:
    the rerun is charged again.
    """
    import warnings

    from tabdp.exceptions import PrivacyWarning
    from tabdp.release import _ledger

    spec = _spec(tmp_path, 2021)
    real = _ledger.commit_release

    def commit_then_fail(*args, **kwargs):
        real(*args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_ledger, "commit_release", commit_then_fail)
    err = io.StringIO()
    assert cli_main(["run", str(spec), "--test-seed", "--quiet"], stderr=err) == 4
    monkeypatch.setattr(_ledger, "commit_release", real)
    assert "data-dependent failure" in err.getvalue()
    assert ("WARNING (curator, do not publish): the lifetime ledger was charged for this run as "
            "release 1 of its series") in err.getvalue()
    out_dir = tmp_path / "out" / "2021"
    assert not (out_dir / "public").exists()
    assert [p.name for p in (out_dir / "confidential").iterdir()] == ["failure.json"]
    failure = json.loads((out_dir / "confidential" / "failure.json").read_text())
    with tabdp.Ledger.open(tmp_path / "ledger") as led:
        assert led.releases == 1
        head = led.entries[-1]["hash"]
    assert failure["ledger"]["committed"] is True
    assert failure["ledger"]["release"] == 1 and failure["ledger"]["entry_hash"] == head
    assert f"as release 1 of series 'test-series' (chain head {head})" in \
        failure["ledger"]["note"]
    assert "the lifetime ledger WAS charged" in failure["message"]
    # the rerun: the curator is warned at open (before any data), and it is charged again
    with pytest.warns(PrivacyWarning, match="looks like a rerun of the series' last release"):
        res = run_release(load_spec(spec), test_seed=True)
    assert json.loads((res.confidential / "ledger.json").read_text())["release"] == 2
    # the next release of the series: no such warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_release(load_spec(_spec(tmp_path, 2022)), test_seed=True)
    assert not [w for w in caught if "rerun" in str(w.message)]


def test_rerun_of_the_last_release_warns_the_curator(tmp_path):
    """Review (B): the same release (name and spec hash) run again is charged again: warned.

    The warning (curator mode: the chain is the curator's) comes at open, before any data;
    the next year's release, or the same spec under another name, is not warned.
    """
    import warnings

    from tabdp.exceptions import PrivacyWarning

    spec = _spec(tmp_path, 2021)
    run_release(load_spec(spec), test_seed=True)
    with pytest.warns(PrivacyWarning, match="looks like a rerun") as got:
        res = run_release(load_spec(spec), test_seed=True, overwrite=True)
    msg = next(str(w.message) for w in got if "rerun" in str(w.message))
    assert "release 1 of series 'test-series'" in msg and "'series_2021'" in msg
    assert "charged again" in msg and "accept-restore" in msg
    assert json.loads((res.confidential / "ledger.json").read_text())["release"] == 2
    renamed = tmp_path / "renamed.toml"
    renamed.write_text(spec.read_text().replace('name = "series_2021"', 'name = "other"')
                       .replace("out/2021", "out/other"))
    for path in (_spec(tmp_path, 2022), renamed):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run_release(load_spec(path), test_seed=True)
        assert not [w for w in caught if "rerun" in str(w.message)], path


def test_unit_ids_of_another_type_refused_from_the_schema(tmp_path, monkeypatch):
    """Review (C): Int64 unit ids in year 1, String in year 2: exit 2 before any data is read.

    The chain records the ids' type; the input's unit column type is in its schema. Before,
    the run read the data and failed with the generic data-dependent failure (exit 4).
    """
    spec = _spec(tmp_path, 2021)
    assert cli_main(["run", str(spec), "--test-seed", "--quiet"], stderr=io.StringIO()) == 0
    spec2 = _spec(tmp_path, 2022)
    data = tmp_path / "data_2022.parquet"
    pl.read_parquet(data).with_columns(pl.col("estab").cast(pl.String)).write_parquet(data)
    from tabdp.release import runner

    def no_data(*args, **kwargs):
        raise AssertionError("the data was read")

    monkeypatch.setattr(runner, "_run_with_data", no_data)
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["run", str(spec2), "--test-seed", "--quiet"], stdout=out,
                    stderr=err) == 2, err.getvalue()
    text = err.getvalue()
    assert "spec/usage error" in text and "data-dependent" not in text
    assert ("the lifetime ledger of series 'test-series' keys units by Int64 ids" in text
            and "the unit column 'estab' has type String in the input" in text), text
    assert "no data was read" in text.lower() or "before any data was read" in text
    assert "Hint: store the unit column as Int64" in text
    assert not (tmp_path / "out" / "2022").exists()
    with tabdp.Ledger.open(tmp_path / "ledger") as led:
        assert led.releases == 1 and led.unit_dtype == "Int64"
    # an integer of another width is the same kind of id: no refusal from the schema
    pl.read_parquet(data).with_columns(pl.col("estab").cast(pl.Int32)).write_parquet(data)
    monkeypatch.undo()
    assert cli_main(["run", str(spec2), "--test-seed", "--quiet"], stderr=io.StringIO()) == 0


@pytest.mark.parametrize("dtype", [pl.UInt64, pl.Float64])
def test_unit_ids_the_ledger_cannot_key_are_refused_from_the_schema(tmp_path, dtype,
                                                                    monkeypatch):
    """Review r83: UInt64 or float unit ids with a ledger: exit 2 before any data is read.

    They were refused only after the data was read (exit 4, the generic failure), although
    the type alone decides it; the message names the column and its type.
    """
    _spec(tmp_path, 2024)
    _sample(2024).with_columns(pl.col("estab").cast(dtype)).write_parquet(
        tmp_path / "data_2024.parquet")
    from tabdp.release import runner

    def no_data(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the data was read")

    monkeypatch.setattr(runner, "_run_with_data", no_data)
    err = io.StringIO()
    code = cli_main(["run", str(tmp_path / "release_2024.toml"), "--test-seed", "--quiet"],
                    stdout=io.StringIO(), stderr=err)
    assert code == 2, err.getvalue()
    assert f"the unit column 'estab' has type {dtype}" in err.getvalue()
    assert "Refused before any data was read" in err.getvalue()
    with tabdp.Ledger.open(tmp_path / "ledger") as led:
        assert led.releases == 0
