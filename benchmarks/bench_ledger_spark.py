"""Profile: what a lifetime ledger costs a Spark release, phase by phase (issue 31, "Engines").

The release of ``bench_ledger.py`` (a sum of payroll and employment and a count by county x
6-digit NAICS, unit mode ``estab_id``, the per-record report written to Spark's ``noop`` sink)
on a Spark DataFrame read from the same Parquet file (``local[2]``, 4 shuffle partitions),
alternately without a ledger and with one holding ``--past`` releases over the same units
(prepared on Polars, a fresh copy each round, committed at the end). Each round prints, per
phase (sum, count, report, commit; open for the ledger), the CPU of the whole process tree
(Python driver, JVM, Python workers) and the largest thread groups (as
``bench_spark_profile.py``); with the ledger, the driver-side ledger functions
(``_lifetime_frame``: the totals sent to Spark; ``_lifetime_charges``: the admitted units'
charges collected) are timed apart, including the Spark jobs they run.

Usage: ``python benchmarks/bench_ledger_spark.py --rows 300000 --rounds 3``. Round 0 warms the
JVM up: read the later ones. Prints only.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _timing import tree_cpu_s  # noqa: I001  (a sibling module)
from bench_spark_profile import thread_cpu

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tabdp of this checkout

import bench_ledger as bl  # noqa: E402

BY = bl.BY


def _wrap(mod: Any, name: str, acc: collections.Counter[str]) -> None:
    """Add the tree CPU of each outermost call of ``mod.name`` to ``acc[name]``."""
    orig = getattr(mod, name)
    depth = [0]

    def wrapper(*a: Any, **k: Any) -> Any:
        depth[0] += 1
        c0 = tree_cpu_s()
        try:
            return orig(*a, **k)
        finally:
            depth[0] -= 1
            if not depth[0]:
                acc[name] += tree_cpu_s() - c0

    setattr(mod, name, wrapper)


def main() -> None:
    """Run the rounds and print each phase's tree CPU, alone and with the ledger."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--past", type=int, default=2)
    ap.add_argument("--lifetime-budget", type=float, default=1000.0)
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--only-ledger", action="store_true", help="skip the release alone")
    ap.add_argument(
        "--ab",
        action="store_true",
        help="also the ledger with the Python-worker filter of before h96 (ledger_workers)",
    )
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import polars as pl
    from pyspark.sql import SparkSession

    import tabdp
    from tabdp import mechanisms as mech
    from tabdp.datasets.synth import public_domains
    from tabdp.frame import _spark as tspark

    tmp = Path(args.tmp or tempfile.mkdtemp(prefix="bench_ledger_spark_"))
    tmp.mkdir(parents=True, exist_ok=True)
    data = tmp / f"estab_{args.rows}.parquet"
    df = bl._setup(args.rows, data)
    base = tmp / f"ledger_{args.rows}_{args.past}"
    bl._prepare(df, base, args.past, args.lifetime_budget)
    work = tmp / "work_ledger"
    doms = public_domains(n_states=50, counties_per_state=63)
    keys = tabdp.KeySet.from_dict(county=doms["county"], naics6=doms["naics6"])
    del df
    pl.DataFrame()  # keep the import used

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("tabdp-bench-ledger-spark")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    fns: collections.Counter[str] = collections.Counter()
    for name in ("_lifetime_frame", "_lifetime_charges", "_decide", "_with_lifetime"):
        _wrap(tspark, name, fns)
    results: dict[str, list[dict[str, float]]] = {"alone": [], "ledger": [], "ledger_workers": []}
    const_col = tspark._constant_admits_col
    loads = [os.getloadavg()]

    def release(ledger: Any) -> dict[str, float]:
        marks: list[tuple[str, float, float, collections.Counter[str]]] = []

        def mark(name: str) -> None:
            marks.append((name, time.perf_counter(), tree_cpu_s(), thread_cpu()))

        fns.clear()
        mark("start")
        led = None
        if ledger:
            bl._copy_ledger(base, work)
            mark("copy")
            led = tabdp.Ledger.open(
                work, series="bench", lifetime_budget=args.lifetime_budget, autocommit=False
            )
            mark("open")
        s = tabdp.Session(unit="estab_id", seed=1, ledger=led)
        sdf = spark.read.parquet(str(data))
        sdf.dp.sum(
            ["payroll", "employment"],
            by=BY,
            keys=keys,
            mechanism=mech.LogTransform(sigma=0.5, offset=1000.0),
            session=s,
        )
        mark("sum")
        sdf.dp.count(by=BY, keys=keys, mechanism=mech.Gaussian(sigma=2.0), session=s)
        mark("count")
        s.report().per_record.write.format("noop").mode("overwrite").save()
        mark("report")
        if led is not None:
            s.commit_ledger(label="bench")
            led.close()
            mark("commit")
        out: dict[str, float] = {}
        for (_, t0, c0, th0), (name, t1, c1, th1) in zip(marks, marks[1:], strict=False):
            if name == "copy":
                continue
            out[name] = c1 - c0
            out[name + "_wall"] = t1 - t0
            groups = {g: th1[g] - th0.get(g, 0.0) for g in th1}
            top = sorted(((v, g) for g, v in groups.items() if v >= 0.1), reverse=True)[:6]
            print(
                f"  {name:8s} wall {t1 - t0:7.2f} s  CPU {c1 - c0:7.2f} s   "
                + ", ".join(f"{g} {v:.2f}" for v, g in top),
                flush=True,
            )
        out["total"] = sum(v for k, v in out.items() if not k.endswith("_wall"))
        for k, v in fns.items():
            out["fn:" + k] = v
        rounded = {k: round(v, 2) for k, v in fns.items()}
        print(f"  total CPU {out['total']:.2f} s; functions: {rounded}", flush=True)
        return out

    for r in range(args.rounds):
        variants = ("ledger",) if args.only_ledger else ("alone", "ledger")
        if args.ab:
            variants = (*variants, "ledger_workers")
        for variant in variants:
            print(f"round {r} {variant} (load {os.getloadavg()[0]:.1f})", flush=True)
            # before h96: every filter through the Python workers (the code path kept for
            # curve budgets), its decisions joined back to the units
            tspark._constant_admits_col = (
                (lambda *a: None) if variant == "ledger_workers" else const_col
            )
            res = release(variant != "alone")
            if r:
                results[variant].append(res)
    loads.append(os.getloadavg())
    spark.stop()
    print(
        f"units {args.rows:,}, unit mode, {args.past} past releases, local[2]; load at start "
        f"{loads[0]}, at end {loads[1]}"
    )
    for variant, rs in results.items():
        if not rs:
            continue
        keys_ = [k for k in rs[0] if not k.endswith("_wall")]
        print(
            variant
            + ": "
            + ", ".join(f"{k} {statistics.median(x.get(k, 0.0) for x in rs):.2f}" for k in keys_)
        )
    for v in ("ledger", "ledger_workers"):
        if not (results["alone"] and results[v]):
            continue
        extra = [
            b["total"] - (b.get("open", 0.0) + b.get("commit", 0.0)) - a["total"]
            for a, b in zip(results["alone"], results[v], strict=False)
        ]
        ratio = [
            (b["total"] - a["total"]) / a["total"]
            for a, b in zip(results["alone"], results[v], strict=False)
        ]
        print(v, "extra CPU outside open/commit per round:", [round(x, 2) for x in extra])
        print(v, "(with - alone) / alone per round:", [round(x, 3) for x in ratio])


if __name__ == "__main__":
    main()
