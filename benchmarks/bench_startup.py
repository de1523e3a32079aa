"""Benchmark: per-process start-up of the exact samplers, cold against warm table cache.

Every measurement is a **fresh Python process** that imports tabdp and times its first
exactly rounded release (``round_noisy``, ``--cells`` cells at 0, the law's default grid, a
seeded ``RandomSource``) of one law:

* **cold**: an empty table cache folder (``TABDP_CACHE_DIR`` set to a new temporary folder), so
  every table the release needs is built (what every process paid before the disk cache);
* **warm**: a second process on the same folder, which loads the tables and re-checks their
  certificates (docs/exact-rounding.md §4.7) instead of building them.

Laws: Gaussian (Taylor tables), ExpPolyLog p = 1 with the demo's calibrated parameters
(``calibrate("exp_polylog", {2.5e5: 0.5, 2e10: 50.0}, typical_total=1e7, p=1)``; certified Arb
table), symmetric stable α = 1.5 (certified table from its series) and Laplace (a closed form, no
table: the control). Cold and warm processes alternate within each round (``--repeat`` rounds,
medians), so machine-load drift hits both; each process reports its cache events (tables
built, loaded, rejected), which show that the warm processes loaded instead of building.

Usage: ``python benchmarks/bench_startup.py [--cells 1000000] [--repeat 3]``.
Writes ``benchmarks/results/startup.json`` and prints a Markdown table.
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
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

#: The child process: import, build the law, time the first release; prints one JSON line.
_CHILD = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import tabdp
from tabdp import _cache
from tabdp.noise import ExpPolyLog, Gaussian, Laplace, SymmetricStable
from tabdp.noise.exact import default_grid, noise_spread, round_noisy
from tabdp.rng import RandomSource
t1 = time.perf_counter()
law = {law!r}
if law == "gaussian":
    noise = Gaussian(1000.0)
elif law == "exp_polylog_demo":
    noise = ExpPolyLog(sigma=1100480.2653110565, a=1.0, d=5.097985364851974, p=1.0)
elif law == "stable_1.5":
    noise = SymmetricStable(1.5, 1000.0)
else:
    noise = Laplace(1000.0)
q = np.zeros({cells})
t2 = time.perf_counter()
d = round_noisy(noise, q, grid=default_grid(noise_spread(noise)), rng=RandomSource(seed=7))
t3 = time.perf_counter()
d2 = round_noisy(noise, q, grid=default_grid(noise_spread(noise)), rng=RandomSource(seed=8))
t4 = time.perf_counter()
print(json.dumps({{"import_s": t1 - t0, "first_s": t3 - t2, "second_s": t4 - t3,
                  "fallbacks": d.fallbacks, "stats": dict(_cache.STATS),
                  "checksum": float(np.sum(d.values))}}))
"""

LAWS = ("gaussian", "exp_polylog_demo", "stable_1.5", "laplace")


def _child(law: str, cells: int, cache: str) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TABDP_CACHE_DIR=cache)
    out = subprocess.run([sys.executable, "-c", _CHILD.format(law=law, cells=cells)], env=env,
                         capture_output=True, text=True, check=True, timeout=3600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--laws", nargs="*", default=list(LAWS))
    ap.add_argument("--out", type=Path, default=HERE / "results" / "startup.json")
    args = ap.parse_args()

    rows: dict[str, dict[str, Any]] = {}
    for law in args.laws:
        runs: dict[str, list[dict[str, Any]]] = {"cold": [], "warm": []}
        for _ in range(args.repeat):
            folder = tempfile.mkdtemp(prefix="tabdp-bench-cache-")
            try:
                runs["cold"].append(_child(law, args.cells, folder))
                runs["warm"].append(_child(law, args.cells, folder))
                size = sum(f.stat().st_size for f in Path(folder).rglob("*.npz"))
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        cold = statistics.median(r["first_s"] for r in runs["cold"])
        warm = statistics.median(r["first_s"] for r in runs["warm"])
        same = all(r["checksum"] == runs["cold"][0]["checksum"]
                   for r in runs["cold"] + runs["warm"])
        rows[law] = {
            "first_release_cold_s": cold,
            "first_release_warm_s": warm,
            "ratio_cold_over_warm": cold / warm,
            "second_release_s": statistics.median(r["second_s"] for r in runs["warm"]),
            "import_s": statistics.median(r["import_s"] for r in runs["cold"] + runs["warm"]),
            "cold_events": runs["cold"][-1]["stats"],
            "warm_events": runs["warm"][-1]["stats"],
            "cache_bytes": size,
            "same_values_cold_and_warm": same,
            "fallbacks": [r["fallbacks"] for r in runs["cold"] + runs["warm"]],
            "runs": runs,
        }
        print(f"{law}: cold {cold:.3f} s, warm {warm:.3f} s ({cold / warm:.1f}x); "
              f"events cold {rows[law]['cold_events']}, warm {rows[law]['warm_events']}",
              flush=True)

    result = {
        "benchmark": "first exactly rounded release per fresh process, cold vs warm table cache",
        "cells": args.cells,
        "repeat": args.repeat,
        "randomness": "seeded RandomSource (seed 7; second release seed 8)",
        "python": sys.version.split()[0],
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "laws": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print()
    print("| law | first release, cold cache | first release, warm cache | ratio | "
          "tables built → loaded | cache size |")
    print("|---|---:|---:|---:|---|---:|")
    for law, r in rows.items():
        print(f"| {law} | {r['first_release_cold_s']:.3f} s | {r['first_release_warm_s']:.3f} s "
              f"| {r['ratio_cold_over_warm']:.1f}× | {r['cold_events'].get('build', 0)} → "
              f"{r['warm_events'].get('hit', 0)} | {r['cache_bytes'] / 1024:.0f} KiB |")


if __name__ == "__main__":
    main()
