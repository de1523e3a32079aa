"""Benchmark: tabdp against the floor of the job itself, in every privacy-unit mode (issue 29).

The floor is a hand-written plain-Polars program that does the work any per-record release of
this workload must do, and nothing more:

* the same public cells: a count and sums of employment and payroll by county x NAICS sector,
  joined onto the public key set (50 states x 63 counties x 19 sectors: 59,850 keys);
* the same per-record report, written to Parquet with the same codec as tabdp's report
  (zstd level 1) and the same columns (the unit or row id, ``rho``, ``epsilon``, ``size``,
  ``rho_q1_sum``, ``rho_q2_count``); each loss is a vectorized transcendental expression of the
  same shape as the mechanism's policy (``(log(1 + |x|) ** 4) / 2`` per summed measure, a
  quadratic in the row count for the count);
* in unit mode, the (unit, cell) group-by that a unit's loss needs and the per-unit sum.

Sums are Polars' float sums (tabdp's cell totals are exact 128-bit sums: that difference is
part of what the ratio measures). The modes:

* ``row``: each row a unit. tabdp: ``Session(unit=None)`` streaming (``row_stream``) and in
  memory (``row_memory``); the floor: two streaming passes (cells, then the report sunk to
  Parquet).
* ``id``: an id unique per row (``Session(unit="estab_id")``), against the unit-mode floor.
* ``firm``: firms of several establishments (``Session(unit="firm_id")``), the unit-mode floor.

tabdp runs with the default secure randomness and writes its report. Every variant runs in the
same process, interleaved, medians of ``--repeat`` rounds after a warm-up (machine load hits all
alike); peak memory is measured once more per variant in a fresh subprocess (VmHWM).

**Spark** (``--engine spark``, ``local[2]``): the same workload on a Spark DataFrame read from
the same Parquet file. The floor is the hand-written plain-PySpark program of the same job:
the cells by one ``groupBy`` (unit mode: the (unit, cell) ``groupBy``, persisted, then the cells
and the per-unit sums from it), joined onto the public keys and collected to the driver; the
report's losses are the same transcendental expression as Spark SQL (`_spark_loss`), written by
Spark's Parquet writer (zstd, one file per partition; row ids by
``monotonically_increasing_id``). tabdp runs the same release on the Spark DataFrame and writes
its report by Spark (one file, sorted by id). Variants ``row``, ``id``, ``firm`` (no streaming
flag on Spark). CPU is that of the whole process tree (the Python driver, the JVM, its Python
workers; `_timing.tree_cpu_s`); no memory subprocess.

Usage: ``python benchmarks/bench_floor.py [--rows 1000000 10000000] [--repeat 3]``
(``--engine spark``: needs PySpark and Java; sets ``PYSPARK_PYTHON`` to this interpreter).
Writes ``benchmarks/results/floor.json`` (``floor_spark.json``) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _timing import interleaved_times, tree_cpu_s, write_workload  # noqa: I001  (a sibling module: benchmarks run as scripts)

HERE = Path(__file__).resolve().parent
BY = ["county", "naics2"]
MEASURES = ["payroll", "employment"]
#: tabdp variant -> (privacy unit column, streaming session, its floor variant)
TABDP = {"row_stream": (None, True, "floor_row"), "row_memory": (None, False, "floor_row"),
         "id": ("estab_id", False, "floor_id"), "firm": ("firm_id", False, "floor_firm")}
FLOORS = {"floor_row": None, "floor_id": "estab_id", "floor_firm": "firm_id"}
PARQUET = {"compression": "zstd", "compression_level": 1}
#: Spark: tabdp variant -> (privacy unit column, its floor variant)
SPARK_TABDP = {"row": (None, "floor_row"), "id": ("estab_id", "floor_id"),
               "firm": ("firm_id", "floor_firm")}


def _hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _key_frame(path: str) -> Any:
    import polars as pl

    kf = pl.scan_parquet(path).select(BY).unique().collect()
    counties = sorted(kf["county"].unique().to_list())
    sectors = sorted(kf["naics2"].unique().to_list())
    return counties, sectors


def _loss(col: Any) -> Any:
    """A transcendental per-record loss of the shape of ExpPolyLog's policy."""
    return (col.abs().log1p() ** 4) * 0.5


def _spark_loss(col: Any) -> Any:
    """`_loss` as a Spark SQL expression."""
    from pyspark.sql import functions as F

    return F.pow(F.log1p(F.abs(col)), 4) * 0.5


