"""A run killed after its commit and before its renames is rolled forward, never deleted.

The swap of a release's folders: carry the curator's entries, set the old folders aside, commit
(the lifetime ledger's), mark every staging folder committed (``<tmp>.committed``, on disk),
then rename them into place. A run killed after the marks left the committed release in its
staging folders: the next run's clean-up puts it in place (before review r52's follow-up it
deleted the confidential one, with the per-record losses and the ledger's chain head of a
release whose ledger was already charged, and asked to restore the old one).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tabdp.exceptions import InvalidParameterError, RolledForwardWarning
from tabdp.release._staging import COMMITTED, ROLLED_FORWARD_LOG, clean_stale_staging

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _specs import RENAME_KILLER  # noqa: E402

DEAD = 999_999_999  # a process id that is not running
#: The ``ledger.json`` a run's commit writes into its confidential staging folder (entry 2).
LEDGER_NOTE = json.dumps({"release": 2, "entry_hash": "e2"})


def _folder(path: Path, files: dict[str, str], mode: int = 0o700) -> Path:
    path.mkdir(parents=True)
    for name, text in files.items():
        (path / name).write_text(text)
    path.chmod(mode)
    return path


def _record(tmp_path: Path, entry: str | None = None) -> str:
    tmps = [str(tmp_path / f".public.tmp-{DEAD}-c"), str(tmp_path / f".confidential.tmp-{DEAD}-d")]
    targets = [str(tmp_path / "public"), str(tmp_path / "confidential")]
    olds = [str(tmp_path / f".public.old-{DEAD}-a"), str(tmp_path / f".confidential.old-{DEAD}-b")]
    return json.dumps({"tmps": tmps, "targets": targets,
                       "olds": [[t, o] for t, o in zip(targets, olds, strict=True)],
                       "private": [False, True], "entry": entry, "spec_hash": "h"})


def _killed(tmp_path: Path, *, public_placed: bool, marked: bool,
            entry: str | None = None) -> tuple[Path, Path]:
    pub, conf = tmp_path / "public", tmp_path / "confidential"
    _folder(tmp_path / f".public.old-{DEAD}-a", {"summary.json": "old"}, 0o755)
    _folder(tmp_path / f".confidential.old-{DEAD}-b", {"per_record_losses.parquet": "old"})
    new_pub = {"summary.json": "new"}
    if public_placed:
        _folder(pub, new_pub, 0o755)
    else:
        _folder(tmp_path / f".public.tmp-{DEAD}-c", new_pub)
        if marked:
            (tmp_path / f".public.tmp-{DEAD}-c{COMMITTED}").write_text(_record(tmp_path, entry))
    _folder(tmp_path / f".confidential.tmp-{DEAD}-d",
            {"per_record_losses.parquet": "new", "ledger.json": LEDGER_NOTE})
    if marked and public_placed is not None:
        (tmp_path / f".confidential.tmp-{DEAD}-d{COMMITTED}").write_text(_record(tmp_path, entry))
    return pub, conf


@pytest.mark.parametrize("public_placed", [True, False])
def test_a_committed_release_is_rolled_forward(tmp_path: Path, public_placed: bool) -> None:
    pub, conf = _killed(tmp_path, public_placed=public_placed, marked=True)
    with pytest.warns(RolledForwardWarning, match="rolled forward") as caught:
        clean_stale_staging([pub, conf], private=[False, True])
    # stop 52: never silently; what was put in place (the public folder too when the kill
    # came before its rename), when, and where the record is
    (w,) = caught
    assert isinstance(w.message, RolledForwardWarning)
    assert w.message.folders == ((str(conf),) if public_placed else (str(pub), str(conf)))
    assert w.message.process == DEAD and w.message.at in str(w.message)
    assert str(conf / ROLLED_FORWARD_LOG) in str(w.message)
    (line,) = (conf / ROLLED_FORWARD_LOG).read_text().splitlines()
    logged = json.loads(line)
    assert logged["folders"] == list(w.message.folders) and logged["at"] == w.message.at
    assert logged["mode"] == "curator" and logged["killed_process"] == DEAD
    assert (conf / ROLLED_FORWARD_LOG).stat().st_mode & 0o777 == 0o600
    assert (pub / "summary.json").read_text() == "new"
    assert (conf / "per_record_losses.parquet").read_text() == "new"
    assert (conf / "ledger.json").read_text() == LEDGER_NOTE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["confidential", "public"]
    umask = os.umask(0)
    os.umask(umask)
    assert (pub.stat().st_mode & 0o777) == (0o777 & ~umask if not public_placed else 0o755)
    assert (conf.stat().st_mode & 0o777) == 0o700


def test_an_uncommitted_release_is_still_deleted_and_the_old_one_kept(tmp_path: Path) -> None:
    pub, conf = _killed(tmp_path, public_placed=False, marked=False)
    with pytest.raises(InvalidParameterError, match="only copy"):
        clean_stale_staging([pub, conf], private=[False, True])
    assert not pub.exists()
    assert (tmp_path / f".public.old-{DEAD}-a" / "summary.json").read_text() == "old"


def test_one_record_rolls_the_whole_run_forward(tmp_path: Path) -> None:
    """Killed between the two records (review r53): the public one alone rolls both forward."""
    pub, conf = _killed(tmp_path, public_placed=False, marked=True)
    (tmp_path / f".confidential.tmp-{DEAD}-d{COMMITTED}").unlink()
    with pytest.warns(RolledForwardWarning):
        clean_stale_staging([pub, conf], private=[False, True])
    assert (pub / "summary.json").read_text() == "new"
    assert (conf / "ledger.json").read_text() == LEDGER_NOTE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["confidential", "public"]


@pytest.mark.parametrize("committed", [True, False])
def test_with_a_ledger_the_chain_entry_decides(tmp_path: Path, committed: bool) -> None:
    """Records are written before the ledger's commit: its chain entry says whether it happened."""
    entry = tmp_path / "ledger" / "chain" / "00000002.json"
    entry.parent.mkdir(parents=True)
    if committed:
        entry.write_text(json.dumps({"spec_hash": "h", "seq": 2, "hash": "e2"}))
    pub, conf = _killed(tmp_path, public_placed=False, marked=True, entry=str(entry))
    if committed:
        with pytest.warns(RolledForwardWarning, match="charged as release 2 of its series"):
            clean_stale_staging([pub, conf], private=[False, True])
        assert json.loads((conf / ROLLED_FORWARD_LOG).read_text())["ledger_release"] == 2
        assert (conf / "ledger.json").read_text() == LEDGER_NOTE
        assert (pub / "summary.json").read_text() == "new"
    else:  # killed before the commit: the previous release is put back, the ledger uncharged
        clean_stale_staging([pub, conf], private=[False, True])
        assert (pub / "summary.json").read_text() == "old"
        assert (conf / "per_record_losses.parquet").read_text() == "old"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["confidential", "ledger", "public"]


