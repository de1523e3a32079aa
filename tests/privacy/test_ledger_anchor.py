"""The lifetime ledger's anchor: an older copy of the whole folder is refused (finding R11-6).

The anchor ``<parent>/.<name>.head.json`` records the series id, the number of chain entries
and the chain head; it is rewritten after each commit and checked at every open
(``tabdp.privacy._anchor``; docs/privacy-semantics.md, "Lifetime budgets").
"""

from __future__ import annotations

import io
import json
import shutil
import stat
import sys
from pathlib import Path

import polars as pl
import pytest
from _curator import warn_from_another_thread

import tabdp
from tabdp import mechanisms as mech
from tabdp.cli import main as cli_main
from tabdp.exceptions import LedgerAnchorError, LedgerError, PrivacyWarning
from tabdp.privacy import _anchor

pytest.importorskip("deltalake")

ROOT = Path(__file__).resolve().parents[2]
KEYS = tabdp.KeySet.from_dict(c=["a", "b"])
BASE = pl.DataFrame({"id": [1, 2, 3], "c": ["a", "b", "a"]})


def _release(path: Path, seed: int, **kw: object) -> None:
    with tabdp.Ledger.open(path, **kw) as led:  # type: ignore[arg-type]
        s = tabdp.Session(unit="id", seed=seed, ledger=led)
        BASE.dp.count(by=["c"], keys=KEYS, session=s, mechanism=mech.Gaussian(1.0))


def _series(path: Path, releases: int = 2) -> None:
    tabdp.Ledger.create(path, series="s", lifetime_budget=50.0).close()
    for i in range(releases):
        _release(path, i)


def _anchor_of(path: Path) -> dict:
    return json.loads((path.parent / f".{path.name}.head.json").read_text())


def _put_back(backup: Path, path: Path) -> None:
    """Replace the ledger folder by a copy (the anchor next to it stays)."""
    shutil.rmtree(path)
    shutil.copytree(backup, path, symlinks=True)


