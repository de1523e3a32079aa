"""The release staging code tells the curator what it did and touches no other process.

* A run killed after its commit and before its renames is rolled forward by the next run's
  clean-up: no longer silently. Curator mode: a `RolledForwardWarning` (``tabdp run``: a
  ``WARNING (curator, do not publish)`` line) names the folders put in place and when; both
  modes: an entry in ``rolled_forward.jsonl`` in the rolled-forward confidential folder, which
  is all an author-mode run leaves (the author is told nothing: the folders are the server's).
* A public (or plan) output folder that is a symbolic link is refused, with or without
  ``--overwrite`` (it replaced the link by a new local folder, the link's target left as it was).
* ``_pid_alive`` never calls ``os.kill`` on Windows (it would end the process there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tabdp.exceptions import InvalidParameterError, RolledForwardWarning
from tabdp.release import _staging
from tabdp.release._staging import COMMITTED, ROLLED_FORWARD_LOG, clean_stale_staging

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _specs import (  # noqa: E402
    AUTHOR_STATE_COUNT_SPEC,
    RENAME_KILLER,
    one_table_spec,
)
from _staging_common import HIER, curator_spec, names, run, server  # noqa: E402, F401

REPO = Path(__file__).resolve().parents[2]

AUTHOR_SPEC = AUTHOR_STATE_COUNT_SPEC

KILLER = RENAME_KILLER




def killer(folder: Path, *args: str, kill_at: int) -> subprocess.CompletedProcess[str]:
    (folder / "kill.py").write_text(KILLER)
    env = {**os.environ, "PYTHONPATH": str(REPO), "KILL_AT": str(kill_at)}
    return subprocess.run([sys.executable, "kill.py", *args], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)



# -- 1. a roll-forward is never silent --------------------------------------------------------

def test_curator_run_after_a_kill_says_what_was_rolled_forward(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kill harness's state (after the commit, before the confidential rename), then run."""
    pl.DataFrame({"c": ["a", "b"], "x": [1.0, 2.0]}).write_parquet(tmp_path / "d.parquet")
    (tmp_path / "s.toml").write_text(one_table_spec('{ family = "gaussian", sigma = 1.0 }'))
    monkeypatch.chdir(tmp_path)
    code, _, err = run("run", "s.toml")  # the first release: in this process (no kill)
    assert code == 0, err
    killed = killer(tmp_path, "run", "s.toml", "--overwrite", kill_at=4)
    assert killed.returncode == 137, killed.stderr
    out = tmp_path / "out"
    conf = out / "confidential"
    assert not conf.exists() and any(p.name.endswith(COMMITTED) for p in out.iterdir())
    code, _, err = run("run", "s.toml", "--quiet")
    # the killed run's release is put in place and said so, then this run stops: its folders
    # now exist (without --overwrite)
    assert code == 2, err
    notice, refusal = err.split("tabdp run: spec/usage error:")
    assert notice.startswith("WARNING (curator, do not publish): a tabdp run (process ")
    assert "rolled forward" in notice and f"'{conf}'" in notice, notice
    assert str(conf / ROLLED_FORWARD_LOG) in notice and "Hint: check that release" in notice
    assert "already exists" in refusal
    (line,) = (conf / ROLLED_FORWARD_LOG).read_text().splitlines()
    entry = json.loads(line)
    assert entry["mode"] == "curator" and entry["at"] in notice
    assert entry["folders"] == [str(conf)]
    assert (conf / "per_record_losses.parquet").exists()
    # the record stays with the confidential folder: carried over by the next release, never
    # a reason for --overwrite nor called a file no tabdp run wrote
    code, _, err = run("run", "s.toml", "--quiet", "--overwrite")
    assert code == 0 and "WARNING" not in err, err
    assert (conf / ROLLED_FORWARD_LOG).read_text() == line + "\n"
    assert _staging._confidential_blockers(conf)[2] == []



AUTHOR_ARGS = ("run", "s.toml", "--curator", "curator.toml", "--test-seed", "--quiet")