def _spark_floor(spark: Any, unit: str | None, path: str, out: str,
                 keys: Any) -> Callable[[], None]:
    """The plain-PySpark program of the job (see the module docstring); ``keys``: Spark keys."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    report = f"{out}/spark_floor_{unit or 'row'}.parquet"
    sums = [F.sum(m).alias(m) for m in MEASURES]
    size = F.greatest(*[F.abs(F.col(m)).cast("double") for m in MEASURES], F.lit(1.0))
    q1 = sum((_spark_loss(F.col(m)) for m in MEASURES), F.lit(0.0))

    def write(frame: Any) -> None:
        frame.write.mode("overwrite").option("compression", "zstd").parquet(report)

    def row() -> None:
        sdf = spark.read.parquet(path)
        keys.join(sdf.groupBy(*BY).agg(F.count(F.lit(1)).alias("n"), *sums), on=BY,
                  how="left").collect()
        q2 = F.lit(0.125)
        write(sdf.select(F.monotonically_increasing_id().alias("row"),
                         (q1 + q2).alias("rho"), F.sqrt(q1 + q2).alias("epsilon"),
                         size.alias("size"), q1.alias("rho_q1_sum"), q2.alias("rho_q2_count")))

    def units() -> None:
        assert unit is not None
        contrib = (spark.read.parquet(path).groupBy(unit, *BY)
                   .agg(F.count(F.lit(1)).alias("n"), *sums)
                   .persist(StorageLevel.MEMORY_AND_DISK))
        try:
            cells = contrib.groupBy(*BY).agg(F.sum("n").alias("n"), *sums)
            keys.join(cells, on=BY, how="left").collect()
            n = F.col("n").cast("double")
            per = contrib.groupBy(unit).agg(F.sum(q1).alias("rho_q1_sum"),
                                            F.sum(n * n * 0.125).alias("rho_q2_count"),
                                            F.max(size).alias("size"))
            rho = F.col("rho_q1_sum") + F.col("rho_q2_count")
            write(per.select(unit, rho.alias("rho"), F.sqrt(rho).alias("epsilon"), "size",
                             "rho_q1_sum", "rho_q2_count"))
        finally:
            contrib.unpersist()

    return row if unit is None else units


def _spark_runner(spark: Any, kind: str, path: str, out: str) -> Callable[[], None]:
    """A Spark variant: a floor (``floor_*``) or the tabdp release of a mode (`SPARK_TABDP`)."""
    import tabdp
    from tabdp import mechanisms as mech

    counties, sectors = _key_frame(path)
    if kind in FLOORS:
        import itertools

        import pandas as pd

        pairs = pd.DataFrame(list(itertools.product(counties, sectors)), columns=BY)
        keys = spark.createDataFrame(pairs).persist()
        keys.count()  # the public keys, built once (as the Polars floor's)
        return _spark_floor(spark, FLOORS[kind], path, out, keys)
    unit = SPARK_TABDP[kind][0]
    keyset = tabdp.KeySet.from_dict(county=counties, naics2=sectors)
    m = mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0)

    def release() -> None:
        s = tabdp.Session(unit=unit)
        sdf = spark.read.parquet(path)
        sdf.dp.sum(MEASURES, by=BY, keys=keyset, mechanism=m, session=s)
        sdf.dp.count(by=BY, keys=keyset, session=s)
        s.report().write_per_record(f"{out}/spark_per_record_{kind}.parquet")

    return release


def spark_session() -> Any:
    """The benchmarks' local Spark session (``local[2]``, as `bench_spark` and `bench_tumult`)."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("tabdp-bench-floor")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _floor(unit: str | None, path: str, out: str, keys: Any,
           engine: str = "auto") -> Callable[[], None]:
    import polars as pl

    report = f"{out}/floor_{unit or 'row'}.parquet"
    cnt = pl.col("n").cast(pl.Float64)

    def row() -> None:
        lf = pl.scan_parquet(path)
        cells = (lf.group_by(BY).agg(pl.len().alias("n"), *[pl.col(m).sum() for m in MEASURES])
                 .collect(engine=engine))
        keys.join(cells, on=BY, how="left")
        q1 = sum((_loss(pl.col(m)) for m in MEASURES), pl.lit(0.0))
        q2 = pl.lit(0.125)
        (lf.with_row_index("row")
         .select(pl.col("row").cast(pl.Int64), (q1 + q2).alias("rho"),
                 (q1 + q2).sqrt().alias("epsilon"),
                 pl.max_horizontal(*[pl.col(m).abs().cast(pl.Float64) for m in MEASURES],
                                   pl.lit(1.0)).alias("size"),
                 q1.alias("rho_q1_sum"), q2.alias("rho_q2_count"))
         .sink_parquet(report, **PARQUET))

    def units() -> None:
        assert unit is not None
        contrib = (pl.scan_parquet(path).group_by([unit, *BY])
                   .agg(pl.len().alias("n"), *[pl.col(m).sum() for m in MEASURES])
                   .collect(engine=engine))
        cells = contrib.group_by(BY).agg(pl.col("n").sum(), *[pl.col(m).sum() for m in MEASURES])
        keys.join(cells, on=BY, how="left")
        q1 = sum((_loss(pl.col(m)) for m in MEASURES), pl.lit(0.0))
        q2 = cnt * cnt * 0.125
        (contrib.lazy()
         .group_by(unit)
         .agg(q1.sum().alias("rho_q1_sum"), q2.sum().alias("rho_q2_count"),
              pl.max_horizontal(*[pl.col(m).abs().cast(pl.Float64) for m in MEASURES],
                                pl.lit(1.0)).max().alias("size"))
         .select(unit, (pl.col("rho_q1_sum") + pl.col("rho_q2_count")).alias("rho"),
                 (pl.col("rho_q1_sum") + pl.col("rho_q2_count")).sqrt().alias("epsilon"),
                 "size", "rho_q1_sum", "rho_q2_count")
         .sink_parquet(report, **PARQUET))

    return row if unit is None else units


