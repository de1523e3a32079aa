"""Benchmark: a count and two sums by county x 6-digit NAICS, with the per-record report.

Compares, in the same run and on the same Parquet file, a plain Polars group-by of the same sums
and count (the baseline) with the tabdp release (``df.dp.sum`` of payroll and employment, then
``df.dp.count``, then ``session.report().per_record``). Each variant runs in a fresh subprocess,
so its peak resident memory (``ru_maxrss``) is its own; times are the median of ``--repeat``
runs inside that process. Figures are reported as ratios to the baseline.

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
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _variant(kind: str, path: str, repeat: int) -> dict[str, float]:
    import polars as pl

    df = pl.read_parquet(path)
    rss_data = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    by = ["county", "naics6"]
    times = []
    if kind == "baseline":
        for _ in range(repeat):
            t = time.perf_counter()
            out = df.group_by(by).agg(pl.col("payroll").sum(), pl.col("employment").sum(),
                                      pl.len())
            times.append(time.perf_counter() - t)
            del out
    else:
        import tabdp
        from tabdp import mechanisms as mech
        from tabdp.synth import public_domains

        doms = public_domains()
        keys = tabdp.KeySet.from_dict(county=doms["county"], naics6=doms["naics6"])
        for _ in range(repeat):
            t = time.perf_counter()
            session = tabdp.Session(seed=1)
            s = df.dp.sum(["payroll", "employment"], by=by, keys=keys,
                          mechanism=mech.LogTransform(sigma=0.5, offset=1000.0),
                          session=session)
            c = df.dp.count(by=by, keys=keys, mechanism=mech.Gaussian(sigma=2.0),
                            session=session)
            pr = session.report().per_record
            times.append(time.perf_counter() - t)
            del s, c, pr, session
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"median_s": statistics.median(times), "min_s": min(times),
            "peak_rss_mb": peak / 1024, "data_rss_mb": rss_data / 1024}


def main() -> None:
    """Run the benchmark and print a table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--variant", choices=["baseline", "tabdp"], help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(_variant(args.variant, args.path, args.repeat)))
        return

    from tabdp.synth import generate_establishments

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.rows:
            path = str(Path(tmp) / f"estab_{n}.parquet")
            generate_establishments(n, seed=20261121).write_parquet(path)
            row: dict[str, object] = {"rows": n}
            for kind in ("baseline", "tabdp"):
                out = subprocess.run(
                    [sys.executable, __file__, "--variant", kind, "--path", path,
                     "--repeat", str(args.repeat)], check=True, capture_output=True, text=True)
                row[kind] = json.loads(out.stdout.strip().splitlines()[-1])
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