def test_author_run_after_a_kill_tells_the_author_nothing(
        tmp_path: Path, staging_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    top = server(tmp_path, staging_data)
    monkeypatch.chdir(tmp_path)
    code, _, err = run(*AUTHOR_ARGS)  # the first release: in this process (no kill)
    assert code == 0, err
    killed = killer(tmp_path, *AUTHOR_ARGS, "--overwrite", kill_at=4)
    assert killed.returncode == 137, killed.stderr
    conf = top / "confidential"
    assert not conf.exists() and any(p.name.endswith(COMMITTED) for p in top.iterdir())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # author mode: no warning either
        code, out, err = run(*AUTHOR_ARGS)
    assert code == 2, err
    # the author's refusal is the fixed one: nothing of the roll-forward, no server path
    assert "roll" not in (out + err).lower() and "WARNING" not in err, err
    assert str(tmp_path) not in out + err
    (line,) = (conf / ROLLED_FORWARD_LOG).read_text().splitlines()
    entry = json.loads(line)   # the curator's record, in the confidential folder
    assert entry["mode"] == "author" and entry["folders"] == [str(conf)]
    assert entry["ledger_entry"] is None and isinstance(entry["killed_process"], int)
    assert "Check that release before publishing it" in entry["note"]
    code, out, err = run(*AUTHOR_ARGS, "--overwrite")
    assert code == 0 and "roll" not in (out + err).lower(), err
    assert ROLLED_FORWARD_LOG in names(conf)


def test_the_python_api_warns_in_curator_mode_only(tmp_path: Path) -> None:
    for author in (False, True):
        out = tmp_path / str(author)
        out.mkdir()
        tmp = out / ".public.tmp-999999999-c"
        tmp.mkdir()
        (tmp / "summary.json").write_text("new")
        (out / f".public.tmp-999999999-c{COMMITTED}").write_text(json.dumps({
            "tmps": [str(tmp)], "targets": [str(out / "public")], "olds": [],
            "private": [False], "entry": None}))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            clean_stale_staging([out / "public"], author=author)
        assert (out / "public" / "summary.json").read_text() == "new"
        got = [w for w in caught if issubclass(w.category, RolledForwardWarning)]
        assert len(got) == (not author) and len(caught) == len(got)
        if got:  # no confidential folder among the targets (a plan): the warning only
            assert "The record is in" not in str(got[0].message)
            assert got[0].message.folders == (str(out / "public"),)


def test_the_log_is_never_a_blocker_nor_called_the_curators(tmp_path: Path) -> None:
    conf = tmp_path / "confidential"
    conf.mkdir()
    (conf / ROLLED_FORWARD_LOG).write_text("{}\n")
    (conf / "failure.json").write_text("{}")
    assert _staging._confidential_free(conf)
    assert [p.name for p in _staging._kept_entries(conf)] == [ROLLED_FORWARD_LOG]  # carried
    assert _staging._curators(conf) == []
    (tmp_path / "public").mkdir()
    with pytest.raises(InvalidParameterError) as e:
        _staging._check_target(tmp_path / "public", False, "public", conf)
    assert ROLLED_FORWARD_LOG not in str(e.value) and "no tabdp run wrote" not in str(e.value)


# -- 2. a public folder that is a symbolic link ----------------------------------------------


def test_a_linked_public_folder_is_refused(tmp_path: Path, staging_data: Path) -> None:
    s = curator_spec(tmp_path, staging_data)
    real = tmp_path / "www" / "published"
    real.mkdir(parents=True)
    (real / "summary.json").write_text("the publication")
    (tmp_path / "out").mkdir()
    os.symlink(real, tmp_path / "out" / "public")
    for extra in ([], ["--overwrite"]):
        code, _, err = run("run", "--test-seed", s, "--quiet", *extra)
        # was, with --overwrite: the link replaced by a new local folder, its target as it was
        assert code == 2 and "public output folder" in err, err
        assert "is not a plain folder but a symbolic link" in err
        assert "Hint: name the link's target in the spec's [output] section" in err
        assert (tmp_path / "out" / "public").is_symlink()
        assert names(real) == {"summary.json"}
        assert names(tmp_path / "out") == {"public"}   # nothing written, nothing set aside
    os.symlink(tmp_path / "nowhere", tmp_path / "out" / "dangling")  # a broken link, too
    with pytest.raises(InvalidParameterError, match="symbolic link"):
        _staging._check_target(tmp_path / "out" / "dangling", True, "public")


def test_a_linked_plan_folder_is_refused(tmp_path: Path) -> None:
    from tabdp.release.runner import write_plan
    from tabdp.release.spec import load_spec

    spec = load_spec(REPO / "examples" / "cbp_release.toml")
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "plan")
    with pytest.raises(InvalidParameterError, match="plan output folder .* symbolic link"):
        write_plan(spec, tmp_path / "plan", overwrite=True)
    assert names(real) == set() and (tmp_path / "plan").is_symlink()