def _runner(kind: str, path: str, out: str) -> Callable[[], None]:
    import polars as pl

    import tabdp
    from tabdp import mechanisms as mech

    counties, sectors = _key_frame(path)
    if kind in FLOORS:
        keys = pl.DataFrame({"county": counties}).join(pl.DataFrame({"naics2": sectors}),
                                                       how="cross")
        return _floor(FLOORS[kind], path, out, keys)
    unit, streaming, _ = TABDP[kind]
    keyset = tabdp.KeySet.from_dict(county=counties, naics2=sectors)
    m = mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0)

    def release() -> None:
        s = tabdp.Session(unit=unit, streaming=streaming)
        lf = pl.scan_parquet(path)
        lf.dp.sum(MEASURES, by=BY, keys=keyset, mechanism=m, session=s)
        lf.dp.count(by=BY, keys=keyset, session=s)
        s.report().write_per_record(f"{out}/per_record_{kind}.parquet")

    return release


def _memory(kind: str, path: str, out: str) -> dict[str, float]:
    fn = _runner(kind, path, out)
    before = _hwm_mb()
    fn()
    return {"peak_rss_mb": _hwm_mb(), "start_rss_mb": before}


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _cpu_timed(fn: Callable[[], None], into: list[float],
               clock: Callable[[], float] = _cpu_s) -> Callable[[], None]:
    """``fn``, appending the CPU seconds (``clock``) of each call to ``into``."""
    def run() -> None:
        t = clock()
        fn()
        into.append(clock() - t)

    return run


