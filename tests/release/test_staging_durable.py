"""Staged outputs are on disk before the commit that relies on them (issue 31, stop 52).

The ledger advances only when the release's outputs are written, across a power loss too:
every file of every staging folder is fsynced, then every staging folder, before the swap
record, the lifetime ledger's commit and the renames into place (`tabdp._durable.sync_tree`,
called by `_Staging.__exit__`). Before, the files were not fsynced: a commit or a rename that
reached the disk said nothing of the files it published.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

import tabdp.release._ledger as ledger_mod
import tabdp.release._staging as staging_mod
from tabdp._durable import sync_tree
from tabdp.cli import main as cli_main
from tabdp.release.runner import run_release
from tabdp.release.spec import load_spec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _ledger_specs import COUNTIES, series_spec  # noqa: E402
from _specs import one_table_spec  # noqa: E402

Key = tuple[int, int]  # (st_dev, st_ino): a file or folder, whatever its name now


def _key(path: Path) -> Key:
    st = os.lstat(path)
    return (st.st_dev, st.st_ino)


class _Events:
    """What the run did, in order (recorded by patched functions).

    Events: ``("fsync", key)``, ``("swap",)``, ``("commit",)``, ``("rename", src, dst)``.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log: list[tuple[Any, ...]] = []
        real_fsync, real_rename = os.fsync, Path.rename
        real_swap, real_commit = staging_mod._write_swap, ledger_mod.commit_release

        def fsync(fd: int) -> None:
            st = os.fstat(fd)
            self.log.append(("fsync", (st.st_dev, st.st_ino)))
            real_fsync(fd)

        def rename(src: Path, dst: Any) -> Path:
            self.log.append(("rename", Path(src), Path(dst)))
            return real_rename(src, dst)

        def write_swap(tmp: Path, record: Any) -> None:
            self.log.append(("swap",))
            real_swap(tmp, record)

        def commit(*a: Any, **k: Any) -> dict[str, Any]:
            self.log.append(("commit",))
            return real_commit(*a, **k)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(Path, "rename", rename)
        monkeypatch.setattr(staging_mod, "_write_swap", write_swap)
        monkeypatch.setattr(ledger_mod, "commit_release", commit)

    def first(self, kind: str) -> int:
        return next(i for i, e in enumerate(self.log) if e[0] == kind)

    def synced(self, key: Key) -> list[int]:
        """The indexes of the fsyncs of ``key``, in order."""
        return [i for i, e in enumerate(self.log) if e == ("fsync", key)]

    def synced_at(self, key: Key) -> int:
        """The index of the first fsync of ``key`` (-1: never synced)."""
        return (self.synced(key) or [-1])[0]

    def staging_renames(self) -> list[int]:
        """Indexes of the renames of a staging folder onto its target."""
        return [i for i, e in enumerate(self.log)
                if e[0] == "rename" and ".tmp-" in e[1].name and ".tmp-" not in e[2].name]


def _tree(root: Path, skip: frozenset[str] = frozenset()) -> Iterator[Path]:
    yield root
    for p in sorted(root.rglob("*")):
        if not skip.intersection(p.relative_to(root).parts):
            yield p


# -- sync_tree -------------------------------------------------------------------------------

def test_sync_tree_fsyncs_every_file_then_every_folder_deepest_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "staged"
    (root / "a" / "b").mkdir(parents=True)
    (root / "empty").mkdir()
    files = [root / "t.parquet", root / "a" / "m.json", root / "a" / "b" / "deep.bin"]
    for f in files:
        f.write_bytes(b"x" * 10)
    outside = tmp_path / "outside.txt"
    outside.write_text("not staged")
    (root / "link").symlink_to(outside)  # a link: not followed, its target not synced
    (root / "linkdir").symlink_to(tmp_path, target_is_directory=True)
    os.mkfifo(root / "pipe")  # never opened (opening a pipe for reading would block)
    synced: list[Key] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(
        (os.fstat(fd).st_dev, os.fstat(fd).st_ino)), real(fd))[1])
    folders = [root, root / "a", root / "a" / "b", root / "empty"]
    assert sync_tree(root) == len(files) + len(folders)
    assert sorted(synced) == sorted(_key(p) for p in files + folders)
    at = {k: i for i, k in enumerate(synced)}
    for p in files + folders[1:]:  # a file or subfolder before the folder that names it
        assert at[_key(p)] < at[_key(p.parent)]
    assert synced[-1] == _key(root)
    assert _key(outside) not in synced and _key(tmp_path) not in synced


def test_sync_tree_raises_for_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        sync_tree(tmp_path / "missing")


