"""Benchmark: ``tabdp ledger verify`` with and without recomputing the state from the history.

Builds a ledger of ``--units`` units over ``--releases`` releases (each of ``--queries``
charges per unit, as the release workflow commits: ``autocommit=False``, one commit per
release; 13 loss columns like a release of two measures and counts: ``rho``, ``epsilon``,
``rho_z``, ``rho_g``, ``eps_a``, ``delta_a``, ``size`` and ``rho@c`` / ``size@c`` for three
currencies; 2% of the units leave and 2% enter at each release), then times, interleaved,
``verify_ledger(path, lock=True)`` (the byte checks: the chain, the Delta logs, every file
hashed) and ``verify_ledger(path, lock=True, recompute=True)`` (the same, each history file
parsed from the bytes it hashes and added per unit, then compared with the state), each in a
fresh subprocess (wall time, CPU time of the process, peak ``VmHWM``). Usage: ``python
benchmarks/bench_ledger_verify.py [--units 1000000] [--releases 4] [--queries 3] [--repeat
3]``. Writes ``benchmarks/results/ledger_verify.json`` (``--out``: another name).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SUMS = ("rho", "epsilon", "rho_z", "rho_g", "eps_a", "delta_a")
CURRENCIES = ("payroll", "emp", "rows")

_CHILD = """
import json, resource, sys, time
from tabdp.privacy.lifetime import verify_ledger
t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
verify_ledger(sys.argv[1], lock=True, recompute=sys.argv[2] == "1")
t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
peak = 0
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        peak = int(line.split()[1]) * 1024
print(json.dumps({"wall": t1 - t0, "cpu": r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime,
                  "peak_bytes": peak}))
"""


def build(path: Path, units: int, releases: int, queries: int) -> dict[str, Any]:
    """The ledger the benchmark verifies (not timed)."""
    import numpy as np
    import polars as pl

    import tabdp

    rng = np.random.default_rng(31)
    tabdp.Ledger.create(path, series="bench", lifetime_budget=1e9).close()
    churn = units // 50
    for r in range(releases):
        ids = np.arange(r * churn, r * churn + units, dtype=np.int64)
        u = pl.Series("unit", ids)
        with tabdp.Ledger.open(path, autocommit=False) as led:
            for _ in range(queries):
                sums = {c: (rng.random(units) if c in ("rho", "rho_z") else
                            np.full(units, np.inf) if c == "epsilon" else np.zeros(units))
                        for c in SUMS}
                maxes = {"size": rng.random(units) * 1e4}
                for c in CURRENCIES:
                    sums[f"rho@{c}"] = rng.random(units)
                    maxes[f"size@{c}"] = rng.random(units) * 1e4
                led.charge(u, sums, maxes)
            led.commit(label=f"r{r}")
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return {"ledger_bytes": size}


def timed(path: Path, recompute: bool) -> dict[str, float]:
    """One verify in a fresh process."""
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path), "1" if recompute else "0"],
                         check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    result: dict[str, float] = json.loads(out.stdout)
    return result


def main() -> None:
    """Build, time interleaved, write the results."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--units", type=int, default=1_000_000)
    ap.add_argument("--releases", type=int, default=4)
    ap.add_argument("--queries", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default="ledger_verify.json")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_ledger_verify_"))
    try:
        path = work / "ledger"
        t = time.perf_counter()
        info = build(path, a.units, a.releases, a.queries)
        info["build_seconds"] = time.perf_counter() - t
        runs: dict[str, list[dict[str, float]]] = {"bytes": [], "recompute": []}
        timed(path, False)  # warm-up (page cache)
        for _ in range(a.repeat):
            runs["bytes"].append(timed(path, False))
            runs["recompute"].append(timed(path, True))
        med = {k: {m: statistics.median(r[m] for r in v) for m in ("wall", "cpu", "peak_bytes")}
               for k, v in runs.items()}
        result = {"units": a.units, "releases": a.releases, "queries": a.queries, **info,
                  "runs": runs, "median": med,
                  "recompute_extra_cpu": med["recompute"]["cpu"] - med["bytes"]["cpu"],
                  "recompute_over_bytes_cpu": med["recompute"]["cpu"] / med["bytes"]["cpu"],
                  "load_avg": os.getloadavg(), "cpus": os.cpu_count(),
                  "python": platform.python_version(),
                  "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        out = HERE / "results" / a.out
        out.write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps({k: result[k] for k in ("units", "releases", "median",
                                                  "recompute_over_bytes_cpu", "load_avg")}))
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the ledger and its anchor


if __name__ == "__main__":
    main()
