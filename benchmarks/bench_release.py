"""Benchmark: a count and two sums by county x 6-digit NAICS, with the per-record report.

Compares, in the same run and on the same Parquet file, a plain Polars group-by of the same sums
and count (the baseline) with the tabdp release (``df.dp.sum`` of payroll and employment, then
``df.dp.count``, then ``session.report().per_record``).

* Time: both variants run alternately in one process on the same loaded frame (``--repeat``
  rounds, after a warm-up round); the medians are compared, so machine load drifts hit both.
* Memory: each variant runs once more in a fresh subprocess, so its peak resident memory
  (``ru_maxrss``) is its own; "above data" subtracts the memory after loading the frame.

Figures are reported as ratios to the baseline.

Usage: ``python benchmarks/bench_release.py [--rows 1000000 10000000] [--repeat 3]``.
Writes ``benchmarks/results/release.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _timing import interleaved_times  # noqa: I001  (a sibling module: benchmarks run as scripts)

HERE = Path(__file__).resolve().parent


BY = ["county", "naics6"]


def _runners(df):  # type: ignore[no-untyped-def]
    import polars as pl

    import tabdp
    from tabdp import mechanisms as mech
    from tabdp.datasets.synth import public_domains

    doms = public_domains()
    keys = tabdp.KeySet.from_dict(county=doms["county"], naics6=doms["naics6"])

    def baseline() -> None:
        df.group_by(BY).agg(pl.col("payroll").sum(), pl.col("employment").sum(), pl.len())

    def release() -> None:
        session = tabdp.Session(seed=1)
        df.dp.sum(["payroll", "employment"], by=BY, keys=keys,
                  mechanism=mech.LogTransform(sigma=0.5, offset=1000.0), session=session)
        df.dp.count(by=BY, keys=keys, mechanism=mech.Gaussian(sigma=2.0), session=session)
        session.report().per_record  # noqa: B018 - computing it is part of the workload

    return {"baseline": baseline, "tabdp": release}


def _hwm_mb() -> float:
    """Peak resident memory of this process (VmHWM; unlike ru_maxrss it restarts at exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _memory(kind: str, path: str) -> dict[str, float]:
    import polars as pl

    df = pl.read_parquet(path)
    rss_data = _hwm_mb()
    _runners(df)[kind]()
    return {"peak_rss_mb": _hwm_mb(), "data_rss_mb": rss_data}


def _timing(path: str, repeat: int) -> dict[str, dict[str, float]]:
    import polars as pl

    df = pl.read_parquet(path)
    runs = _runners(df)
    times = interleaved_times(runs, repeat)
    return {k: {"median_s": statistics.median(v), "min_s": min(v)} for k, v in times.items()}


def main() -> None:
    """Run the benchmark and print a table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--variant", choices=["baseline", "tabdp"], help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(_memory(args.variant, args.path)))
        return

    from tabdp.datasets.synth import generate_establishments

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.rows:
            path = str(Path(tmp) / f"estab_{n}.parquet")
            generate_establishments(n, seed=20261121).write_parquet(path)
            row: dict[str, object] = {"rows": n}
            timing = _timing(path, args.repeat)
            for kind in ("baseline", "tabdp"):
                out = subprocess.run(
                    [sys.executable, __file__, "--variant", kind, "--path", path],
                    check=True, capture_output=True, text=True)
                row[kind] = {**timing[kind], **json.loads(out.stdout.strip().splitlines()[-1])}
            b, t = row["baseline"], row["tabdp"]
            row["time_ratio"] = t["median_s"] / b["median_s"]  # type: ignore[index]
            row["peak_rss_ratio"] = t["peak_rss_mb"] / b["peak_rss_mb"]  # type: ignore[index]
            row["extra_rss_ratio"] = ((t["peak_rss_mb"] - t["data_rss_mb"]) /  # type: ignore[index]
                                      max(b["peak_rss_mb"] - b["data_rss_mb"], 1.0))  # type: ignore[index]
            results.append(row)
    meta = {"python": platform.python_version(), "machine": platform.machine(),
            "cpus": __import__("os").cpu_count()}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "release.json").write_text(json.dumps({"meta": meta, "results": results},
                                                               indent=2))
    print("| rows | baseline (s) | tabdp (s) | time ratio | peak RSS base / tabdp (MB) | "
          "RSS ratio | above-data RSS ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        b, t = r["baseline"], r["tabdp"]
        print(f"| {r['rows']:,} | {b['median_s']:.3f} | {t['median_s']:.3f} | "  # type: ignore[index]
              f"{r['time_ratio']:.2f}x | {b['peak_rss_mb']:.0f} / {t['peak_rss_mb']:.0f} | "  # type: ignore[index]
              f"{r['peak_rss_ratio']:.2f}x | {r['extra_rss_ratio']:.2f}x |")


if __name__ == "__main__":
    main()