# -- the runner: files, folders, swap record, commit, renames ---------------------------------

def _ledger_release(folder: Path, year: int) -> Path:
    rng = np.random.default_rng(year)
    ids = np.arange(200, dtype=np.int64)
    pl.DataFrame({"estab": ids, "county": np.array(COUNTIES)[ids % 3],
                  "payroll": np.round(rng.lognormal(3.0, 1.0, 200), 2)}).write_parquet(
        folder / f"d{year}.parquet")
    spec = folder / f"s{year}.toml"
    spec.write_text(series_spec(
        name=f"r{year}", data=f"d{year}.parquet", ledger="ledger", series="s", lifetime="1e6",
        seed=year, public="out/public", confidential="out/confidential"))
    return spec


def _assert_synced_before(ev: _Events, out: Path, point: int, skip: frozenset[str]) -> None:
    for sub in ("public", "confidential"):
        paths = list(_tree(out / sub, skip))
        assert len(paths) > 3
        for p in paths:  # files and folders: the same inode in staging and in place
            at = ev.synced_at(_key(p))
            assert 0 <= at < point, (p, at, point)


def test_a_ledger_run_syncs_its_outputs_before_the_commit_and_the_renames(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("deltalake")
    assert cli_main(["ledger", "init", str(tmp_path / "ledger"), "--series", "s",
                     "--lifetime-budget", "1e6"], stdout=io.StringIO()) == 0
    run_release(load_spec(_ledger_release(tmp_path, 2021)), test_seed=True)
    out = tmp_path / "out"
    (out / "confidential" / "notes").mkdir()  # the curator's: carried into the new folder
    (out / "confidential" / "notes" / "n.txt").write_text("curator")
    spec = load_spec(_ledger_release(tmp_path, 2022))
    ev = _Events(monkeypatch)
    run_release(spec, test_seed=True, overwrite=True)
    swap, commit = ev.first("swap"), ev.first("commit")
    renames = ev.staging_renames()
    assert len(renames) == 2
    assert swap < commit < min(renames)
    # every output file and folder of the run, on disk before its swap record (and so before
    # the commit and the renames); ledger.json, written by the commit, before the renames
    _assert_synced_before(ev, out, swap, frozenset({"ledger.json", "notes"}))
    assert commit < ev.synced_at(_key(out / "confidential" / "ledger.json")) < min(renames)
    # the carried entry's move into the staging folder, on disk before the swap record too
    assert (out / "confidential" / "notes" / "n.txt").read_text() == "curator"
    carried = [i for i, e in enumerate(ev.log) if e[0] == "rename" and e[1].name == "notes"]
    assert carried and any(max(carried) < i < swap for i in ev.synced(_key(out / "confidential")))
    # and the renames into place, on disk (their parent folder synced) after them
    assert ev.synced(_key(out))[-1] > max(renames)


def test_a_run_without_a_ledger_syncs_its_outputs_before_the_renames(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pl.DataFrame({"c": ["a", "b", "a"], "x": [1.0, 2.0, 3.0]}).write_parquet(
        tmp_path / "d.parquet")
    (tmp_path / "s.toml").write_text(one_table_spec('{ family = "gaussian", sigma = 1.0 }'))
    ev = _Events(monkeypatch)
    run_release(load_spec(tmp_path / "s.toml"), test_seed=True)
    swap, renames = ev.first("swap"), ev.staging_renames()
    assert not any(e[0] == "commit" for e in ev.log)
    assert len(renames) == 2 and swap < min(renames)
    _assert_synced_before(ev, tmp_path / "out", swap, frozenset())


def test_a_failed_sync_fails_the_run_before_anything_is_committed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("deltalake")
    assert cli_main(["ledger", "init", str(tmp_path / "ledger"), "--series", "s",
                     "--lifetime-budget", "1e6"], stdout=io.StringIO()) == 0
    spec = load_spec(_ledger_release(tmp_path, 2021))

    def broken(path: Path) -> int:
        raise OSError(5, "Input/output error", str(path))

    monkeypatch.setattr(staging_mod, "sync_tree", broken)
    with pytest.raises(staging_mod.DataDependentFailure):
        run_release(spec, test_seed=True)
    out = tmp_path / "out"
    assert not (out / "public").exists()
    failure = json.loads((out / "confidential" / "failure.json").read_text())
    assert "ledger" not in failure  # the failure says the ledger was not charged
    import tabdp

    with tabdp.Ledger.open(tmp_path / "ledger") as led:
        assert led.releases == 0  # not charged: nothing was on disk to publish
