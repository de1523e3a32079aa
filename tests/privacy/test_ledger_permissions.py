"""Review r83 follow-ups (issue 31): the ledger's owner-only promise, enforced and visible.

"Every file 0600, every folder 0700" was checked on the ledger's top folder only: a state file
at 0644 or ``chain/`` at 0755 under a 0700 folder verified and was tightened silently at the
next commit. A FIFO planted at ``<ledger>/lock`` gave "cannot use the path: Invalid argument"
(no path, no hint), and one at the anchor, at a chain entry or at the first chain entry (read by
``tabdp validate``) hung the process. Now every path of the ledger (and its anchor) is
``lstat``-ed before anything is opened: a loose mode, another owner, a link or a special file
is refused, before any data is read, naming every such path and the fix; nothing is changed.
"""

from __future__ import annotations

import io
import os
import socket
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import tabdp
from tabdp import mechanisms as mech
from tabdp.cli import main as cli_main
from tabdp.exceptions import LedgerError
from tabdp.privacy import lifetime

pytest.importorskip("deltalake")

KEYS = tabdp.KeySet.from_dict(c=["a", "b"])
BASE = pl.DataFrame({"id": [1, 2, 3], "c": ["a", "b", "a"]})


def _two_releases(path: Path) -> None:
    for i in range(2):
        with tabdp.Ledger.open(path, series="s", lifetime_budget=5.0, create=i == 0) as led:
            BASE.dp.count(by=["c"], keys=KEYS, session=tabdp.Session(unit="id", seed=i, ledger=led),
                          mechanism=mech.Gaussian(1.0))


def _verify(path: Path) -> tuple[int, str]:
    err = io.StringIO()
    code = cli_main(["ledger", "verify", str(path)], stdout=io.StringIO(), stderr=err)
    return code, err.getvalue()


def _modes(path: Path) -> dict[str, int]:
    found = (os.path.join(b, n) for b, dirs, files in os.walk(path) for n in [*dirs, *files])
    return {os.path.relpath(f, path): stat.S_IMODE(os.lstat(f).st_mode) for f in found}


def _within(fn: Callable[[], Any], fifos: list[Path], seconds: float = 20.0) -> Any:
    """``fn()``, failing the test (not hanging it) if it blocks on one of ``fifos``."""
    out: dict[str, Any] = {}

    def call() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():  # blocked opening a FIFO for reading: a writer unblocks it
        for f in fifos:
            try:
                os.close(os.open(f, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        t.join(10)
        pytest.fail(f"hung on a FIFO in the ledger ({', '.join(map(str, fifos))})")
    if "error" in out:
        raise out["error"]
    return out.get("value")


# -- 1. owner-only, every path ----------------------------------------------------------------
def test_verify_names_every_loose_path_and_an_open_refuses_it_unchanged(tmp_path):
    path = tmp_path / "l"
    _two_releases(path)
    assert _verify(path)[0] == 0
    state = next((path / "state").glob("*.parquet"))
    state.chmod(0o644)
    (path / "chain").chmod(0o755)
    (path / "lock").chmod(0o640)
    before = _modes(path)
    code, err = _verify(path)
    assert code == 2, err
    assert "not owner-only" in err
    for rel, mode in (("chain", "0755"), (str(state.relative_to(path)), "0644"),
                      ("lock", "0640")):
        assert f"{rel} is " in err and f"({mode})" in err, (rel, err)
    assert f"chmod -R go-rwx {path}" in err and "Refused before any data was read" in err
    with pytest.raises(LedgerError, match="not owner-only"):
        tabdp.Ledger.open(path)
    with pytest.raises(LedgerError, match="not owner-only"):  # read-only opens (compare) too
        tabdp.Ledger.open(path, autocommit=False, read_only=True)
    assert _modes(path) == before  # refused, never tightened behind the curator's back
    for p in (state, path / "chain", path / "lock"):
        p.chmod(0o600 if p.is_file() else 0o700)
    assert _verify(path)[0] == 0


def test_a_loose_anchor_or_a_group_bit_alone_is_refused(tmp_path):
    path = tmp_path / "l"
    _two_releases(path)
    anchor = lifetime.ledger_anchor(path)
    anchor.chmod(0o660)
    code, err = _verify(path)
    assert code == 2 and f"the anchor {anchor} is -rw-rw----" in err, err
    assert f"chmod -R go-rwx {path} {anchor}" in err
    anchor.chmod(0o600)
    (path / "history").chmod(0o710)  # group may enter: looser than 0700
    code, err = _verify(path)
    assert code == 2 and "history is drwx--x---" in err, err
    (path / "history").chmod(0o500)  # stricter than 0700 is fine to check (not to commit)
    assert _verify(path)[0] == 0
    (path / "history").chmod(0o700)


def test_paths_of_another_owner_are_named(tmp_path, monkeypatch):
    path = tmp_path / "l"
    _two_releases(path)
    other = os.geteuid() + 1
    monkeypatch.setattr(lifetime, "_uid", lambda: other)
    code, err = _verify(path)
    assert code == 2, err
    assert f"not owned by this process's user (uid {other})" in err
    assert f"the ledger folder itself is owned by uid {os.geteuid()}" in err
    assert "chain/00000000.json is owned by" in err and "chown -R" in err


def test_a_run_refuses_a_loose_ledger_before_reading_data(tmp_path):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "release"))
    import test_ledger_spec as T

    spec = T._spec(tmp_path, 2021)
    assert cli_main(["run", str(spec), "--test-seed", "--quiet"], stderr=io.StringIO()) == 0
    f = next((tmp_path / "ledger" / "history").rglob("*.parquet"))
    f.chmod(0o604)
    spec2 = T._spec(tmp_path, 2022)
    err = io.StringIO()
    assert cli_main(["run", str(spec2), "--test-seed", "--quiet"], stderr=err) == 2
    assert "not owner-only" in err.getvalue() and "(0604)" in err.getvalue()
    assert not (tmp_path / "out" / "2022").exists()
    assert stat.S_IMODE(f.stat().st_mode) == 0o604  # left for the curator to look at


