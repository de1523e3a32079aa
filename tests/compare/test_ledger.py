"""``tabdp compare`` on a spec with a lifetime ledger: the ledger is read, never charged.

The comparison's DP side is filtered by the lifetime ledger exactly as the real run (the units at
their lifetime budget left out), but commits nothing: the ledger's files and its anchor stay
byte for byte, the run that follows is not taken for a rerun and names its release once, and a
tampered ledger is refused before any data is read, as a run refuses it. The Python API's
read-only open is tested here too (no Tau-Argus needed).
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp import cli
from tabdp.exceptions import InvalidParameterError, LedgerError, PrivacyWarning
from tabdp.privacy.lifetime import Ledger

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _specs import hierarchies, release_spec, rollups, table  # noqa: E402


def _spec(year: int, seed: int, data: str) -> str:
    """The release of ``year`` (outputs ``out<year>/``), charged to the ledger ``ledger``."""
    return release_spec(
        table("pay", ["county", "naics2"], '{ family = "gaussian", sigma = 40.0 }',
              measures=["payroll"], extra=rollups(["state", "naics2"], direct=True)),
        table("n", ["county"], '{ family = "gaussian", sigma = 2.0 }', kind="count",
              extra=rollups(["state"])),
        name=f"r{year}", release_extra='title = "test"', path=data, input_extra='unit = "estab"',
        domains={"naics2": ["11", "21", "22"]}, seed=seed,
        sections=hierarchies("geo", files={"geo": "geo.csv"})
        + '[ledger]\npath = "ledger"\nseries = "s"\nlifetime_budget = 8.0\n',
        public=f"out{year}/public", confidential=f"out{year}/confidential")


def _write_series(d: Path) -> None:
    """A two-state sample, its geography and the ledger (empty)."""
    counties = [f"0{s}00{c}" for s in (1, 2) for c in (1, 3, 5, 7)]
    pl.DataFrame({"state": [c[:2] for c in counties], "county": counties}).write_csv(
        d / "geo.csv")
    rng = np.random.default_rng(1)
    n = 200
    pl.DataFrame({"estab": np.arange(n, dtype=np.int64), "county": rng.choice(counties, n),
                  "naics2": rng.choice(["11", "21", "22"], n),
                  "payroll": np.round(rng.lognormal(3, 1, n), 2)}).write_parquet(d / "D.parquet")
    for year, seed in ((2021, 1), (2022, 2)):
        (d / f"s{year}.toml").write_text(_spec(year, seed, "D.parquet"),
                                         encoding="utf-8")
    assert cli.main(["ledger", "init", str(d / "ledger"), "--series", "s",
                     "--lifetime-budget", "8.0"], stdout=io.StringIO(),
                    stderr=io.StringIO()) == 0


def _ledger_files(d: Path) -> dict[str, str]:
    """SHA-256 of every file of the ledger folder, and of its anchor next to it."""
    files = [p for p in (d / "ledger").rglob("*") if p.is_file()]
    files += list(d.glob(".ledger*"))
    assert any(p.name.endswith(".head.json") for p in files)
    return {p.relative_to(d).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in files}


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = cli.main(list(args), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue() + "".join(str(w.message) for w in caught)


def _left_out(conf: dict[str, Any]) -> dict[str, tuple[int, int]]:
    return {t: (v["left_out_by_budget"]["units"], v["left_out_by_budget"]["rows"])
            for t, v in conf["releases"].items() if "left_out_by_budget" in v}


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """r2021 run; then r2022 compared (ledger hashed around it), then r2022 run."""
    pytest.importorskip("pytauargus")
    d = tmp_path_factory.mktemp("led")
    _write_series(d)
    first = _cli("run", str(d / "s2021.toml"), "--test-seed", "--quiet")
    assert first[0] == 0, first
    before = _ledger_files(d)
    cmp = _cli("compare", str(d / "s2022.toml"), "--test-seed", "--no-tau-audit")
    after = _ledger_files(d)
    verify = _cli("ledger", "verify", str(d / "ledger"))
    show = _cli("ledger", "show", str(d / "ledger"))
    run = _cli("run", str(d / "s2022.toml"), "--test-seed", "--quiet")
    return {"dir": d, "before": before, "after": after, "compare": cmp, "verify": verify,
            "show": show, "run": run}


def test_compare_leaves_every_ledger_file_byte_identical(series: dict[str, Any]) -> None:
    code, out, err = series["compare"]
    assert code == 0, err
    assert series["after"] == series["before"]
    assert any(k.startswith("ledger/state/") for k in series["before"])  # r2021 charged
    assert series["verify"][0] == 0 and "intact (1 release(s)" in series["verify"][1]
    assert series["show"][0] == 0 and "r2022" not in series["show"][1]
    assert "1 release(s)" in series["show"][1]
    cmp = series["dir"] / "out2022" / "confidential" / "compare"
    assert not (cmp / "dp_release" / "confidential" / "ledger.json").exists()
    life = json.loads((cmp / "compare.json").read_text("utf-8"))["lifetime_ledger"]
    assert life["applied"] is True and life["charged"] is False
    assert life["releases_read"] == ["r2021"]
    assert "read, NOT charged" in out
    notice = (cmp / "dp_release" / "NOT_FOR_PUBLICATION.txt").read_text("utf-8")
    assert "never charged" in notice


def test_run_after_compare_is_no_rerun_and_names_its_release_once(
        series: dict[str, Any]) -> None:
    code, _, err = series["run"]
    assert code == 0, err
    assert "rerun" not in err
    summary = json.loads((series["dir"] / "out2022" / "public" / "summary.json")
                         .read_text("utf-8"))
    assert summary["lifetime"]["releases"] == ["r2021", "r2022"]
    assert "'r2022' and 'r2022'" not in json.dumps(summary)
    show = _cli("ledger", "show", str(series["dir"] / "ledger"))[1]
    assert show.count("release=r2022") == 1 and "2 release(s)" in show


def test_compare_leaves_out_the_units_the_run_leaves_out(series: dict[str, Any]) -> None:
    d = series["dir"]
    dp = d / "out2022" / "confidential" / "compare" / "dp_release"
    run_conf = json.loads((d / "out2022" / "confidential" / "confidential.json")
                          .read_text("utf-8"))
    cmp_conf = json.loads((dp / "confidential" / "confidential.json").read_text("utf-8"))
    first = json.loads((d / "out2021" / "confidential" / "confidential.json")
                       .read_text("utf-8"))
    # the lifetime budget leaves out more in the second release (units at their budget)
    assert _left_out(run_conf)["pay"][0] > _left_out(first)["pay"][0]
    assert _left_out(cmp_conf) == _left_out(run_conf)
    life = json.loads((dp.parent / "compare.json").read_text("utf-8"))["lifetime_ledger"]
    assert {t: (v["units"], v["rows"]) for t, v in life["left_out"].items()} == \
        _left_out(run_conf)
    # the same seed: the same per-record losses (rho_lifetime included) and the same tables
    got = pl.read_parquet(dp / "confidential" / "per_record_losses.parquet")
    want = pl.read_parquet(d / "out2022" / "confidential" / "per_record_losses.parquet")
    assert got.equals(want)
    assert "rho_lifetime" in got.columns
    for name in ("pay.parquet", "pay__state_naics2.parquet"):
        assert pl.read_parquet(dp / "tables" / name).equals(
            pl.read_parquet(d / "out2022" / "public" / name))


def test_tampered_ledger_is_refused_before_any_data_as_run_does(tmp_path: Path) -> None:
    pytest.importorskip("pytauargus")
    _write_series(tmp_path)
    assert _cli("run", str(tmp_path / "s2021.toml"), "--test-seed", "--quiet")[0] == 0
    part = next(p for p in (tmp_path / "ledger" / "state").glob("*.parquet"))
    raw = bytearray(part.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    part.write_bytes(bytes(raw))
    # data that cannot be read: any read would fail the run with the generic failure (4)
    (tmp_path / "D.parquet").write_bytes(b"not parquet")
    code, _, err = _cli("compare", str(tmp_path / "s2022.toml"), "--test-seed",
                        "--no-tau-audit")
    rcode, _, rerr = _cli("run", str(tmp_path / "s2022.toml"), "--test-seed", "--quiet")
    assert code == 2 and rcode == 2, (err, rerr)
    assert "does not verify" in err and "does not verify" in rerr
    # nothing of the refused comparison is left behind (a retry needs no --overwrite)
    assert not (tmp_path / "out2022" / "confidential" / "compare").exists()


def test_read_only_open_filters_but_never_commits(tmp_path: Path) -> None:
    p = tmp_path / "ledger"
    with Ledger.create(p, series="s", lifetime_budget=1.0) as led:
        s = tabdp.Session(unit="id", seed=1, ledger=led)
        df = pl.DataFrame({"id": [1, 2], "c": ["a", "b"]})
        keys = tabdp.KeySet.from_dict(c=["a", "b"])
        _ = df.dp.count(by=["c"], keys=keys, session=s,
                        mechanism=tabdp.mechanisms.Gaussian(1.0))
    before = {q: q.read_bytes() for q in [*p.rglob("*"), *tmp_path.glob(".ledger*")]
              if q.is_file()}
    with pytest.raises(InvalidParameterError, match="read_only"):
        Ledger.open(p, read_only=True)  # autocommit=True writes
    led = Ledger.open(p, autocommit=False, read_only=True)
    with pytest.raises(InvalidParameterError, match="read_only=True"):
        tabdp.Session(unit="id", seed=2, ledger=led)  # a session's releases must be charged
    # tabdp compare's internal path (its DP side is never published)
    s = tabdp.Session(unit="id", seed=2, ledger=led, _read_only_ledger=True)
    _ = df.dp.count(by=["c"], keys=keys, session=s, mechanism=tabdp.mechanisms.Gaussian(1.0))
    assert s.report().per_record["rho_lifetime"].to_list() == [1.0, 1.0]
    with pytest.raises(LedgerError, match="read-only"):
        led.commit(label="x")
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        led.close()  # its charges dropped silently
    after = {q: q.read_bytes() for q in [*p.rglob("*"), *tmp_path.glob(".ledger*")]
             if q.is_file()}
    assert after == before
    with Ledger.open(p) as again:
        assert again.releases == 1


def test_report_and_compare_after_the_run_say_what_the_filter_read(
        series: dict[str, Any]) -> None:
    d = series["dir"]
    html = (d / "out2022" / "confidential" / "compare" / "compare_report.html").read_text(
        "utf-8")
    assert "Lifetime ledger: read, not charged." in html and "1 earlier release(s)" in html
    before = _ledger_files(d)
    code, _, err = _cli("compare", str(d / "s2022.toml"), "--test-seed", "--no-tau-audit",
                        "--out", str(d / "again"))
    assert code == 0, err
    assert _ledger_files(d) == before
    # the ledger already holds r2022: the comparison says it counts it, as a rerun would
    assert "the lifetime ledger already holds this release" in err
    life = json.loads((d / "again" / "compare.json").read_text("utf-8"))["lifetime_ledger"]
    assert life["releases_read"] == ["r2021", "r2022"]


@pytest.mark.parametrize("where", ["ledger", "ledger/x/y/cmp", ".", "out2022", "D.parquet",
                                   "s2022.toml"])
def test_a_comparison_folder_never_overlaps_the_ledger_input_or_outputs(
        tmp_path: Path, where: str) -> None:
    # review r57: `--out <ledger> --overwrite` removed the whole lifetime ledger before the run
    # refused the overlap, and `--out ledger/x/y/cmp` left folders inside the ledger; an --out
    # holding the confidential folder, the input or the spec was not refused either
    pytest.importorskip("pytauargus")
    _write_series(tmp_path)
    assert _cli("run", str(tmp_path / "s2021.toml"), "--test-seed", "--quiet")[0] == 0
    before = _ledger_files(tmp_path)
    listing = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    code, _, err = _cli("compare", str(tmp_path / "s2022.toml"), "--test-seed",
                        "--no-tau-audit", "--out", str(tmp_path / where), "--overwrite")
    assert code == 2, err
    assert "comparison folder" in err and ("overlaps" in err or "holds" in err)
    assert _ledger_files(tmp_path) == before
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == listing


@pytest.mark.parametrize("src, folder", [("/d/y*/p.parquet", "/d"), ("/d/y20??/p.parquet", "/d"),
                                         ("/d/{a,b}/p.parquet", "/d"), ("/d/x/*.parquet", "/d/x"),
                                         ("/d/p.parquet", "/d/p.parquet")])
def test_the_input_a_glob_reads_is_its_first_wildcards_folder(src: str, folder: str) -> None:
    # review r58: `data/y*/*.parquet` was guarded as `data/y`, so `compare --out data/y2022
    # --overwrite` removed half the input
    from tabdp.release.spec.checks import read_paths
    from tabdp.release.spec.model import InputSpec

    got = read_paths(InputSpec(path=Path(src), source=src), {}, {}, (), Path("/s"), None)
    assert got == [("input.path", Path(folder))]


@pytest.mark.parametrize("where", ["data/y2022", "data", "codes", "plan", ".ledger.head.json",
                                   "ledger"])
def test_refused_comparison_folders_beside_the_spec(tmp_path: Path, where: str) -> None:
    # review r58: a partial glob's matches, a domain file's folder, the plan folder and the
    # ledger's anchor were not guarded
    import types

    from tabdp.compare.core import _refuse_overlaps

    out = types.SimpleNamespace(confidential=tmp_path / "out" / "confidential",
                                plan=tmp_path / "plan", public=tmp_path / "out" / "public")
    spec = types.SimpleNamespace(
        output=out, ledger=types.SimpleNamespace(path=tmp_path / "ledger"),
        path=tmp_path / "s.toml", hierarchies={}, tables=(),
        input=types.SimpleNamespace(path=tmp_path / "data" / "y*" / "p.parquet"),
        raw={"domains": {"naics": {"file": "codes/naics.csv"}}})
    with pytest.raises(InvalidParameterError, match="overlaps"):
        _refuse_overlaps(spec, tmp_path / where)
    _refuse_overlaps(spec, tmp_path / "elsewhere")  # a folder of its own: fine