def _verify(path: Path, *extra: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["ledger", "verify", str(path), *extra], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_the_anchor_follows_every_commit_owner_only(tmp_path):
    path = tmp_path / "l"
    assert cli_main(["ledger", "init", str(path), "--series", "s", "--lifetime-budget", "9"],
                    stdout=io.StringIO()) == 0
    where = tmp_path / ".l.head.json"
    assert stat.S_IMODE(where.stat().st_mode) == 0o600
    assert _anchor_of(path)["entries"] == 1
    for i in range(3):
        _release(path, i)
        with tabdp.Ledger.open(path) as led:
            head = led.entries[-1]["hash"]
            sid = led.entries[0]["series_id"]
        a = _anchor_of(path)
        assert (a["entries"], a["head"], a["series_id"]) == (i + 2, head, sid)
        assert stat.S_IMODE(where.stat().st_mode) == 0o600
    # nothing else was left next to the ledger (no temporary files)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".l.head.json", "l"]
    code, out, err = _verify(path)
    assert code == 0 and "matches its anchor" in out and not err


def test_an_older_copy_of_the_folder_is_refused_and_the_anchor_kept(tmp_path):
    path = tmp_path / "l"
    _series(path)
    backup = tmp_path / "backup"
    shutil.copytree(path, backup, symlinks=True)
    _release(path, 7)
    anchor = (tmp_path / ".l.head.json").read_bytes()
    _put_back(backup, path)
    with pytest.raises(LedgerAnchorError, match="an older copy of the ledger folder was put "
                       "back") as info:
        tabdp.Ledger.open(path)
    msg = str(info.value)
    assert "records 3 release(s)" in msg and "holds 2 release(s)" in msg
    assert "tabdp ledger accept-restore" in msg and "before any data" in msg
    assert isinstance(info.value, LedgerError) and isinstance(info.value, ValueError)
    code, _, err = _verify(path)
    assert code == 2 and "older copy" in err
    # refused: the anchor is left as it was (the next open refuses too)
    assert (tmp_path / ".l.head.json").read_bytes() == anchor
    with pytest.raises(LedgerAnchorError):
        tabdp.Ledger.open(path, create=True, series="s")


def test_a_copy_that_went_on_from_an_earlier_release_is_refused(tmp_path):
    """Same length, another head: an older copy put back, then a release made on it."""
    path = tmp_path / "l"
    _series(path)
    fork = tmp_path / "fork" / "l"
    fork.parent.mkdir()
    shutil.copytree(path, fork, symlinks=True)
    _release(path, 7)
    with pytest.raises(LedgerAnchorError, match="has no anchor"):  # the copy has none
        _release(fork, 8)
    with pytest.warns(PrivacyWarning, match="restore accepted"):  # taken on deliberately
        _release(fork, 8, accept_restore=True)
    _put_back(fork, path)
    with pytest.raises(LedgerAnchorError, match="entry 3 is another one"):
        tabdp.Ledger.open(path)


def test_another_series_in_the_folder_is_refused(tmp_path):
    path = tmp_path / "l"
    _series(path)
    other = tmp_path / "o" / "l"
    other.parent.mkdir()
    _series(other, releases=3)
    _put_back(other, path)
    with pytest.raises(LedgerAnchorError, match="another release series"):
        tabdp.Ledger.open(path)


def test_a_run_killed_between_its_commit_and_the_anchor_opens(tmp_path, monkeypatch):
    """The anchor one entry behind, at the chain's previous head: accepted and brought up."""
    path = tmp_path / "l"
    _series(path)

    def killed(*a: object, **k: object) -> None:
        raise SystemExit("killed between the commit and the anchor")

    monkeypatch.setattr(_anchor, "write_anchor", killed)
    with pytest.raises(SystemExit):
        _release(path, 7)
    monkeypatch.undo()
    assert _anchor_of(path)["entries"] == 3  # behind: the chain holds 4 entries
    with tabdp.Ledger.open(path) as led:  # no warning (warnings are errors here)
        assert led.releases == 3
        head = led.entries[-1]["hash"]
    assert _anchor_of(path)["entries"] == 4 and _anchor_of(path)["head"] == head
    # two entries behind is no crash of ours (an old anchor put back): refused
    where = tmp_path / ".l.head.json"
    kept = where.read_bytes()
    _release(path, 8)
    _release(path, 9)
    where.write_bytes(kept)
    with pytest.raises(LedgerAnchorError, match="the anchor is older than the folder"):
        tabdp.Ledger.open(path)


# origin: review r36 (a backup of the folder put back without its anchor was accepted with a
# warning, which an author's run showed only to the author; verify then said "it matches")
def test_a_missing_anchor_is_refused_once_the_series_has_a_release(tmp_path):
    """Without its anchor, an older copy cannot be told from the newest: refused, not written.

    Python, ``tabdp ledger verify`` (exit 2, the anchor not written) and a read-only verify
    alike; an older copy put back without its anchor is refused as well; the curator accepts
    the folder explicitly (``accept_restore``), which writes the anchor with a warning.
    """
    path = tmp_path / "l"
    _series(path)
    backup = tmp_path / "backup"
    shutil.copytree(path, backup, symlinks=True)
    _release(path, 7)
    where = tmp_path / ".l.head.json"
    _put_back(backup, path)
    where.unlink()  # the older folder put back, and the anchor lost with it
    with pytest.raises(LedgerAnchorError, match="has no anchor") as info:
        tabdp.Ledger.open(path)
    msg = str(info.value)
    assert "holds 2 release(s)" in msg and "before any data" in msg
    assert "tabdp ledger accept-restore" in msg and "0.5" not in msg  # no per-unit loss
    code, out, err = _verify(path)
    assert code == 2 and "has no anchor" in err and not out
    assert not where.exists()
    with pytest.raises(LedgerAnchorError, match="has no anchor"):
        tabdp.privacy.lifetime.verify_ledger(path)  # read-only: refused too
    assert not where.exists()
    with pytest.warns(PrivacyWarning, match="restore accepted") as got:
        led = tabdp.Ledger.open(path, accept_restore=True)
    assert "no readable anchor" in str(got[0].message)
    assert led.open_warnings == [str(got[0].message)]
    led.close()
    assert stat.S_IMODE(where.stat().st_mode) == 0o600
    assert _anchor_of(path)["entries"] == 3
    assert _anchor_of(path)["accepted_restore"]["previous"] is None
    with tabdp.Ledger.open(path) as led:  # accepted: no warning now
        assert led.open_warnings == []
    code, out, err = _verify(path)
    assert code == 0 and "it matches its anchor" in out and not err


def test_a_missing_anchor_of_a_series_without_releases_is_written_with_a_warning(tmp_path):
    path = tmp_path / "l"
    tabdp.Ledger.create(path, series="s", lifetime_budget=50.0).close()
    where = tmp_path / ".l.head.json"
    where.unlink()
    code, out, err = _verify(path)
    assert code == 0 and "had no anchor" in err
    assert "its anchor was written now" in out and "matches" not in out
    assert where.exists()
    where.unlink()
    with pytest.warns(PrivacyWarning, match="had no anchor"):
        tabdp.Ledger.open(path).close()
    assert _anchor_of(path)["entries"] == 1


# origin: review r36 (delta-rs gives percent-encoded URIs with links resolved: an intact
# ledger under a path with a space, a non-ASCII letter, '#' or a link was "Delta log altered")
@pytest.mark.parametrize("where", ["My Ledgers/l", "ü-led/l", "hash#x/l", "link/l",
                                   "via/l"])
def test_a_ledger_under_any_path_verifies(tmp_path, where):
    """Spaces, non-ASCII letters, '#', a linked folder or a linked parent: one ledger, one anchor.

    A link to the ledger folder names the same ledger (the same anchor, next to the real
    folder); '%' (which the Delta Lake library decodes) is refused with a clear message.
    """
    if where == "link/l":
        real = tmp_path / "real" / "l"
        real.parent.mkdir()
        _series(real)
        (tmp_path / "link").mkdir()
        (tmp_path / "link" / "l").symlink_to(real)
    elif where == "via/l":
        (tmp_path / "real").mkdir()
        (tmp_path / "via").symlink_to(tmp_path / "real")
        real = tmp_path / "real" / "l"
        _series(tmp_path / "via" / "l")
    else:
        (tmp_path / where).parent.mkdir()
        real = tmp_path / where
        _series(real)
    path = tmp_path / where
    _release(path, 5)
    _release(path, 6)
    with tabdp.Ledger.open(path) as led:
        assert led.releases == 4 and led.open_warnings == []
    assert _anchor_of(real)["entries"] == 5
    assert _verify(path)[0] == 0 and _verify(real)[0] == 0
    assert sorted(p.name for p in real.parent.iterdir() if p.name.startswith(".")) == [
        ".l.head.json"]


@pytest.mark.parametrize("name", ["pct%20x", "back\\slash", "new\nline", "tab\tx"])
def test_a_ledger_path_the_delta_library_misreads_is_refused(tmp_path, name):
    """'%' (decoded), a backslash (a separator to delta-rs), control characters (refused by it).

    Review r37: a backslash let `tabdp ledger init` succeed and every charged run fail after
    reading the data.
    """
    path = tmp_path / name / "l"
    path.parent.mkdir()
    with pytest.raises(LedgerError, match="holds .*(%|backslash|control)"):
        tabdp.Ledger.create(path, series="s", lifetime_budget=1.0)
    assert not path.exists()
    code = cli_main(["ledger", "init", str(path), "--series", "s", "--lifetime-budget", "1"],
                    stdout=io.StringIO(), stderr=io.StringIO())
    assert code == 2 and not path.exists()


def test_accept_restore_python_and_cli(tmp_path):
    path = tmp_path / "l"
    _series(path)
    backup = tmp_path / "backup"
    shutil.copytree(path, backup, symlinks=True)
    _release(path, 7)
    _put_back(backup, path)
    with pytest.warns(PrivacyWarning, match="restore accepted") as got:
        led = tabdp.Ledger.open(path, accept_restore=True)
    assert "it recorded 3 release(s)" in str(got[0].message)
    assert led.releases == 2
    led.close()
    a = _anchor_of(path)
    assert a["entries"] == 3 and a["accepted_restore"]["previous"]["entries"] == 4
    tabdp.Ledger.open(path).close()  # accepted: opens without a warning
    # the CLI: the same, logged on the curator's terminal
    _release(path, 8)
    _put_back(backup, path)
    assert _verify(path)[0] == 2
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["ledger", "accept-restore", str(path), "--series", "s"], stdout=out,
                    stderr=err) == 0, err.getvalue()
    assert "restore accepted" in out.getvalue() and "restore accepted" in err.getvalue()
    assert _verify(path)[0] == 0
    out = io.StringIO()
    assert cli_main(["ledger", "accept-restore", str(path)], stdout=out,
                    stderr=io.StringIO()) == 0
    assert "already recorded" in out.getvalue()
    # accepting never accepts a folder that does not verify
    e = path / "chain" / "00000002.json"
    e.write_text(e.read_text().replace('"kind":"release"', '"kind":"relase"'))
    err = io.StringIO()
    assert cli_main(["ledger", "accept-restore", str(path)], stderr=err) == 2
    assert "does not verify" in err.getvalue()


