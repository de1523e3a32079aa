"""Profile: where tabdp-on-Spark's CPU goes, phase by phase and JVM thread by thread.

Runs the release of ``bench_floor.py --engine spark`` (the ``row`` variant, or with ``--unit`` the
``firm`` or ``id`` one: a sum of payroll and employment with ExpPolyLog, a count, by county x
sector, 59,850 keys; the per-record report written by Spark) ``--rounds`` times in one
``local[2]`` session and prints, per phase
(the sum, the count, the report), the wall time, the CPU seconds of the whole process tree
(Python driver, JVM, Python workers) and, from ``/proc``, the CPU of the driver's and the JVM's
threads grouped by name: ``Executor task`` (the Spark tasks), ``C# CompilerThre`` (the JIT
compiling Spark's generated classes), ``G# Conc##`` / ``GC Thread##`` (the garbage collector),
``Thread-#`` (Py4J: planning and optimizing on the driver) and ``python`` (the Python driver).
Python workers are counted in the tree's CPU but not in the thread groups. Spark's event log
(``--event-log DIR``) gives each job's wall time and its tasks' CPU.

Usage: ``python benchmarks/bench_spark_profile.py --rows 1000000 --rounds 3``. Needs PySpark and
Java; sets ``PYSPARK_PYTHON`` to this interpreter. Round 0 warms the JVM up: read the later ones.
Prints only; writes nothing under ``benchmarks/results``.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _timing import process_tree, tree_cpu_s, write_workload  # noqa: I001  (a sibling module)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tabdp of this checkout

BY = ["county", "naics2"]
MEASURES = ["payroll", "employment"]


def thread_cpu(root: int | None = None) -> collections.Counter[str]:
    """CPU seconds of the threads of ``root`` and its descendants, grouped by thread name.

    Digits in names are replaced by ``#`` (``C2 CompilerThre`` and ``C1 CompilerThre`` group
    together); each group is prefixed by the first six letters of its process's name.
    """
    tick = os.sysconf("SC_CLK_TCK")
    tree, _ = process_tree(root)
    out: collections.Counter[str] = collections.Counter()
    for pid in tree:
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()[:6]
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for t in tids:
            try:
                st = Path(f"/proc/{pid}/task/{t}/stat").read_text()
            except OSError:
                continue
            name = re.sub(r"[0-9]+", "#", st[st.index("(") + 1 : st.rindex(")")])
            f = st[st.rindex(")") + 2 :].split()
            out[f"{comm}:{name}"] += (int(f[11]) + int(f[12])) / tick
    return out


def main() -> None:
    """Run the rounds and print the phases' wall time, tree CPU and thread groups."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--event-log", help="folder for Spark's event log (job and stage times)")
    ap.add_argument("--unit", default=None,
                    help="privacy unit column (firm_id: firms of several rows; estab_id: an "
                         "id per row); default: each row a unit")
    ap.add_argument(
        "--snapshot-levels",
        nargs="+",
        default=None,
        choices=["default", "serialized", "disk"],
        help="storage levels of the row-mode snapshot, taken in turn round by round (A/B)",
    )
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import polars as pl
    from pyspark.sql import SparkSession

    import tabdp
    from tabdp import mechanisms as mech

    b = (
        SparkSession.builder.master("local[2]")
        .appName("tabdp-bench-spark-profile")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if args.event_log:
        Path(args.event_log).mkdir(parents=True, exist_ok=True)
        b = (
            b.config("spark.eventLog.enabled", "true")
            .config("spark.eventLog.dir", args.event_log)
            .config("spark.eventLog.compress", "false")
        )
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    marks: list[tuple[str, float, float, collections.Counter[str]]] = []

    def mark(name: str) -> None:
        marks.append((name, time.perf_counter(), tree_cpu_s(), thread_cpu()))

    load = [os.getloadavg()]
    with tempfile.TemporaryDirectory() as tmp:
        path = write_workload(Path(tmp) / "estab.parquet", args.rows)
        k = pl.read_parquet(path, columns=BY)
        keys = tabdp.KeySet.from_dict(**{c: sorted(k[c].unique().to_list()) for c in BY})
        m = mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0)
        mark("start")
        from tabdp.frame import _spark as tspark

        for r in range(args.rounds):
            if args.snapshot_levels:
                lv = args.snapshot_levels[r % len(args.snapshot_levels)]
                tspark.SNAPSHOT_LEVEL = None if lv == "default" else lv
                print(f"round {r}: snapshot level {lv}", flush=True)
            s = tabdp.Session(unit=args.unit)
            sdf = spark.read.parquet(path)
            sdf.dp.sum(MEASURES, by=BY, keys=keys, mechanism=m, session=s)
            mark(f"round {r}: sum")
            sdf.dp.count(by=BY, keys=keys, session=s)
            mark(f"round {r}: count")
            s.report().write_per_record(f"{tmp}/per_record_{r}.parquet")
            mark(f"round {r}: report")
            if args.snapshot_levels:
                info = spark.sparkContext._jsc.sc().getRDDStorageInfo()
                print(
                    f"round {r}: held MB, memory "
                    f"{sum(i.memSize() for i in info) / 2**20:.0f}, disk "
                    f"{sum(i.diskSize() for i in info) / 2**20:.0f}",
                    flush=True,
                )
    load.append(os.getloadavg())
    spark.stop()
    print(
        f"rows {args.rows:,}, unit {args.unit or 'each row'}, local[2], "
        f"load average (1, 5, 15 min) at start {load[0]}, "
        f"at end {load[1]}"
    )
    for (_, t0, c0, th0), (name, t1, c1, th1) in zip(marks, marks[1:], strict=False):
        groups: dict[str, Any] = {g: th1[g] - th0.get(g, 0.0) for g in th1}
        top = sorted(((v, g) for g, v in groups.items() if v >= 0.05), reverse=True)[:8]
        print(
            f"{name:16s} wall {t1 - t0:7.2f} s  CPU {c1 - c0:7.2f} s   "
            + ", ".join(f"{g} {v:.2f}" for v, g in top)
        )


if __name__ == "__main__":
    main()
