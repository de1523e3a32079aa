"""Benchmark: several tables under a budget, planned together vs released one by one.

``tabdp run`` plans all its tables before executing any (``planned_releases`` /
``execute_planned``). In a streaming session (row mode: each row is a unit) under a budget, each
release must replay the session's earlier releases to know which records the budget still
admits. Released one by one, release j replays j - 1 releases over the whole input: k tables
cost k(k + 1)/2 policy evaluations per row and k reads of the input. Planned together, one lazy
plan replays each release once and Polars reads the input once for all of them.

Workload: 1M synthetic establishments from Parquet (``_timing.write_workload``), privacy unit
**each row** (streaming session), a constant budget, six releases like the example spec's
(a count and sums of employment and payroll by county × NAICS sector, by state × sector and by
state; ExpPolyLog sums as in ``bench_units.py``), secure randomness, the per-record report not
written (it is the same in both modes).
Baseline: a plain Polars group-by of the same six tables from the same file, in the same run.

Usage: ``python benchmarks/bench_batch.py [--rows 1000000] [--repeat 2]``.
Writes ``benchmarks/results/batch.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
from _timing import interleaved_times, write_workload  # noqa: I001  (a sibling module)

import tabdp
from tabdp import mechanisms as mech
from tabdp.frame._release import execute_planned, planned_releases

HERE = Path(__file__).resolve().parent
LEVELS = [["county", "naics2"], ["state", "naics2"], ["state"]]


def _requests(path: str) -> list[dict[str, Any]]:
    df = pl.read_parquet(path, columns=["state", "county", "naics2"])
    reqs: list[dict[str, Any]] = []
    for by in LEVELS:
        keys = tabdp.KeySet.from_frame(df.select(by).unique())  # public domains in practice
        name = "_".join(by)
        reqs.append(dict(kind="count", by=by, keys=keys, name=f"n_{name}",
                         mechanism=mech.DiscreteGaussian(4.0)))
        reqs.append(dict(kind="sum", measures=["employment", "payroll"], by=by, keys=keys,
                         name=f"s_{name}", mechanism=mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0)))
    return reqs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_workload(Path(tmp) / "w.parquet", args.rows)
        reqs = _requests(path)

        def baseline() -> None:
            lf = pl.scan_parquet(path)
            pl.collect_all([lf.group_by(by).agg(pl.len(), pl.col("employment", "payroll").sum())
                            for by in LEVELS], engine="streaming")

        def one_by_one() -> None:
            s = tabdp.Session(streaming=True, budget=5.0)
            lf = pl.scan_parquet(path)
            for req in reqs:
                execute_planned(planned_releases(lf, s, [req]))

        def planned() -> None:
            s = tabdp.Session(streaming=True, budget=5.0)
            execute_planned(planned_releases(pl.scan_parquet(path), s, reqs))

        times = interleaved_times({"baseline": baseline, "one_by_one": one_by_one,
                                   "planned": planned}, args.repeat)
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "rows": args.rows, "tables": len(reqs), "privacy_unit": "each row (streaming session)",
        "budget": "constant rho 5.0", "randomness": "secure",
        "seconds": med, "ratio_to_baseline": {k: med[k] / med["baseline"] for k in med},
        "planned_speedup": med["one_by_one"] / med["planned"],
        "load_average": os.getloadavg(), "machine": platform.machine(),
        "cpus": os.cpu_count(), "polars": pl.__version__,
    }
    out = HERE / "results" / "batch.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