def test_another_runs_entry_at_the_same_position_is_not_this_commit(tmp_path: Path) -> None:
    """The same spec run elsewhere committed that position (review r54): not this run's commit."""
    entry = tmp_path / "ledger" / "chain" / "00000002.json"
    entry.parent.mkdir(parents=True)
    entry.write_text(json.dumps({"spec_hash": "h", "seq": 2, "hash": "other"}))
    pub, conf = _killed(tmp_path, public_placed=False, marked=True, entry=str(entry))
    (tmp_path / f".confidential.tmp-{DEAD}-d" / "ledger.json").unlink()  # never committed
    clean_stale_staging([pub, conf], private=[False, True])
    assert (pub / "summary.json").read_text() == "old"
    assert (conf / "per_record_losses.parquet").read_text() == "old"


def test_a_committed_release_whose_target_exists_again_is_kept_whole(tmp_path: Path) -> None:
    """Tabdp compare made the confidential folder after the kill (review r54): refused, kept."""
    pub, conf = _killed(tmp_path, public_placed=False, marked=True)
    (conf / "compare").mkdir(parents=True)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(InvalidParameterError, match="exists again"):
        clean_stale_staging([pub, conf], private=[False, True])
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / f".confidential.tmp-{DEAD}-d" / "ledger.json").exists()


def test_a_record_naming_other_paths_acts_on_nothing_else(tmp_path: Path) -> None:
    """A record planted or copied next to the outputs (review r54) moves no foreign folder."""
    out = tmp_path / "out"
    out.mkdir()
    elsewhere = _folder(tmp_path / "elsewhere" / "secret", {"x": "1"})
    staging = _folder(out / f".public.tmp-{DEAD}-c", {"summary.json": "new"})
    (out / f".public.tmp-{DEAD}-c{COMMITTED}").write_text(json.dumps({
        "tmps": [str(staging), str(elsewhere)],
        "targets": [str(out / "public"), str(tmp_path / "www" / "published")],
        "olds": [], "private": [False, False], "entry": None}))
    (tmp_path / "www").mkdir()
    clean_stale_staging([out / "public"])
    assert (elsewhere / "x").exists() and not (tmp_path / "www" / "published").exists()
    assert not (out / "public").exists() and not staging.exists()


def test_a_stray_mark_without_its_folder_is_removed(tmp_path: Path) -> None:
    pub = _folder(tmp_path / "public", {"summary.json": "x"}, 0o755)
    (tmp_path / f".public.tmp-{DEAD}-z{COMMITTED}").write_text("")
    clean_stale_staging([pub])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["public"]


KILLER = RENAME_KILLER