# -- links and special files anywhere -----------------------------------------------------------
def _socket_at(p: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(p))
    finally:
        s.close()


@pytest.mark.parametrize("where", ["chain/.note", "state/x", "history/_delta_log/y", "z"])
@pytest.mark.parametrize("kind", ["fifo", "socket", "device"])
def test_special_files_anywhere_are_refused_naming_the_path(tmp_path, where, kind):
    path = tmp_path / "l"
    _two_releases(path)
    p = path / where
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "socket":
        if len(str(p)) > 100:
            pytest.skip("AF_UNIX paths are at most 107 bytes")
        _socket_at(p)
    else:
        if os.geteuid() != 0:
            pytest.skip("mknod of a device needs root")
        os.mknod(p, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    code, err = _within(lambda: _verify(path), [p])
    assert code == 2, err
    words = {"fifo": "a FIFO", "socket": "a socket", "device": "a character device"}[kind]
    assert f"{where} is {words}" in err and f"rm {p}" in err, err
    with pytest.raises(LedgerError, match="not a regular file or a folder"):
        _within(lambda: tabdp.Ledger.open(path), [p])


def test_a_fifo_named_like_the_next_chain_entry_never_hangs(tmp_path):
    path = tmp_path / "l"
    _two_releases(path)
    p = path / "chain" / "00000003.json"
    os.mkfifo(p)
    code, err = _within(lambda: _verify(path), [p])
    assert code == 2 and "chain/00000003.json is a FIFO (named pipe)" in err, err


def test_a_symlink_anywhere_is_still_refused_naming_it(tmp_path):
    path = tmp_path / "l"
    _two_releases(path)
    os.symlink(tmp_path, path / "history" / "elsewhere")
    code, err = _verify(path)
    assert code == 2 and "history/elsewhere is a symbolic link" in err, err


# -- 2. the lock ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["fifo", "folder", "socket"])
def test_a_special_lock_names_the_path_and_the_fix_and_never_hangs(tmp_path, kind):
    path = tmp_path / "l"
    _two_releases(path)
    lock = path / "lock"
    lock.unlink()
    {"fifo": os.mkfifo, "folder": lambda p: p.mkdir(mode=0o700), "socket": _socket_at}[kind](lock)
    code, err = _within(lambda: _verify(path), [lock])
    assert code == 2, err
    assert "Invalid argument" not in err and "cannot use the path" not in err
    words = {"fifo": "a FIFO (named pipe)", "folder": "a folder", "socket": "a socket"}[kind]
    assert f"its lock file {lock} is {words}, not a regular file" in err, err
    assert f"rm {lock}" in err or kind == "folder"
    with pytest.raises(LedgerError, match="lock file .* not a regular file"):
        _within(lambda: tabdp.Ledger.open(path), [lock])
    if kind == "folder":
        lock.rmdir()
    else:
        lock.unlink()
    assert _verify(path)[0] == 0  # the fix given: remove it, a run recreates the lock
    assert stat.S_ISREG(os.lstat(lock).st_mode)


def test_a_fifo_swapped_in_after_the_lstat_is_refused_without_blocking(tmp_path, monkeypatch):
    """The lstat says regular, the open finds a FIFO (a swap in between): non-blocking, refused."""
    path = tmp_path / "l"
    _two_releases(path)
    lock = path / "lock"
    real_lstat = os.lstat

    def lstat_then_swap(p, *a, **k):  # noqa: ANN001, ANN002, ANN003
        st = real_lstat(p, *a, **k)
        if Path(p) == lock and stat.S_ISREG(st.st_mode):
            lock.unlink()
            os.mkfifo(lock, 0o600)
        return st

    monkeypatch.setattr(lifetime.os, "lstat", lstat_then_swap)
    with pytest.raises(LedgerError, match="a FIFO"):
        _within(lambda: lifetime._open_regular(path, lock, os.O_RDONLY, "lock file"), [lock])


# -- the anchor and the first entry (read without the lock) --------------------------------------
def test_a_fifo_anchor_never_hangs(tmp_path):
    path = tmp_path / "l"
    _two_releases(path)
    anchor = lifetime.ledger_anchor(path)
    anchor.unlink()
    os.mkfifo(anchor, 0o600)
    code, err = _within(lambda: _verify(path), [anchor])
    assert code == 2 and f"the anchor {anchor} is a FIFO" in err, err
    from tabdp.exceptions import LedgerAnchorError
    from tabdp.privacy import _anchor

    with pytest.raises(LedgerAnchorError, match="not a regular file"):
        _within(lambda: _anchor.read_anchor(path), [anchor])
    import shutil

    shutil.rmtree(path)  # a vanished folder: create reads the anchor first
    with pytest.raises(LedgerError, match="not a valid anchor file"):
        _within(lambda: tabdp.Ledger.create(path, series="s", lifetime_budget=5.0), [anchor])


def test_a_fifo_first_entry_never_hangs_ledger_terms(tmp_path):
    path = tmp_path / "l"
    tabdp.Ledger.create(path, series="s", lifetime_budget=5.0).close()
    first = path / "chain" / "00000000.json"
    first.unlink()
    os.mkfifo(first, 0o600)
    with pytest.raises(LedgerError, match=r"first chain entry .*00000000\.json is a FIFO"):
        _within(lambda: lifetime.ledger_terms(path), [first])


# -- a run killed mid-commit leaves nothing loose ------------------------------------------------
def test_a_run_killed_before_the_final_chmod_leaves_an_owner_only_ledger(tmp_path, monkeypatch):
    """Every ledger write is owner-only from the start, not only after the commit's chmod.

    Found by the kill -9 test once every path was checked: the vacuum after a commit wrote a
    Delta log entry at 0644 (the umask's), tightened by the ``_private`` that follows; a run
    killed between the two left a ledger the next open refused as not owner-only. Here the
    final ``_private`` never runs (as if the process were killed before it).
    """
    path = tmp_path / "l"
    _two_releases(path)
    monkeypatch.setattr(lifetime, "_private", lambda p: None)
    old = os.umask(0o022)
    try:
        for i in range(2):
            with tabdp.Ledger.open(path) as led:
                BASE.with_columns(pl.col("id") + 10 * i).dp.count(
                    by=["c"], keys=KEYS, session=tabdp.Session(unit="id", seed=7 + i, ledger=led),
                    mechanism=mech.Gaussian(1.0))
    finally:
        os.umask(old)
    code, err = _verify(path)
    assert code == 0, err
