"""A run's notices are its own: collected from its thread, never recorded process-wide (stop 65).

`run_release` recorded every warning of its data pass with ``warnings.catch_warnings(record=
True)`` into the curator's ``confidential.json``. That record is process-wide: another
thread's warning given meanwhile landed in the run's confidential file, and another thread's
overlapping ``catch_warnings`` could put the process's handler back while the run still ran, so
the run's own notices went past the record (to the terminal). ``tabdp run`` recorded the same
way around the whole run and printed what it caught: in author mode, to the author's terminal.
"""

from __future__ import annotations

import json
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from _specs import one_table_spec, write_release

from tabdp.release import run_release, runner
from tabdp.release.spec import load_spec

#: A sum whose log transform cannot publish usable cells: the release's own (data-free)
#: UsabilityWarning, given while the data pass runs (``dp.sum: ...``)
LOG = '{ family = "log", sigma = 0.3, offset = 1000.0 }'
OWN = "dp.sum: the log transform"


def _spec(folder: Path) -> Path:
    data = pl.DataFrame({"c": ["a", "b", "a", "b"], "x": [1.0, 2.0, 3.0, 4.0]})
    return write_release(folder, data, one_table_spec(LOG, seed=3))


def _before(monkeypatch: pytest.MonkeyPatch, first: Callable[[], None]) -> None:
    """``first()`` runs at the start of the data pass (``_run_with_data``)."""
    orig = runner._run_with_data

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        first()
        return orig(*args, **kwargs)

    monkeypatch.setattr(runner, "_run_with_data", wrapped)


def _another_thread_warns(text: str) -> None:
    th = threading.Thread(target=lambda: warnings.warn(text, UserWarning, stacklevel=1))
    th.start()
    th.join()


def _confidential_warnings(spec: Path) -> list[str]:
    conf = json.loads((spec.parent / "out" / "confidential" / "confidential.json").read_text())
    return list(conf["warnings"])


def test_another_threads_warning_is_not_in_the_runs_confidential_json(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec(tmp_path)
    _before(monkeypatch, lambda: _another_thread_warns("ANOTHER-THREAD notice"))
    with warnings.catch_warnings(record=True):  # the other thread's, wherever it goes
        warnings.simplefilter("always")
        run_release(load_spec(spec), test_seed=True)
    got = _confidential_warnings(spec)
    assert not any("ANOTHER-THREAD" in w for w in got), got
    assert any(OWN in w for w in got), got  # the run's own notice is still the curator's


def test_the_runs_own_notice_is_kept_when_another_thread_restores_the_handler(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread's ``catch_warnings`` opened before the run closes during its data pass."""
    spec = _spec(tmp_path)
    entered, leave = threading.Event(), threading.Event()
    shown: list[str] = []
    monkeypatch.setattr(warnings, "showwarning",
                        lambda message, *a, **k: shown.append(str(message)))

    def other() -> None:
        with warnings.catch_warnings():  # saves the process's handler (and filters) as now
            entered.set()
            leave.wait(30)
        # leaving it put that handler back, over the run's

    def release_other() -> None:
        leave.set()
        th.join()

    _before(monkeypatch, release_other)
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # (the filters the other thread puts back)
        th = threading.Thread(target=other)
        th.start()
        entered.wait(30)
        run_release(load_spec(spec), test_seed=True)
    assert any(OWN in w for w in _confidential_warnings(spec))
    assert not any(OWN in w for w in shown), shown  # not past the run to the terminal


#: Run as ``python -c PROBE <cli args>``: before the data pass of the run (its schema check)
#: another thread warns, and the run's own thread gets a library's warning, then the CLI runs
PROBE = """
import sys, threading, warnings
from tabdp import cli
from tabdp.release import runner
real = runner._check_schema_first
def check(*args, **kwargs):
    th = threading.Thread(target=lambda: warnings.warn("SECRET-9 another thread", UserWarning))
    th.start(); th.join()
    warnings.warn("SECRET-8 a library reading the schema", UserWarning)
    return real(*args, **kwargs)
runner._check_schema_first = check
sys.exit(cli.main(sys.argv[1:]))
"""


def test_the_run_cli_shows_no_other_warning_to_an_author(tmp_path: Path) -> None:
    """``tabdp run`` printed to the author every warning the process gave while the run ran.

    Another thread's warning (the curator's, another author's), and a library's warning on
    the run's thread outside the data pass (reading the curator's schema), were recorded and
    printed on the author's terminal once the run ended. They are the curator's: the
    confidential ``stderr.log``.
    """
    import os
    import subprocess
    import sys

    from _curator import R15_SPEC, write_curator

    import tabdp
    from tabdp.datasets.synth import generate_establishments

    base = generate_establishments(200, seed=3).filter(pl.col("state").is_in(["01", "02"]))
    base.select("estab_id", "state", "payroll").rename({"payroll": "v"}).write_parquet(
        tmp_path / "ds.parquet")
    write_curator(tmp_path, {"cbp": "ds.parquet"})
    (tmp_path / "s.toml").write_text(R15_SPEC, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(Path(tabdp.__file__).resolve().parents[1]))
    env.pop("TABDP_CURATOR", None)
    proc = subprocess.run([sys.executable, "-c", PROBE, "run", "s.toml", "--curator",
                           "curator.toml", "--quiet", "--test-seed"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "SECRET" not in proc.stderr + proc.stdout, proc.stderr
    log = (tmp_path / "releases" / "r15" / "confidential" / "stderr.log").read_text()
    assert "SECRET-8" in log and "SECRET-9" in log, log
