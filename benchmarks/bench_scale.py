"""Benchmark: streaming row mode at scale (10M to 100M rows from Parquet), time and peak memory.

Issue 14's workload (a count and sums of employment and payroll by county x NAICS sector,
59,850 public cells, the per-record report written) in a **streaming session**
(``Session(streaming=True)``, row mode: each row is a unit; secure randomness unless
``--seeded``), against a plain Polars streaming group-by of the same cells. The input is a folder
of Parquet parts, each a copy of one synthetic part of ``--part`` rows (a copy is a hard link:
the rows differ only by position, which is all row mode needs), read by ``pl.scan_parquet``.

Every variant runs in a fresh subprocess that reports its wall time and peak RSS (VmHWM); the
baseline runs right before each tabdp run, so machine load hits both. The figure of merit for
memory is that tabdp's peak RSS stays flat as rows grow (and within 2x the baseline's).

Usage: ``python benchmarks/bench_scale.py [--rows 10000000 30000000 100000000]
[--part 10000000] [--dir /tmp/tabdp-scale]``. Writes ``benchmarks/results/scale.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _timing import write_workload  # noqa: I001  (a sibling module: benchmarks run as scripts)

HERE = Path(__file__).resolve().parent
BY = ["county", "naics2"]


def _hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _variant(kind: str, folder: str, out: str, seeded: bool) -> dict[str, float]:
    import polars as pl

    import tabdp
    from tabdp import mechanisms as mech

    source = f"{folder}/*.parquet"
    t0 = time.perf_counter()
    if kind == "baseline":
        (pl.scan_parquet(source).group_by(BY)
         .agg(pl.col("payroll").sum(), pl.col("employment").sum(), pl.len())
         .collect(engine="streaming"))
        return {"seconds": time.perf_counter() - t0, "peak_rss_mb": _hwm_mb()}
    keys_frame = pl.scan_parquet(source).select(BY).unique().collect(engine="streaming")
    keys = tabdp.KeySet.from_dict(county=sorted(keys_frame["county"].unique().to_list()),
                                  naics2=sorted(keys_frame["naics2"].unique().to_list()))
    t0 = time.perf_counter()
    s = tabdp.Session(seed=1 if seeded else None, streaming=True)
    lf = pl.scan_parquet(source)
    lf.dp.sum(["payroll", "employment"], by=BY, keys=keys,
              mechanism=mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0), session=s)
    lf.dp.count(by=BY, keys=keys, session=s)
    s.report().write_per_record(f"{out}/per_record.parquet")
    return {"seconds": time.perf_counter() - t0, "peak_rss_mb": _hwm_mb()}


def _folder(base: Path, part: Path, n_rows: int, part_rows: int) -> Path:
    folder = base / f"rows_{n_rows}"
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n_rows // part_rows):
        dst = folder / f"part-{i:04d}.parquet"
        if not dst.exists():
            os.link(part, dst)
    return folder


def main() -> None:
    """Run the benchmark and print a table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[10_000_000, 30_000_000,
                                                           100_000_000])
    ap.add_argument("--part", type=int, default=10_000_000)
    ap.add_argument("--dir", default="/tmp/tabdp-scale")
    ap.add_argument("--seeded", action="store_true")
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(_variant(args.variant, args.folder, args.dir, args.seeded)))
        return
    base = Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    part = base / f"part_{args.part}.parquet"
    if not part.exists():
        write_workload(part, args.part)
    results: list[dict[str, Any]] = []
    for n in args.rows:
        folder = _folder(base, part, n, args.part)
        row: dict[str, Any] = {"rows": n, "randomness": "seeded" if args.seeded else "secure",
                               "unit_mode": "row (streaming session)"}
        for kind in ("baseline", "tabdp"):
            cmd = [sys.executable, __file__, "--variant", kind, "--folder", str(folder),
                   "--dir", str(base)]
            if args.seeded:
                cmd.append("--seeded")
            done = subprocess.run(cmd, check=True, capture_output=True, text=True)
            row[kind] = json.loads(done.stdout.strip().splitlines()[-1])
        row["time_ratio"] = row["tabdp"]["seconds"] / row["baseline"]["seconds"]
        row["peak_rss_ratio"] = row["tabdp"]["peak_rss_mb"] / row["baseline"]["peak_rss_mb"]
        results.append(row)
        print(json.dumps(row), flush=True)
    meta = {"python": platform.python_version(), "cpus": os.cpu_count(),
            "workload": "count + sum(payroll, employment) by county x naics2 from Parquet "
                        "parts, per-record report written (streaming session, row mode)"}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "scale.json").write_text(json.dumps({"meta": meta, "results": results},
                                                             indent=2))
    print("| rows | baseline (s) | tabdp (s) | time ratio | peak RSS base / tabdp (MB) |")
    print("|---:|---:|---:|---:|---:|")
    for r in results:
        b, t = r["baseline"], r["tabdp"]
        print(f"| {r['rows']:,} | {b['seconds']:.1f} | {t['seconds']:.1f} | "
              f"{r['time_ratio']:.1f}x | {b['peak_rss_mb']:.0f} / {t['peak_rss_mb']:.0f} |")


if __name__ == "__main__":
    main()