def test_accept_restore_is_refused_under_author_only(tmp_path, monkeypatch):
    path = tmp_path / "l"
    _series(path, releases=1)
    cfg = tmp_path / "cur.toml"
    cfg.write_text('[datasets.d]\npath = "/nonexistent"\nschema = { a = "Int64" }\n'
                   f'[output]\nroot = "{(tmp_path / "rel").as_posix()}"\n'
                   "[policy]\nauthor_only = true\n", encoding="utf-8")
    monkeypatch.setenv("TABDP_CURATOR", str(cfg))
    (tmp_path / ".l.head.json").unlink()
    err = io.StringIO()
    assert cli_main(["ledger", "accept-restore", str(path)], stdout=io.StringIO(),
                    stderr=err) == 2
    assert "author_only" in err.getvalue() and str(path) not in err.getvalue()
    assert not (tmp_path / ".l.head.json").exists()  # nothing written


def test_a_vanished_folder_with_an_anchor_is_not_recreated_by_create_true(tmp_path):
    """``open(create=True)`` (each year's script) of a folder gone missing: refused."""
    path = tmp_path / "l"
    _series(path)
    shutil.rmtree(path)
    with pytest.raises(LedgerError, match="its anchor .* records 2 release"):
        tabdp.Ledger.open(path, series="s", lifetime_budget=50.0, create=True)
    assert not path.exists()
    # starting the series over is explicit
    tabdp.Ledger.create(path, series="s", lifetime_budget=50.0, start_over=True).close()
    assert _anchor_of(path)["entries"] == 1


