"""Benchmark: the Spark engine (``local[2]``) against the Polars engine and plain group-bys.

Workload (issue 15): a count and sums of employment and payroll by county x NAICS sector
(50 states x 63 counties x 19 sectors: 59,850 public cells), read from Parquet, with the
confidential per-record report written to Parquet (by Spark for Spark sessions). Privacy unit:
each row (``row``) or firms of several establishments (``firm``).

Variants, timed in the same process, alternated round by round (medians of ``--repeat`` rounds
after a warm-up), so machine load hits all of them:

* ``polars_groupby``: ``pl.scan_parquet(...).group_by(...).agg(sum, sum, len).collect()``;
* ``polars_tabdp_<unit>``: the tabdp release on the Polars LazyFrame;
* ``spark_groupby``: ``spark.read.parquet(...).groupBy(...).agg(sum, sum, count).collect()``;
* ``spark_tabdp_<unit>``: the tabdp release on the Spark DataFrame.

Also reported: the Python driver's peak RSS (VmHWM) of a Spark release alone, run once per size in
a fresh subprocess (``spark_tabdp_row``: nothing per row reaches the driver, so it should not
grow with the rows; Spark's JVM is another process). Randomness: a fixed seed (both engines then
publish the same table).

Usage: ``python benchmarks/bench_spark.py [--rows 100000] [--repeat 2]``. Needs PySpark and Java;
sets ``PYSPARK_PYTHON`` to this interpreter. Writes ``benchmarks/results/spark.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _timing import groupby_baselines, interleaved_times, write_workload  # noqa: I001  (a sibling module: benchmarks run as scripts)

HERE = Path(__file__).resolve().parent
BY = ["county", "naics2"]
UNITS = {"row": None, "firm": "firm_id"}


def _hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _variants(spark: Any, path: str, out_dir: str) -> dict[str, Callable[[], None]]:
    import polars as pl

    import tabdp
    from tabdp import mechanisms as mech

    kf = pl.scan_parquet(path).select(BY).unique().collect()
    keys = tabdp.KeySet.from_dict(county=sorted(kf["county"].unique().to_list()),
                                  naics2=sorted(kf["naics2"].unique().to_list()))
    m = mech.Gaussian(sigma=1e4)

    def tabdp_run(engine: str, unit: str | None, tag: str) -> Callable[[], None]:
        def run() -> None:
            s = tabdp.Session(unit=unit, seed=1)
            frame = pl.scan_parquet(path) if engine == "polars" else spark.read.parquet(path)
            frame.dp.sum(["payroll", "employment"], by=BY, keys=keys, mechanism=m, session=s)
            frame.dp.count(by=BY, keys=keys, session=s)
            pr = s.report().per_record
            target = f"{out_dir}/per_record_{tag}.parquet"
            if engine == "polars":
                pr.write_parquet(target)
            else:
                pr.write.mode("overwrite").parquet(target)
        return run

    out: dict[str, Callable[[], None]] = groupby_baselines(spark, path, BY)
    for u, col in UNITS.items():
        out[f"polars_tabdp_{u}"] = tabdp_run("polars", col, f"polars_{u}")
        out[f"spark_tabdp_{u}"] = tabdp_run("spark", col, f"spark_{u}")
    return out


def _spark_session() -> Any:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("tabdp-bench")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _one(variant: str, path: str) -> None:
    spark = _spark_session()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            fn = _variants(spark, path, tmp)[variant]
            before = _hwm_mb()
            fn()
            print(json.dumps({"start_rss_mb": before, "peak_rss_mb": _hwm_mb()}))
    finally:
        spark.stop()


def main() -> None:
    """Run the benchmark and print a table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[100_000])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.variant:  # one release in a fresh process: the driver's peak memory
        _one(args.variant, args.path)
        return
    spark = _spark_session()
    results = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for n in args.rows:
                path = write_workload(Path(tmp) / f"estab_{n}.parquet", n)
                fns = _variants(spark, path, tmp)
                times = interleaved_times(fns, args.repeat)
                cmd = [sys.executable, __file__, "--variant", "spark_tabdp_row", "--path", path]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True)
                mem = json.loads(out.stdout.strip().splitlines()[-1])
                row: dict[str, Any] = {"rows": n, "spark_driver_python_rss_mb": mem}
                for k, ts in times.items():
                    row[k] = {"median_s": statistics.median(ts), "min_s": min(ts)}
                results.append(row)
    finally:
        spark.stop()
    meta = {"python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0], "spark_master": "local[2]",
            "workload": "count + sum(payroll, employment) by county x naics2 from Parquet, "
                        "per-record report written; seeded"}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "spark.json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=2))
    print("| rows | variant | median (s) | vs its engine's group-by |")
    print("|---:|---|---:|---:|")
    for r in results:
        for k in r:
            if k in ("rows", "spark_driver_python_rss_mb"):
                continue
            base = r["polars_groupby" if k.startswith("polars") else "spark_groupby"]
            print(f"| {r['rows']:,} | {k} | {r[k]['median_s']:.2f} | "
                  f"{r[k]['median_s'] / base['median_s']:.1f}x |")
    for r in results:
        m = r["spark_driver_python_rss_mb"]
        print(f"{r['rows']:,} rows: Spark release, driver (Python) peak RSS "
              f"{m['peak_rss_mb']:.0f} MB (at start {m['start_rss_mb']:.0f} MB)")
    print(f"load average at the end: {meta['load_avg_1m']:.1f} on {meta['cpus']} cpus")


if __name__ == "__main__":
    main()
