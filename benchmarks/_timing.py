"""Shared by the benchmarks: timing rounds, the workload file, plain group-by baselines."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def interleaved_times(fns: Mapping[str, Callable[[], object]],
                      repeat: int) -> dict[str, list[float]]:
    """Run every variant once per round, alternating, after one warm-up round.

    Machine load that drifts during a run hits every variant alike, so ratios of their medians
    are meaningful on a shared machine.

    Args:
        fns: Variant name → callable.
        repeat: Timed rounds (after the warm-up round).

    Returns:
        Variant name → seconds of each timed round.
    """
    times: dict[str, list[float]] = {k: [] for k in fns}
    for i in range(repeat + 1):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            if i:  # round 0 warms up (tables, caches, page faults)
                times[k].append(time.perf_counter() - t)
    return times


def write_workload(path: Path, n: int) -> str:
    """Write the issue-14 workload: ``n`` synthetic establishments, 50 states × 63 counties.

    Args:
        path: Parquet file to write.
        n: Rows (establishments).

    Returns:
        The path as a string.
    """
    from tabdp.datasets.synth import generate_establishments

    generate_establishments(n, seed=20261126, n_states=50,
                            counties_per_state=63).write_parquet(path)
    return str(path)


def groupby_baselines(spark: Any, path: str, by: list[str]) -> dict[str, Callable[[], None]]:
    """Plain Polars and Spark group-bys of the workload: sums of payroll and employment, a count.

    Args:
        spark: A SparkSession.
        path: The workload's Parquet file.
        by: Group-by columns.

    Returns:
        ``{"polars_groupby": fn, "spark_groupby": fn}``; each collects its result.
    """
    import polars as pl
    from pyspark.sql import functions as F

    def polars_groupby() -> None:
        (pl.scan_parquet(path).group_by(by)
         .agg(pl.col("payroll").sum(), pl.col("employment").sum(), pl.len()).collect())

    def spark_groupby() -> None:
        (spark.read.parquet(path).groupBy(*by)
         .agg(F.sum("payroll"), F.sum("employment"), F.count(F.lit(1))).collect())

    return {"polars_groupby": polars_groupby, "spark_groupby": spark_groupby}


def process_tree(root: int | None = None) -> tuple[set[int], dict[int, int]]:
    """``root`` (default: this process) and its descendants, and every process's CPU ticks.

    Read from /proc (Linux): the tree's process ids, and user + system ticks of each process
    with its waited-for children.
    """
    import os

    parent: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:  # exited meanwhile
            continue
        f = stat[stat.rindex(")") + 2:].split()  # fields from the state (3rd) on
        parent[int(d)] = int(f[1])
        ticks[int(d)] = int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
    root = os.getpid() if root is None else root
    tree, todo = set(), [root]
    while todo:
        p = todo.pop()
        tree.add(p)
        todo += [c for c, pp in parent.items() if pp == p and c not in tree]
    return tree, ticks


def tree_cpu_s(root: int | None = None) -> float:
    """CPU seconds (user + system) of a process and every descendant, from ``/proc``.

    For Spark in local mode the work runs in the JVM (a child of the Python driver) and in
    Python workers (children of the JVM): this counts the driver, the JVM, the live workers and
    the workers that have exited and been reaped (their parents' ``cutime``/``cstime``).
    Linux only.

    Args:
        root: Process id (default: this process).

    Returns:
        The summed CPU seconds.
    """
    import os

    tick = os.sysconf("SC_CLK_TCK")
    tree, ticks = process_tree(root)
    return sum(ticks.get(p, 0) for p in tree) / tick