def test_create_over_an_anchor_that_records_releases_is_refused(tmp_path):
    """``Ledger.create`` / ``tabdp ledger init`` where a vanished series' anchor is: refused."""
    path = tmp_path / "l"
    _series(path)
    before = _anchor_of(path)
    shutil.rmtree(path)
    with pytest.raises(LedgerError, match=r"its anchor .* records 2 release\(s\)") as got:
        tabdp.Ledger.create(path, series="s", lifetime_budget=50.0)
    assert "start_over=True" in str(got.value) and "--start-over" in str(got.value)
    assert not path.exists() and _anchor_of(path) == before  # nothing written
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["ledger", "init", str(path), "--series", "s", "--lifetime-budget", "9"],
                    stdout=out, stderr=err)
    assert code == 2 and "records 2 release(s)" in err.getvalue(), err.getvalue()
    assert not path.exists() and _anchor_of(path) == before
    # the documented way on: a deliberate new series, with a new anchor
    assert cli_main(["ledger", "init", str(path), "--series", "s", "--lifetime-budget", "9",
                     "--start-over"], stdout=io.StringIO()) == 0
    after = _anchor_of(path)
    assert after["entries"] == 1 and after["series_id"] != before["series_id"]
    with tabdp.Ledger.open(path) as led:
        assert led.releases == 0


