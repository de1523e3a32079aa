"""Benchmark: Tumult Analytics on the workload of ``bench_spark.py``, against plain group-bys.

Tumult Analytics is the incumbent differential-privacy library on Spark. This script times it on
issue 15's workload (a count and sums of employment and payroll by county x NAICS sector,
59,850 public cells, read from the Parquet file ``_timing.write_workload`` writes; privacy unit:
each row, ``AddOneRow``), alternated round by round with a plain Spark group-by and a plain Polars
group-by in the same process (medians of ``--repeat`` rounds after a warm-up round).

Tumult answers one aggregate per query: the three queries are timed together, session creation
included, each under ``RhoZCDPBudget(1.0)`` (Gaussian noise: discrete for the count and the
integer employment, continuous for payroll). Its sums clamp each value to public bounds
(``EMP_BOUNDS``, ``PAY_BOUNDS``, from the generator's parameters); tabdp does not clamp and
writes a per-record report, which Tumult has no counterpart of. ``--check`` adds an untimed run
with an infinite budget that must reproduce the exact group-by.

Tumult Analytics needs PySpark 3.5 and pandas < 2, so it runs in a virtual environment of its
own, not the project's::

    python3.11 -m venv /tmp/tumult && /tmp/tumult/bin/pip install tmlt.analytics polars
    /tmp/tumult/bin/python benchmarks/bench_tumult.py --rows 1000000 --repeat 2 --check

``--tabdp-python PATH`` adds tabdp's release of the same cells in row mode (the ``row``
variant of ``bench_floor.py --engine spark``: count and sums, per-record report written) to
the same run: PATH is an interpreter with tabdp and PySpark 4 (the project's environment); it
serves tabdp rounds from a subprocess with its own ``local[2]`` session, alternated round by
round with Tumult's. CPU seconds are of each side's process tree (driver, JVM, Python workers).

Writes ``benchmarks/results/tumult_<rows>.json``.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # _timing (a sibling) and tabdp (the checkout)
from _timing import groupby_baselines, interleaved_times, tree_cpu_s, write_workload  # noqa: E402

BY = ["county", "naics2"]
# Clamping bounds (public, from the generator's parameters, not from the data):
# employment: generate_establishments(max_employment=250_000) clips employment to [0, 250_000].
# payroll = employment x lognormal wage (sector medians <= 115,000, sd log 0.4): 250_000 x 400,000.
EMP_BOUNDS = (0, 250_000)
PAY_BOUNDS = (0.0, 1.0e11)
RHO_PER_QUERY = 1.0


def spark_session():
    from pyspark.sql import SparkSession

    # same settings as bench_spark._spark_session
    spark = (SparkSession.builder.master("local[2]").appName("tumult-bench")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def variants(spark, path: str, check: bool):
    import pandas as pd
    import polars as pl
    from tmlt.analytics import AddOneRow, KeySet, QueryBuilder, RhoZCDPBudget, Session

    # public keys: cross product of the county and sector values, as bench_spark builds them
    kf = pl.scan_parquet(path).select(BY).unique().collect()
    counties = sorted(kf["county"].unique().to_list())
    sectors = sorted(kf["naics2"].unique().to_list())
    key_pdf = pd.DataFrame(list(itertools.product(counties, sectors)), columns=BY)
    keys = KeySet.from_dataframe(spark.createDataFrame(key_pdf))
    n_cells = len(key_pdf)
    info = {"n_cells": n_cells, "n_counties": len(counties), "n_sectors": len(sectors)}

    base = groupby_baselines(spark, path, BY)

    def queries():
        g = QueryBuilder("estab").groupby(keys)
        return [g.count(),
                g.sum("employment", low=EMP_BOUNDS[0], high=EMP_BOUNDS[1]),
                g.sum("payroll", low=PAY_BOUNDS[0], high=PAY_BOUNDS[1])]

    def tumult_answers(budget_each):
        total = RhoZCDPBudget(3 * budget_each if budget_each != float("inf") else budget_each)
        t = time.perf_counter()
        sess = Session.from_dataframe(privacy_budget=total, source_id="estab",
                                      dataframe=spark.read.parquet(path),
                                      protected_change=AddOneRow())
        split = {"budget_each": budget_each, "session": time.perf_counter() - t}
        outs = []
        for name, q in zip(["count", "sum_emp", "sum_payroll"], queries(), strict=True):
            t = time.perf_counter()
            outs.append(sess.evaluate(q, RhoZCDPBudget(budget_each)).toPandas())
            split[name] = time.perf_counter() - t
        info.setdefault("tumult_breakdown_s", []).append(split)
        return outs

    def tumult() -> None:
        outs = tumult_answers(RHO_PER_QUERY)
        assert all(len(o) == n_cells for o in outs), [len(o) for o in outs]

    if check:  # untimed: infinite budget must reproduce the exact group-by on the cells present
        ex = (pl.scan_parquet(path).group_by(BY)
              .agg(pl.len().alias("count"), pl.col("employment").sum(),
                   pl.col("payroll").sum()).collect().to_pandas().set_index(BY))
        c, e, p = (o.set_index(BY) for o in tumult_answers(float("inf")))
        idx = ex.index
        info["check_cells_with_data"] = len(ex)
        info["check_count_equal"] = bool((c.loc[idx, "count"].values == ex["count"].values).all())
        info["check_emp_equal"] = bool(
            (e.loc[idx, "employment_sum"].values == ex["employment"].values).all())
        info["check_payroll_max_rel_err"] = float(
            (abs(p.loc[idx, "payroll_sum"].values - ex["payroll"].values)
             / ex["payroll"].abs().clip(lower=1).values).max())
        info["check_total_count_equal"] = bool(c["count"].sum() == ex["count"].sum())
        stats = pl.scan_parquet(path).select(pl.col("employment").min().alias("emp_min"),
                                             pl.col("employment").max().alias("emp_max"),
                                             pl.col("payroll").min().alias("pay_min"),
                                             pl.col("payroll").max().alias("pay_max")).collect()
        info["data_ranges"] = stats.to_dicts()[0]
    return {**base, "tumult": tumult}, info


def _answer(server) -> dict:
    """The next JSON line the tabdp subprocess prints (other lines are skipped)."""
    for line in server.stdout:
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("the tabdp subprocess ended")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--tabdp-python", help="interpreter with tabdp: time tabdp in the same run")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    load_start = os.getloadavg()
    tmp = tempfile.TemporaryDirectory(prefix="tabdp-bench-tumult-")
    path = str(Path(tmp.name) / f"estab_{args.rows}.parquet")
    write_workload(Path(path), args.rows)
    server = None
    cpu: dict[str, list[float]] = {"tumult": [], "tabdp_row": []}
    if args.tabdp_python:
        import subprocess

        env = {**os.environ, "PYSPARK_PYTHON": args.tabdp_python}
        server = subprocess.Popen(
            [args.tabdp_python, str(HERE / "bench_floor.py"), "--engine", "spark", "--serve",
             "--path", path, "--out", tmp.name],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert _answer(server)["ready"]
    spark = spark_session()
    try:
        t0 = time.perf_counter()
        fns, info = variants(spark, path, args.check)
        tumult_fn = fns["tumult"]

        def tumult_timed() -> None:
            c = tree_cpu_s() - (tree_cpu_s(server.pid) if server else 0.0)
            tumult_fn()
            c2 = tree_cpu_s() - (tree_cpu_s(server.pid) if server else 0.0)
            cpu["tumult"].append(c2 - c)

        fns["tumult"] = tumult_timed
        if server is not None:
            def tabdp_row() -> None:
                server.stdin.write("row\n")
                server.stdin.flush()
                cpu["tabdp_row"].append(_answer(server)["cpu_s"])

            fns["tabdp_row"] = tabdp_row
        times = interleaved_times(fns, args.repeat)
        wall = time.perf_counter() - t0
    finally:
        spark.stop()
        if server is not None:
            server.stdin.close()
            server.wait()
    med = {k: statistics.median(v) for k, v in times.items()}
    import importlib.metadata as md
    res = {
        "rows": args.rows, "repeat": args.repeat,
        "median_s": med, "times_s": times,
        "ratio_tumult_vs_spark_groupby": med["tumult"] / med["spark_groupby"],
        "ratio_tumult_vs_polars_groupby": med["tumult"] / med["polars_groupby"],
        "info": info, "wall_s": wall,
        "cpu_s": {k: v[1:] for k, v in cpu.items() if v},  # the first is the warm-up's
        "cpu_median_s": {k: statistics.median(v[1:]) for k, v in cpu.items() if len(v) > 1},
        "bounds": {"employment": EMP_BOUNDS, "payroll": PAY_BOUNDS},
        "budget": f"RhoZCDPBudget({RHO_PER_QUERY}) per query, 3 queries",
        "versions": {p: md.version(p) for p in
                     ["tmlt.analytics", "tmlt.core", "pyspark", "pandas", "numpy", "polars",
                      "pyarrow"]} | {"python": platform.python_version()},
        "load_avg_start": load_start, "load_avg_end": os.getloadavg(),
    }
    if "tabdp_row" in med:
        res["ratio_tumult_vs_tabdp_row"] = med["tumult"] / med["tabdp_row"]
        if len(cpu["tabdp_row"]) > 1:
            res["cpu_ratio_tumult_vs_tabdp_row"] = (res["cpu_median_s"]["tumult"]
                                                    / res["cpu_median_s"]["tabdp_row"])
    out = json.dumps(res, indent=2)
    print(out)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / f"tumult_{args.rows}.json").write_text(out)
    tmp.cleanup()


if __name__ == "__main__":
    main()
