"""Real ``tabdp run`` processes against one lifetime ledger: ``kill -9`` and concurrent runs.

Issue 31: "kill -9 at random points of 20 runs leaves the ledger at the old or the new state,
never between; two concurrent runs: one proceeds, the other is refused." Each run here is a
separate interpreter running ``python -m tabdp.cli run`` on a small spec with ``[ledger]``.
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp.cli import main as cli_main

pytest.importorskip("deltalake")

ROOT = Path(__file__).resolve().parents[2]
from _ledger_specs import COUNTIES, copy_ledger, series_spec  # noqa: E402  (tests/ is on sys.path)

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _data(folder: Path, year: int, n: int) -> str:
    """A yearly sample: units ``10·(year-2020)`` .. ``+n-1`` (units enter and leave)."""
    name = f"data_{year}.parquet"
    if not (folder / name).exists():
        rng = np.random.default_rng(year)
        ids = np.arange(10 * (year - 2020), 10 * (year - 2020) + n, dtype=np.int64)
        pl.DataFrame({"estab": ids, "county": np.array(COUNTIES)[ids % 3],
                      "payroll": np.round(rng.lognormal(3.0, 1.0, n), 2)}).write_parquet(
            folder / name)
    return name


def _spec(folder: Path, name: str, year: int, ledger: str, out: str, n: int = 5000) -> Path:
    text = series_spec(name=f"r{year}", data=_data(folder, year, n), ledger=ledger,
                       series="crash", lifetime="1e6", seed=year, public=f"{out}/public",
                       confidential=f"{out}/confidential")
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def _init(path: Path) -> None:
    assert cli_main(["ledger", "init", str(path), "--series", "crash", "--lifetime-budget",
                     "1e6"], stdout=io.StringIO()) == 0


def _state(path: Path) -> tuple[int, pl.DataFrame]:
    """The ledger's releases and state, after ``tabdp ledger verify`` (full check) passes."""
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["ledger", "verify", str(path)], stdout=out, stderr=err) == 0, \
        err.getvalue()
    with tabdp.Ledger.open(path) as led:  # restores an interrupted run's Delta tables
        # the anchor next to the folder is at the chain's head (a run killed between its
        # commit and the anchor's update: brought up to date by the verify above)
        anchor = json.loads((path.parent / f".{path.name}.head.json").read_text())
        assert (anchor["entries"], anchor["head"]) == (len(led.entries), led.entries[-1]["hash"])
        return led.releases, led.state().clone()


def _run(spec: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tabdp.cli", "run", str(spec), "--test-seed",
                             "--quiet"], env=ENV, cwd=spec.parent, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _delta_versions(path: Path) -> set[str]:
    """The Delta log files of the ledger's state and history tables."""
    return {str(p.relative_to(path)) for t in ("state", "history")
            for p in (path / t / "_delta_log").glob("*.json")}


def _uncommitted_writes(path: Path, before: set[str]) -> bool:
    """Whether the run wrote Delta versions past the chain's (a run killed mid-commit).

    ``before``: the log files before the run (an earlier run's orphaned versions are not this
    run's).
    """
    chain = [json.loads(p.read_text()) for p in sorted((path / "chain").glob("*.json"))]
    for t in ("state", "history"):
        done = max((e[t]["version"] for e in chain if e.get(t)), default=-1)
        if any(int(p.stem) > done and str(p.relative_to(path)) not in before
               for p in (path / t / "_delta_log").glob("*.json")):
            return True
    return False