def test_create_next_to_an_anchor_of_no_release_or_a_garbled_one(tmp_path):
    """An anchor of a series with no release is replaced; one that does not parse is not."""
    path = tmp_path / "l"
    tabdp.Ledger.create(path, series="s", lifetime_budget=50.0).close()
    shutil.rmtree(path)
    tabdp.Ledger.create(path, series="s", lifetime_budget=50.0).close()  # nothing lost
    shutil.rmtree(path)
    where = tmp_path / ".l.head.json"
    where.write_text("{not json")
    with pytest.raises(LedgerError, match="not a valid anchor file"):
        tabdp.Ledger.create(path, series="s", lifetime_budget=50.0)
    assert where.read_text() == "{not json" and not path.exists()
    tabdp.Ledger.create(path, series="s", lifetime_budget=50.0, start_over=True).close()
    assert _anchor_of(path)["entries"] == 1


# origin: review R18 (R18-4: open(create=True) started a new series over a damaged anchor)
@pytest.mark.parametrize("damage", ["truncated", "symlink"])
def test_a_vanished_folder_with_a_damaged_anchor_is_not_recreated_by_create_true(
        tmp_path, damage):
    """Each year's ``open(create=True)``: a folder gone and its anchor damaged is refused too.

    Whether the anchor recorded releases is unknown: starting a new series there would restart
    every unit's lifetime loss at zero without the curator's decision (``Ledger.create``
    refuses the same anchor; ``start_over=True`` is the decision).
    """
    path = tmp_path / "l"
    _series(path)
    shutil.rmtree(path)
    where = tmp_path / ".l.head.json"
    if damage == "truncated":
        where.write_text(where.read_text()[:-5])
    else:
        victim = tmp_path / "victim.json"
        where.rename(victim)
        where.symlink_to(victim)
    before = where.read_text()
    with pytest.raises(LedgerError, match="anchor"):
        tabdp.Ledger.open(path, series="s", lifetime_budget=50.0, create=True)
    assert not path.exists() and where.read_text() == before
    tabdp.Ledger.create(path, series="s", lifetime_budget=50.0, start_over=True).close()
    assert _anchor_of(path)["entries"] == 1


def test_a_symlinked_or_garbled_anchor_is_refused(tmp_path):
    path = tmp_path / "l"
    _series(path, releases=1)
    where = tmp_path / ".l.head.json"
    where.write_text("{not json")
    with pytest.raises(LedgerAnchorError, match="is not a tabdp-ledger-anchor/1 file"):
        tabdp.Ledger.open(path)
    victim = tmp_path / "victim.json"
    victim.write_text("keep")
    where.unlink()
    where.symlink_to(victim)
    with pytest.raises(LedgerAnchorError, match="symbolic link"):
        tabdp.Ledger.open(path)
    with pytest.warns(PrivacyWarning, match="restore accepted"):
        tabdp.Ledger.open(path, accept_restore=True).close()
    assert victim.read_text() == "keep" and not where.is_symlink()


# -- the release workflow: one open for every engine, before the data --------------------------
def _spec_helpers():  # noqa: ANN202
    sys.path.insert(0, str(ROOT / "tests" / "release"))
    import test_ledger_spec as T

    return T


@pytest.mark.parametrize("engine", ["polars", "spark"])
def test_a_restored_ledger_stops_the_run_before_the_data_is_read(tmp_path, engine):
    """``tabdp run`` (Polars or Spark) with an older copy of the ledger: exit 2, nothing read.

    The input is not Parquet: a run that read it would fail otherwise (exit 4, or a schema
    error). Both engines open the ledger in the one workflow, before Spark starts.
    """
    if engine == "spark":
        pytest.importorskip("pyspark")
    T = _spec_helpers()
    from tabdp.release.runner import run_release
    from tabdp.release.spec import load_spec

    for year in (2021, 2022):
        run_release(load_spec(T._spec(tmp_path, year)), test_seed=True)
    backup = tmp_path / "backup"
    shutil.copytree(tmp_path / "ledger", backup)
    run_release(load_spec(T._spec(tmp_path, 2023)), test_seed=True)
    _put_back(backup, tmp_path / "ledger")
    spec = T._spec(tmp_path, 2024)
    (tmp_path / "data_2024.parquet").write_bytes(b"not parquet: reading it fails")
    with pytest.raises(LedgerAnchorError, match="older copy"):
        run_release(load_spec(spec), test_seed=True, engine=engine)
    err = io.StringIO()
    assert cli_main(["run", str(spec), "--test-seed", "--quiet", "--engine", engine],
                    stderr=err) == 2
    assert "older copy of the ledger folder" in err.getvalue()
    assert not (tmp_path / "out" / "2024").exists()


