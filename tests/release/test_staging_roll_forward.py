"""A run killed after its commit and before its renames is rolled forward, never deleted.

The swap of a release's folders: carry the curator's entries, set the old folders aside, commit
(the lifetime ledger's), mark every staging folder committed (``<tmp>.committed``, on disk),
then rename them into place. A run killed after the marks left the committed release in its
staging folders: the next run's clean-up puts it in place (before review r52's follow-up it
deleted the confidential one, with the per-record losses and the ledger's chain head of a
release whose ledger was already charged, and asked to restore the old one).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tabdp.exceptions import InvalidParameterError
from tabdp.release._staging import COMMITTED, clean_stale_staging

DEAD = 999_999_999  # a process id that is not running


def _folder(path: Path, files: dict[str, str], mode: int = 0o700) -> Path:
    path.mkdir(parents=True)
    for name, text in files.items():
        (path / name).write_text(text)
    path.chmod(mode)
    return path


def _killed(tmp_path: Path, *, public_placed: bool, marked: bool) -> tuple[Path, Path]:
    pub, conf = tmp_path / "public", tmp_path / "confidential"
    _folder(tmp_path / f".public.old-{DEAD}-a", {"summary.json": "old"}, 0o755)
    _folder(tmp_path / f".confidential.old-{DEAD}-b", {"per_record_losses.parquet": "old"})
    new_pub = {"summary.json": "new"}
    if public_placed:
        _folder(pub, new_pub, 0o755)
    else:
        _folder(tmp_path / f".public.tmp-{DEAD}-c", new_pub)
        if marked:
            (tmp_path / f".public.tmp-{DEAD}-c{COMMITTED}").write_text("")
    _folder(tmp_path / f".confidential.tmp-{DEAD}-d",
            {"per_record_losses.parquet": "new", "ledger.json": "new"})
    if marked:
        (tmp_path / f".confidential.tmp-{DEAD}-d{COMMITTED}").write_text("")
    return pub, conf


@pytest.mark.parametrize("public_placed", [True, False])
def test_a_committed_release_is_rolled_forward(tmp_path: Path, public_placed: bool) -> None:
    pub, conf = _killed(tmp_path, public_placed=public_placed, marked=True)
    clean_stale_staging([pub, conf], private=[False, True])
    assert (pub / "summary.json").read_text() == "new"
    assert (conf / "per_record_losses.parquet").read_text() == "new"
    assert (conf / "ledger.json").read_text() == "new"
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


def test_a_stray_mark_without_its_folder_is_removed(tmp_path: Path) -> None:
    pub = _folder(tmp_path / "public", {"summary.json": "x"}, 0o755)
    (tmp_path / f".public.tmp-{DEAD}-z{COMMITTED}").write_text("")
    clean_stale_staging([pub])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["public"]


KILLER = """
import os, sys, pathlib, traceback
K = int(os.environ["KILL_AT"])
n = [0]
orig = pathlib.Path.rename
def rename(self, target):
    if any(f.filename.endswith("_staging.py") and f.name == "__exit__"
           for f in traceback.extract_stack()):
        n[0] += 1
        if n[0] == K:
            os._exit(137)
    return orig(self, target)
pathlib.Path.rename = rename
from tabdp.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_real_run_killed_before_its_confidential_rename(tmp_path: Path) -> None:
    """``tabdp run --overwrite`` killed after public is in place: the next clean-up completes it."""
    import subprocess
    import sys

    import polars as pl

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from _specs import one_table_spec

    pl.DataFrame({"c": ["a", "b"], "x": [1.0, 2.0]}).write_parquet(tmp_path / "d.parquet")
    (tmp_path / "s.toml").write_text(one_table_spec('{ family = "gaussian", sigma = 1.0 }'))
    (tmp_path / "kill.py").write_text(KILLER)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    first = subprocess.run([sys.executable, "kill.py", "run", "s.toml"], cwd=tmp_path, env={
        **env, "KILL_AT": "0"}, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    # renames of the swap: public -> old, confidential -> old, public tmp -> public, then the
    # confidential tmp: killed at the 4th, after the commit and the marks
    killed = subprocess.run([sys.executable, "kill.py", "run", "s.toml", "--overwrite"],
                            cwd=tmp_path, env={**env, "KILL_AT": "4"}, capture_output=True,
                            text=True, timeout=120)
    assert killed.returncode == 137, killed.stderr
    out = tmp_path / "out"
    assert (out / "public" / "summary.json").exists() and not (out / "confidential").exists()
    assert any(p.name.endswith(COMMITTED) for p in out.iterdir())
    clean_stale_staging([out / "public", out / "confidential"], private=[False, True])
    assert (out / "confidential" / "per_record_losses.parquet").exists()
    assert sorted(p.name for p in out.iterdir()) == ["confidential", "public"]