@pytest.mark.slow  # 20 interpreters plus 20 timed reference runs (about 2 minutes on 2 cores)
def test_kill_9_of_real_runs_leaves_the_old_or_the_new_state(tmp_path):
    ledger = tmp_path / "ledger"
    _init(ledger)
    releases, state = _state(ledger)
    outcomes = {"old": 0, "new": 0, "killed": 0, "killed_mid_commit": 0}
    rnd = random.Random(3131)
    # kill points as fractions of the same run's measured length: the even runs anywhere in the
    # run, the odd ones spread evenly from 60% to 150% (around the commit and past the end).
    # The run's length is measured on the same ledger's copy just before (the ledger grows with
    # each release and the machine's speed varies: one probe at the start was too early for
    # later runs and left almost every kill before the commit)
    late = [0.6 + 0.9 * k / 9 for k in range(10)]
    rnd.shuffle(late)
    for i in range(20):
        year = 2021 + i
        # the next state, computed by a complete, timed run of the same interpreter command on a
        # copy of the ledger
        ref = tmp_path / f"ref{i}"
        copy_ledger(ledger, ref)
        t0 = time.monotonic()
        probe = _run(_spec(tmp_path, f"ref{i}", year, ref.name, f"out/ref{i}"))
        _, err = probe.communicate(timeout=300)
        whole = time.monotonic() - t0
        assert probe.returncode == 0, err
        with tabdp.Ledger.open(ref) as led:
            new_state = led.state().clone()
            assert led.releases == releases + 1
        shutil.rmtree(ref)
        # the real run, killed after a delay
        spec = _spec(tmp_path, f"run{i}", year, ledger.name, f"out/run{i}")
        delay = whole * (late[i // 2] if i % 2 else rnd.uniform(0.0, 1.0))
        before = _delta_versions(ledger)
        p = _run(spec)
        time.sleep(delay)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            outcomes["killed"] += 1
        _, err = p.communicate(timeout=300)
        assert p.returncode in (0, -signal.SIGKILL), err
        if p.returncode == -signal.SIGKILL and _uncommitted_writes(ledger, before):
            outcomes["killed_mid_commit"] += 1
        k, st = _state(ledger)
        if k == releases:
            assert st.equals(state), f"run {i}: neither the old nor the new state"
            outcomes["old"] += 1
        else:
            assert k == releases + 1 and st.equals(new_state), \
                f"run {i}: neither the old nor the new state"
            outcomes["new"] += 1
        if p.returncode == 0:
            assert k == releases + 1
        releases, state = k, st
    print(outcomes)
    assert outcomes["killed"] >= 5 and outcomes["new"] >= 3 and outcomes["old"] >= 3, outcomes


_BARRIER = textwrap.dedent("""
    import os, sys, time
    import tabdp.cli, tabdp.release.runner, tabdp.privacy.lifetime, deltalake  # warm imports
    go = sys.argv[1]
    print("ready", flush=True)
    t0 = time.monotonic()
    while not os.path.exists(go) and time.monotonic() - t0 < 120:
        time.sleep(0.005)
    sys.argv = ["tabdp", *sys.argv[2:]]
    sys.exit(tabdp.cli.main())
""")


@pytest.mark.slow  # CI only: a costly case the local loop leaves out (3-6 s)
def test_two_real_runs_at_once_one_proceeds_the_other_is_refused(tmp_path):
    ledger = tmp_path / "ledger"
    _init(ledger)
    specs = [_spec(tmp_path, f"run{k}", 2021, ledger.name, f"out/run{k}", n=60000)
             for k in (0, 1)]
    go = tmp_path / "go"
    procs = [subprocess.Popen(
        [sys.executable, "-c", _BARRIER, str(go), "run", str(s), "--test-seed", "--quiet"],
        env=ENV, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for s in specs]
    for p in procs:  # both interpreters have imported everything: start them at once
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    go.touch()
    res = [(p.wait(timeout=300), *p.communicate(timeout=300)) for p in procs]
    codes = sorted(r[0] for r in res)
    assert codes == [0, 2], res
    loser = next(r for r in res if r[0] == 2)
    winner_i = next(i for i, r in enumerate(res) if r[0] == 0)
    assert "is in use by another run" in loser[2]
    assert "refused before reading any data" in loser[2]
    # the refused run wrote nothing: no output folder of its own
    assert not (tmp_path / f"out/run{1 - winner_i}").exists()
    assert (tmp_path / f"out/run{winner_i}/public/manifest.json").is_file()
    releases, st = _state(ledger)
    assert releases == 1 and st.height == 60000