def test_an_author_run_names_the_dataset_not_the_ledger(tmp_path, monkeypatch):
    """Author mode: the anchor's refusal and warning never quote the server's ledger path."""
    sys.path.insert(0, str(ROOT / "tests" / "release"))
    import test_author_ledger as A

    root = tmp_path / "server"
    A._server(root)
    ledger = root / "ledgers" / "firms"
    backup = tmp_path / "backup"
    shutil.copytree(ledger, backup)
    code, _, err = A._run(root, monkeypatch, "r0")
    assert code == 0, err
    _put_back(backup, ledger)
    code, out, err = A._run(root, monkeypatch, "r1")
    assert code == 2 and "ledger of dataset 'firms' cannot be used" in err
    assert str(tmp_path) not in out + err and "head" not in out + err
    assert not (root / "releases" / "r1" / "public").exists()
    (root / "ledgers" / ".firms.head.json").unlink()  # the curator's choice: no anchor
    with pytest.warns(PrivacyWarning, match="ledger of dataset 'firms'") as got:
        code, out, err = A._run(root, monkeypatch, "r2")
    assert code == 0, err
    assert all(str(tmp_path) not in str(w.message) for w in got)
    assert (root / "ledgers" / ".firms.head.json").exists()


def test_the_anchor_records_no_unit_level_value(tmp_path):
    path = tmp_path / "l"
    _series(path)
    text = (tmp_path / ".l.head.json").read_text()
    assert set(json.loads(text)) == {"format", "ledger", "series", "series_id", "entries",
                                     "head", "updated", "note"}
    with tabdp.Ledger.open(path) as led:
        for u in led.state()["unit"].to_list():
            assert f'"{u}"' not in text


@pytest.mark.skipif(hasattr(__import__("os"), "geteuid") and __import__("os").geteuid() == 0,
                    reason="root writes anywhere")