def main() -> None:
    """Run the benchmark and print a table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--engine", choices=["polars", "spark"], default="polars")
    ap.add_argument("--variants", nargs="+",
                    help="variants to run (default: every floor and every tabdp mode; Spark: "
                         "floor_row row floor_firm firm)")
    ap.add_argument("--no-memory", action="store_true", help="skip the subprocess RSS runs")
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        _serve(args.path, args.out)
        return
    if args.variant:
        print(json.dumps(_memory(args.variant, args.path, args.out)))
        return

    if args.engine == "spark":
        _main_spark(args)
        return
    variants = args.variants or [*FLOORS, *TABDP]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.rows:
            path = write_workload(Path(tmp) / f"estab_{n}.parquet", n)
            fns = {k: _runner(k, path, tmp) for k in variants}
            cpu: dict[str, list[float]] = {k: [] for k in fns}
            times = interleaved_times({k: _cpu_timed(f, cpu[k]) for k, f in fns.items()},
                                      args.repeat)
            row: dict[str, Any] = {"rows": n, "randomness": "secure",
                                   "load_avg": os.getloadavg()}
            for k in fns:
                row[k] = {"median_s": statistics.median(times[k]), "min_s": min(times[k]),
                          "times_s": times[k],
                          # process CPU seconds (every thread): steadier than wall time on a
                          # loaded machine; the first value is the warm-up round's
                          "cpu_median_s": statistics.median(cpu[k][1:]), "cpu_s": cpu[k][1:]}
                if not args.no_memory:
                    cmd = [sys.executable, __file__, "--variant", k, "--path", path,
                           "--out", tmp]
                    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
                    row[k].update(json.loads(res.stdout.strip().splitlines()[-1]))
            for k in TABDP:
                floor = TABDP[k][2]
                if k in row and floor in row:
                    row[k]["time_ratio"] = row[k]["median_s"] / row[floor]["median_s"]
                    row[k]["cpu_ratio"] = row[k]["cpu_median_s"] / row[floor]["cpu_median_s"]
                    if "peak_rss_mb" in row[k]:
                        row[k]["peak_rss_ratio"] = (row[k]["peak_rss_mb"]
                                                    / row[floor]["peak_rss_mb"])
            results.append(row)
    meta = {"python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "workload": "count + sum(payroll, employment) by county x naics2 (59,850 keys) from "
                        "Parquet, per-record report written (zstd 1); tabdp with secure "
                        "randomness, ExpPolyLog(sigma=1, a=1, d=4) sums, default count"}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "floor.json").write_text(json.dumps({"meta": meta, "results": results},
                                                             indent=2))
    print("| rows | mode | floor (s) | tabdp (s) | time ratio | CPU ratio | "
          "peak RSS floor / tabdp (MB) |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for r in results:
        for k, (_, _, floor) in TABDP.items():
            if k not in r or floor not in r:
                continue
            f, t = r[floor], r[k]
            mem = (f"{f['peak_rss_mb']:.0f} / {t['peak_rss_mb']:.0f}" if "peak_rss_mb" in t
                   else "-")
            print(f"| {r['rows']:,} | {k} | {f['median_s']:.3f} | {t['median_s']:.3f} | "
                  f"{t['time_ratio']:.2f}x | {t['cpu_ratio']:.2f}x | {mem} |")


def _serve(path: str, out: str) -> None:
    """Spark variants on request, for `bench_tumult` (whose environment cannot import tabdp).

    Reads variant names from stdin, one a line; runs each in one Spark session and answers one
    JSON line: wall seconds and the CPU seconds of this process tree (`tree_cpu_s`).
    """
    import time

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = spark_session()
    fns: dict[str, Callable[[], None]] = {}
    try:
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            kind = line.strip()
            if kind not in fns:
                fns[kind] = _spark_runner(spark, kind, path, out)
            c, t = tree_cpu_s(), time.perf_counter()
            fns[kind]()
            print(json.dumps({"wall_s": time.perf_counter() - t, "cpu_s": tree_cpu_s() - c}),
                  flush=True)
    finally:
        spark.stop()


def _main_spark(args: argparse.Namespace) -> None:
    """``--engine spark``: the Spark floors and tabdp on Spark, interleaved in one session."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    variants = args.variants or ["floor_row", "row", "floor_firm", "firm"]
    spark = spark_session()
    results = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for n in args.rows:
                path = write_workload(Path(tmp) / f"estab_{n}.parquet", n)
                fns = {k: _spark_runner(spark, k, path, tmp) for k in variants}
                cpu: dict[str, list[float]] = {k: [] for k in fns}
                load = [os.getloadavg()]
                times = interleaved_times(
                    {k: _cpu_timed(f, cpu[k], tree_cpu_s) for k, f in fns.items()},
                    args.repeat)
                load.append(os.getloadavg())
                row: dict[str, Any] = {"rows": n, "randomness": "secure",
                                       "load_avg_start_end": load}
                for k in fns:
                    row[k] = {"median_s": statistics.median(times[k]), "times_s": times[k],
                              "cpu_median_s": statistics.median(cpu[k][1:]),
                              "cpu_s": cpu[k][1:]}
                for k, (_, floor) in SPARK_TABDP.items():
                    if k in row and floor in row:
                        row[k]["time_ratio"] = row[k]["median_s"] / row[floor]["median_s"]
                        row[k]["cpu_ratio"] = row[k]["cpu_median_s"] / row[floor]["cpu_median_s"]
                results.append(row)
    finally:
        spark.stop()
    import pyspark

    meta = {"python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "pyspark": pyspark.__version__, "spark_master": "local[2]",
            "cpu": "process tree: Python driver + JVM + Python workers (/proc)",
            "workload": "count + sum(payroll, employment) by county x naics2 (59,850 keys) from "
                        "Parquet, per-record report written by Spark (zstd); tabdp with secure "
                        "randomness, ExpPolyLog(sigma=1, a=1, d=4) sums, default count"}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "floor_spark.json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=2))
    print("| rows | mode | Spark floor (s) | tabdp on Spark (s) | time ratio | CPU ratio |")
    print("|---:|---|---:|---:|---:|---:|")
    for r in results:
        for k, (_, floor) in SPARK_TABDP.items():
            if k in r and floor in r:
                f, t = r[floor], r[k]
                print(f"| {r['rows']:,} | {k} | {f['median_s']:.2f} | {t['median_s']:.2f} | "
                      f"{t['time_ratio']:.2f}x | {t['cpu_ratio']:.2f}x |")


if __name__ == "__main__":
    main()