def test_a_real_run_killed_before_its_confidential_rename(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``tabdp run --overwrite`` killed after public is in place: the next clean-up completes it."""
    import io
    import subprocess
    import sys

    import polars as pl

    from tabdp.cli import main

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from _specs import one_table_spec

    pl.DataFrame({"c": ["a", "b"], "x": [1.0, 2.0]}).write_parquet(tmp_path / "d.parquet")
    (tmp_path / "s.toml").write_text(one_table_spec('{ family = "gaussian", sigma = 1.0 }'))
    (tmp_path / "kill.py").write_text(KILLER)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    monkeypatch.chdir(tmp_path)
    err = io.StringIO()  # the first release: in this process (no kill)
    assert main(["run", "s.toml"], stdout=io.StringIO(), stderr=err) == 0, err.getvalue()
    # renames of the swap: public -> old, confidential -> old, public tmp -> public, then the
    # confidential tmp: killed at the 4th, after the commit and the marks
    killed = subprocess.run([sys.executable, "kill.py", "run", "s.toml", "--overwrite"],
                            cwd=tmp_path, env={**env, "KILL_AT": "4"}, capture_output=True,
                            text=True, timeout=120)
    assert killed.returncode == 137, killed.stderr
    out = tmp_path / "out"
    assert (out / "public" / "summary.json").exists() and not (out / "confidential").exists()
    assert any(p.name.endswith(COMMITTED) for p in out.iterdir())
    with pytest.warns(RolledForwardWarning):
        clean_stale_staging([out / "public", out / "confidential"], private=[False, True])
    assert (out / "confidential" / "per_record_losses.parquet").exists()
    assert sorted(p.name for p in out.iterdir()) == ["confidential", "public"]


def _series(folder: Path, year: int) -> None:
    import numpy as np
    import polars as pl

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from _ledger_specs import COUNTIES, series_spec

    rng = np.random.default_rng(year)
    ids = np.arange(300, dtype=np.int64)
    pl.DataFrame({"estab": ids, "county": np.array(COUNTIES)[ids % 3],
                  "payroll": np.round(rng.lognormal(3.0, 1.0, 300), 2)}).write_parquet(
        folder / f"d{year}.parquet")
    (folder / f"s{year}.toml").write_text(series_spec(
        name=f"r{year}", data=f"d{year}.parquet", ledger="ledger", series="s", lifetime="1e6",
        seed=year, public="out/public", confidential="out/confidential"))


KILLER_EVENTS = KILLER.replace("""pathlib.Path.rename = rename
""", """pathlib.Path.rename = rename
import tabdp.release._staging as st
write = st._write_swap
def write_swap(tmp, record):
    count()
    write(tmp, record)
st._write_swap = write_swap
exit_ = st._Staging.__exit__
def staged_exit(self, *a):
    if self.commit is not None:
        commit = self.commit
        def counted():
            count()
            commit()
            count()
        self.commit = counted
    return exit_(self, *a)
st._Staging.__exit__ = staged_exit
""").replace("""        n[0] += 1
        if n[0] == K:
            os._exit(137)
    return orig(self, target)""", """        count()
    return orig(self, target)
def count():
    n[0] += 1
    if n[0] == K:
        os._exit(137)""")


@pytest.mark.slow  # CI only: 9 real runs against a ledger (about 20 s)
@pytest.mark.parametrize("kill_at", range(1, 10))  # the swap's 9 events
def test_a_ledger_run_killed_anywhere_in_its_swap_is_old_or_new(tmp_path: Path,
                                                                kill_at: int) -> None:
    """Every event of the swap (review r53): the clean-up leaves the old or the new release."""
    import io
    import subprocess
    import sys

    import tabdp
    from tabdp.cli import main

    _series(tmp_path, 2021)
    _series(tmp_path, 2022)
    assert main(["ledger", "init", str(tmp_path / "ledger"), "--series", "s",
                 "--lifetime-budget", "1e6"], stdout=io.StringIO()) == 0
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    (tmp_path / "kill.py").write_text(KILLER_EVENTS)
    first = subprocess.run([sys.executable, "kill.py", "run", "s2021.toml", "--test-seed",
                            "--quiet"], cwd=tmp_path, env={**env, "KILL_AT": "0"},
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    out = tmp_path / "out"
    (out / "confidential" / "notes.txt").write_text("curator")
    killed = subprocess.run([sys.executable, "kill.py", "run", "s2022.toml", "--test-seed",
                             "--quiet", "--overwrite"], cwd=tmp_path,
                            env={**env, "KILL_AT": str(kill_at)}, capture_output=True,
                            text=True, timeout=300)
    assert killed.returncode == 137, killed.stderr
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clean_stale_staging([out / "public", out / "confidential"], private=[False, True])
    assert sorted(p.name for p in out.iterdir()) == ["confidential", "public"]
    with tabdp.Ledger.open(tmp_path / "ledger") as led:
        releases = led.releases
    name = json.loads((out / "public" / "summary.json").read_text())["release"]
    name = name["name"] if isinstance(name, dict) else name
    seq = json.loads((out / "confidential" / "ledger.json").read_text())["release"]
    assert (name, seq, releases) in {("r2021", 1, 1), ("r2022", 2, 2)}
    # stop 52: the curator is told exactly when the killed run's release was put in place
    rolled = [w for w in caught if issubclass(w.category, RolledForwardWarning)]
    assert [str(w.message) for w in caught if w not in rolled] == []
    assert len(rolled) == (name == "r2022")  # the killed run's release: only by a roll-forward
    assert (out / "confidential" / "notes.txt").read_text() == "curator"