def test_a_ledger_in_a_folder_the_curator_cannot_write_is_refused_before_data(tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir()
    path = parent / "l"
    _series(path, releases=1)
    parent.chmod(0o500)
    try:
        with pytest.raises(LedgerError, match="is not writable"):
            tabdp.Ledger.open(path)
        assert _verify(path)[0] == 0  # a check needs no write when the anchor matches
    finally:
        parent.chmod(0o700)


# origin: review r36 (the ledger's warnings at open reached a terminal only, never the run's
# confidential record)
def test_a_runs_confidential_record_lists_the_ledgers_warnings_at_open(tmp_path):
    from _ledger_specs import COUNTIES, series_spec

    from tabdp.release.runner import run_release
    from tabdp.release.spec import load_spec

    pl.DataFrame({"estab": [1, 2, 3], "county": COUNTIES, "payroll": [5.0, 6.0, 7.0]}
                 ).write_parquet(tmp_path / "d.parquet")
    tabdp.Ledger.create(tmp_path / "led", series="s", lifetime_budget=9.0).close()
    (tmp_path / ".led.head.json").unlink()  # a series without releases: written, with a warning
    spec = tmp_path / "r.toml"
    spec.write_text(series_spec(name="r1", data="d.parquet", ledger="led", series="s",
                                lifetime=9.0, seed=1, public="out/public",
                                confidential="out/confidential"))
    with pytest.warns(PrivacyWarning, match="had no anchor"):
        res = run_release(load_spec(spec), test_seed=True)
    conf = json.loads((res.confidential / "confidential.json").read_text())
    assert any("had no anchor" in w for w in conf["warnings"])
    public = "".join(p.read_text(errors="ignore") for p in res.public.iterdir())
    assert "had no anchor" not in public and ".led.head.json" not in public


# origin: stop 64 (the opening's notices were recorded with catch_warnings, process-wide: another
# thread's PrivacyWarning meanwhile was taken for one of the ledger's own)
def test_open_warnings_hold_the_openings_own_notices_not_another_threads(tmp_path,
                                                                          monkeypatch):
    import warnings

    path = tmp_path / "l"
    tabdp.Ledger.create(path, series="s", lifetime_budget=50.0).close()
    warn_from_another_thread(monkeypatch, "another thread's warning")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        with tabdp.Ledger.open(path) as led:  # an intact ledger with its anchor
            assert led.open_warnings == []
    assert [str(w.message) for w in got] == ["another thread's warning"]  # passed on as is
    (tmp_path / ".l.head.json").unlink()
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        with tabdp.Ledger.open(path) as led:  # the direct user is warned as before
            notes = led.open_warnings
    mine = [str(w.message) for w in got if "had no anchor" in str(w.message)]
    assert len(notes) == 1 and mine == notes and got[-1].filename == __file__


# origin: stop 64 (`tabdp ledger verify` / `accept-restore` recorded warnings with
# catch_warnings, process-wide: another thread's PrivacyWarning was printed as the ledger's
# notice, and verify then said the anchor "was written now" of a ledger that matched it)
def test_ledger_cli_prints_its_own_notices_not_another_threads(tmp_path, monkeypatch):
    import warnings

    path = tmp_path / "l"
    _series(path)
    backup = tmp_path / "backup"
    shutil.copytree(path, backup, symlinks=True)
    tabdp.Ledger.create(tmp_path / "e", series="s", lifetime_budget=1.0).close()
    warn_from_another_thread(monkeypatch, "another thread's warning")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        code, out, err = _verify(path)  # intact, its anchor matches: no notice
    assert code == 0 and not err and "it matches its anchor" in out
    assert [str(w.message) for w in got] == ["another thread's warning"]  # passed on as is
    (tmp_path / ".l.head.json").unlink()
    _put_back(backup, path)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        out_s, err_s = io.StringIO(), io.StringIO()
        assert cli_main(["ledger", "accept-restore", str(path)], stdout=out_s,
                        stderr=err_s) == 0
    err = err_s.getvalue()
    assert "another thread" not in err and "another thread" not in out_s.getvalue()
    assert err.startswith("tabdp ledger accept-restore: warning: the ledger ")
    assert err.count("warning:") == 1 and err.endswith("never published.\n")
    assert "restore accepted" in err and "no readable anchor" in err
    assert "restore accepted: its anchor now records 2 release(s)" in out_s.getvalue()
    out_s = io.StringIO()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert cli_main(["ledger", "accept-restore", str(path)], stdout=out_s,
                        stderr=(err_s := io.StringIO())) == 0
    assert not err_s.getvalue() and "its anchor already recorded" in out_s.getvalue()
    (tmp_path / ".e.head.json").unlink()  # no release yet: written, with a notice
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        code, out, err = _verify(tmp_path / "e")
    assert code == 0 and "its anchor was written now" in out
    assert err.startswith("tabdp ledger verify: warning: ") and "had no anchor" in err
    assert err.count("warning:") == 1 and "another thread" not in err


# origin: review rev64t (stop 64: the anchor notice was warned with warnings.warn, which the
# default filter shows once per text and line: the same notice again, e.g. a series' anchor
# missing again at the next open from the same line of a long-lived process, was dropped)
def test_each_anchor_notice_is_shown_under_the_default_filter(tmp_path):
    import warnings

    from tabdp.release.curator_config import dataset_ledger_warnings

    path = tmp_path / "l"
    tabdp.Ledger.create(path, series="s", lifetime_budget=50.0).close()
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("default")
        for _ in range(3):
            (tmp_path / ".l.head.json").unlink()
            with tabdp.Ledger.open(path) as led:
                assert len(led.open_warnings) == 1
        for _ in range(2):  # the author's form (one text per dataset)
            dataset_ledger_warnings("firms", ["/srv/l had no anchor"])
    said = [str(w.message) for w in got if issubclass(w.category, PrivacyWarning)]
    assert sum("had no anchor" in s for s in said) == 3, said
    assert sum("dataset 'firms'" in s for s in said) == 2, said
    where = {w.filename for w in got if "had no anchor" in str(w.message)}
    assert where == {__file__}, where  # the caller's line, as before
