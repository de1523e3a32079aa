"""``tabdp run spec | head -1``: a reader that stops early is not a failed release.

The command is run as a program (a subprocess, stdout or stderr a pipe whose reader goes away):
the release is written, the exit code is the run's (0), and stderr never says the release was
not written nor blames a path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import tabdp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _specs import one_table_spec  # noqa: E402

ROOT = Path(tabdp.__file__).resolve().parents[1]
RELEASE = ["manifest.json", "summary.html", "summary.json", "t.parquet"]


def _folder(tmp_path: Path) -> Path:
    pl.DataFrame({"c": ["a", "b", "a"], "x": [1.0, 2.0, 3.0]}).write_parquet(tmp_path / "d.parquet")
    (tmp_path / "s.toml").write_text(one_table_spec('{ family = "gaussian", sigma = 1.0 }'))
    return tmp_path


def _env(buffered: bool) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("PYTHONUNBUFFERED", None)
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    return env


PROGRAM = [sys.executable, "-c", "import sys; from tabdp.cli import main; sys.exit(main())"]


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_stdout_closed_before_the_summary(tmp_path: Path, buffered: bool) -> None:
    folder = _folder(tmp_path)
    read, write = os.pipe()
    proc = subprocess.Popen([*PROGRAM, "run", "s.toml"], cwd=folder, stdout=write,
                            stderr=subprocess.PIPE, text=True, env=_env(buffered))
    os.close(write)
    os.close(read)  # the reader is gone before the run prints its summary
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert sorted(p.name for p in (folder / "out" / "public").iterdir()) == RELEASE
    assert (folder / "out" / "confidential" / "per_record_losses.parquet").exists()
    assert "Nothing was written" not in err
    assert "nothing was written" not in err
    assert "cannot use the path" not in err
    assert "Broken pipe" not in err and "BrokenPipeError" not in err
    assert "writing outputs" in err  # stderr (still open) keeps its lines


def test_head_1_reads_the_first_line(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    proc = subprocess.Popen([*PROGRAM, "run", "s.toml"], cwd=folder, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(False))
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # as `head -1`
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 0, err
    assert first == "Release 'r' done.\n"
    assert sorted(p.name for p in (folder / "out" / "public").iterdir()) == RELEASE
    assert "othing was written" not in err and "cannot use the path" not in err
    assert "Broken pipe" not in err and "BrokenPipeError" not in err


def test_stderr_closed_too(tmp_path: Path) -> None:
    # `tabdp run spec 2>&1 | head -0`: both streams on one pipe whose reader is gone
    folder = _folder(tmp_path)
    read, write = os.pipe()
    proc = subprocess.Popen([*PROGRAM, "run", "s.toml"], cwd=folder, stdout=write,
                            stderr=write, env=_env(True))
    os.close(write)
    os.close(read)
    assert proc.wait(timeout=120) == 0
    assert sorted(p.name for p in (folder / "out" / "public").iterdir()) == RELEASE


def test_in_process_streams_that_break() -> None:
    # a caller's streams (no file descriptor): printing stops, the exit code is unchanged
    import io

    from tabdp import cli

    class Gone(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    err = io.StringIO()
    assert cli.main(["validate", "no-such-spec.toml"], stdout=Gone(), stderr=err) == 2
    assert cli.main(["validate", "no-such-spec.toml"], stdout=io.StringIO(),
                    stderr=Gone()) == 2


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_stdout_on_a_full_disk_is_not_a_failed_release(tmp_path: Path, buffered: bool) -> None:
    """A stdout on a full file system (review r52): the release is written, exit 0."""
    folder = _folder(tmp_path)
    with open("/dev/full", "w") as full:
        proc = subprocess.run([*PROGRAM, "run", "s.toml"], cwd=folder, stdout=full,
                              stderr=subprocess.PIPE, text=True, env=_env(buffered), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (folder / "out" / "public").iterdir()) == RELEASE
    assert "Nothing was written" not in proc.stderr
    assert "cannot use the path" not in proc.stderr


def test_stdout_closed_at_start_is_not_an_internal_error(tmp_path: Path) -> None:
    """``tabdp run spec >&-`` (review r52): sys.stdout is None; the release is written, exit 0."""
    folder = _folder(tmp_path)
    proc = subprocess.run(["bash", "-c", f"{' '.join(map(repr, PROGRAM))} run s.toml >&-"],
                          cwd=folder, stderr=subprocess.PIPE, text=True, env=_env(True),
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (folder / "out" / "public").iterdir()) == RELEASE
    assert "internal error" not in proc.stderr