def test_a_linked_public_folder_in_author_mode(
        tmp_path: Path, staging_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    top = server(tmp_path, staging_data)
    real = tmp_path / "www"
    real.mkdir()
    top.mkdir(parents=True)
    os.symlink(real, top / "public")
    monkeypatch.chdir(tmp_path)
    code, _, err = run(*AUTHOR_ARGS)   # (--overwrite: refused before, for another spec's folder)
    assert code == 2 and "is not a plain folder; the curator must make it one" in err, err
    assert "symbolic link" not in err and str(tmp_path) not in err
    assert (top / "public").is_symlink() and names(real) == set()


# -- 3. _pid_alive never ends a process on Windows --------------------------------------------

def test_pid_alive_on_posix() -> None:
    assert _staging._pid_alive(os.getpid())
    assert not _staging._pid_alive(999_999_999)   # no such process
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert _staging._pid_alive(child.pid)
        assert child.poll() is None   # only asked, never signalled
    finally:
        child.kill()
        child.wait()
    assert not _staging._pid_alive(child.pid)


class _FakeKernel32:
    """``kernel32``'s three calls as `_windows_pid_alive` makes them."""

    def __init__(self, handle: int, exit_code: int = 259, query_ok: bool = True) -> None:
        self.handle, self.exit_code, self.query_ok = handle, exit_code, query_ok
        self.calls: list[tuple[Any, ...]] = []

    def OpenProcess(self, access: int, inherit: int, pid: int) -> int | None:  # noqa: N802
        self.calls.append(("open", access, inherit, pid))
        return self.handle or None

    def GetExitCodeProcess(self, handle: int, ref: Any) -> int:  # noqa: N802
        self.calls.append(("exit code", handle))
        ref._obj.value = self.exit_code
        return int(self.query_ok)

    def CloseHandle(self, handle: int) -> int:  # noqa: N802
        self.calls.append(("close", handle))
        return 1


@pytest.mark.parametrize(("kernel", "last_error", "alive"), [
    (_FakeKernel32(7), 0, True),                       # STILL_ACTIVE
    (_FakeKernel32(7, exit_code=0), 0, False),         # ended
    (_FakeKernel32(0), 87, False),                     # no such process
    (_FakeKernel32(0), 5, True),                       # access denied: it exists
    (_FakeKernel32(7, query_ok=False), 0, True),       # cannot tell: counted running
    (None, 0, True),                                   # no kernel32: counted running
], ids=["running", "ended", "no process", "denied", "no exit code", "no ctypes"])
def test_pid_alive_on_windows_never_calls_os_kill(
        monkeypatch: pytest.MonkeyPatch, kernel: _FakeKernel32 | None, last_error: int,
        alive: bool) -> None:
    def kill(*_: object) -> None:
        raise AssertionError("os.kill ends the process on Windows")

    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(os, "kill", kill)
    monkeypatch.setattr(_staging, "_kernel32", lambda: kernel)
    monkeypatch.setattr(_staging, "_last_error", lambda: last_error)
    assert _staging._pid_alive(4242) is alive
    if kernel is not None:
        assert kernel.calls[0] == ("open", 0x1000, 0, 4242)
        if kernel.handle:   # every handle opened is closed
            assert kernel.calls[-1] == ("close", 7)
    # and the stale-folder check then keeps the folder of a process counted running
    assert _staging._pid_alive(os.getpid())


def test_windows_kernel32_is_none_off_windows() -> None:
    assert _staging._kernel32() is None   # ctypes has no WinDLL here


def test_tabdp_plan_prints_the_notice_too(tmp_path: Path) -> None:
    plan = tmp_path / "plan"
    tmp = tmp_path / ".plan.tmp-999999999-c"
    tmp.mkdir()
    (tmp / "plan.json").write_text("{}")
    (tmp_path / f".plan.tmp-999999999-c{COMMITTED}").write_text(json.dumps({
        "tmps": [str(tmp)], "targets": [str(plan)], "olds": [], "private": [False],
        "entry": None}))
    code, _, err = run("plan", str(REPO / "examples" / "cbp_release.toml"), "--out", str(plan))
    assert code == 2 and "already exists" in err, err   # the killed run's plan, now in place
    assert err.startswith("WARNING (curator, do not publish): a tabdp run (process 999999999)")
    assert f"'{plan}', completing that run's release" in err
    assert (plan / "plan.json").read_text() == "{}"
