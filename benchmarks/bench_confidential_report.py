"""Benchmark: peak memory of the confidential report from a scan of the per-record Parquet files.

Workload: a per-record report of ``--files`` Parquet files of 2,000,000 rows each (columns
``estab_id``, ``rho`` (lognormal, some zeros), ``epsilon``, ``size`` (lognormal), ``rho_q1``)
and a budget curve. Each measurement runs in a fresh subprocess and reports the growth of the
peak resident set (``ru_maxrss``) over the process after imports:

* ``report``: ``render_confidential_html`` with ``per_record=pl.scan_parquet(...)`` (the
  streaming path: exact counts, maxima, quantiles and histogram, a systematic scatter sample);
* ``group-by``: a plain Polars streaming group-by of the same files (the baseline of issue 14).

Usage: ``python benchmarks/bench_confidential_report.py [--files 1 10 30]``. The report's
growth should stay flat as the number of rows grows, near the group-by's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROWS_PER_FILE = 2_000_000

_GEN = f"""
import sys, numpy as np, polars as pl
out, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
n = {ROWS_PER_FILE}
for f in range(first, last):
    rng = np.random.default_rng(f)
    rho = rng.lognormal(size=n)
    rho[:1000] = 0.0
    pl.DataFrame({{"estab_id": np.arange(f * n, (f + 1) * n), "rho": rho,
                  "epsilon": rng.random(n), "size": rng.lognormal(3, 2, size=n),
                  "rho_q1": rho / 2}}).write_parquet(f"{{out}}/part{{f:04d}}.parquet")
"""

_RUN = """
import resource, sys, time
import polars as pl
from tabdp.report.html import render_confidential_html
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
lf = pl.scan_parquet(sys.argv[1] + "/*.parquet")
if sys.argv[2] == "report":
    render_confidential_html({"release": {"name": "bench"}, "unit": "estab_id",
                              "per_record": lf,
                              "budget": {"kind": "curve", "points": [[1.0, 0.5], [1e4, 20.0]]}})
else:
    (lf.group_by(pl.col("estab_id") % 1000).agg(pl.col("rho").sum(), pl.col("size").max())
     .collect(engine="streaming"))
grow = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
print(f"{grow:.0f} {time.perf_counter() - t:.1f}")
"""


def main() -> None:
    """Write the files, measure both variants at each size, print a Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--files", type=int, nargs="+", default=[1, 10, 30])
    args = ap.parse_args()
    root = str(Path(__file__).resolve().parents[1])
    print("| rows | report: peak growth (MB) | s | group-by: peak growth (MB) | s |")
    print("|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        have = 0
        for files in sorted(args.files):
            subprocess.run([sys.executable, "-c", _GEN, tmp, str(have), str(files)], check=True)
            have = max(have, files)
            row = [f"{files * ROWS_PER_FILE:,}"]
            for variant in ("report", "group-by"):
                out = subprocess.run([sys.executable, "-c", _RUN, tmp, variant], check=True,
                                     capture_output=True, text=True, cwd=root,
                                     env={**os.environ, "PYTHONPATH": root}).stdout.split()
                row += out
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
