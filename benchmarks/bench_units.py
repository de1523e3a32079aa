"""Benchmark: the three privacy-unit modes against a plain Polars group-by (issue 14's workload).

Workload: a count and sums of employment and payroll by county x NAICS sector (50 states x 63
counties x 19 sectors: 59,850 public cells), read from Parquet, with the confidential per-record
report written to Parquet. The privacy unit is

* ``row``: each row (``Session(unit=None)``: row ids assigned when the input is read);
* ``id``: an id unique per row (``Session(unit="estab_id")``: the privacy model of row mode,
  computed by the unit path);
* ``firm``: firms of several establishments (``Session(unit="firm_id")``).

The baseline is ``pl.scan_parquet(...).group_by(county, naics2).agg(sum, sum, len).collect()``
in the same process, alternated with the tabdp run (medians of ``--repeat`` rounds after a
warm-up), so machine load hits both. Randomness: the default secure source (``--seeded`` uses a
fixed seed). Peak memory: each variant once more in a fresh subprocess (VmHWM).

Usage: ``python benchmarks/bench_units.py [--rows 1000000] [--repeat 3] [--seeded]``.
Writes ``benchmarks/results/units.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _timing import interleaved_times, write_workload  # noqa: I001  (a sibling module: benchmarks run as scripts)

HERE = Path(__file__).resolve().parent
BY = ["county", "naics2"]
MODES = {"row": None, "stream": None, "id": "estab_id", "firm": "firm_id"}


def _hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _runner(kind: str, path: str, out_dir: str, seeded: bool) -> Any:
    import polars as pl

    import tabdp
    from tabdp import mechanisms as mech

    def baseline() -> None:
        (pl.scan_parquet(path).group_by(BY)
         .agg(pl.col("payroll").sum(), pl.col("employment").sum(), pl.len()).collect())

    if kind == "baseline":
        return baseline
    keys_frame = pl.scan_parquet(path).select(BY).unique().collect()
    counties = sorted(keys_frame["county"].unique().to_list())
    sectors = sorted(keys_frame["naics2"].unique().to_list())
    keys = tabdp.KeySet.from_dict(county=counties, naics2=sectors)
    m = mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0)

    def release() -> None:
        s = tabdp.Session(unit=MODES[kind], seed=1 if seeded else None,
                          streaming=kind == "stream")
        lf = pl.scan_parquet(path)
        lf.dp.sum(["payroll", "employment"], by=BY, keys=keys, mechanism=m, session=s)
        lf.dp.count(by=BY, keys=keys, session=s)
        s.report().write_per_record(f"{out_dir}/per_record_{kind}.parquet")

    return release


def _memory(kind: str, path: str, out_dir: str, seeded: bool) -> dict[str, float]:
    fn = _runner(kind, path, out_dir, seeded)
    before = _hwm_mb()
    fn()
    return {"peak_rss_mb": _hwm_mb(), "start_rss_mb": before}


def main() -> None:
    """Run the benchmark and print a table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seeded", action="store_true")
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(_memory(args.variant, args.path, args.out, args.seeded)))
        return

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.rows:
            path = write_workload(Path(tmp) / f"estab_{n}.parquet", n)
            fns = {k: _runner(k, path, tmp, args.seeded) for k in ("baseline", *MODES)}
            times = interleaved_times(fns, args.repeat)
            row: dict[str, Any] = {"rows": n, "randomness": "seeded" if args.seeded
                                   else "secure"}
            for k in fns:
                cmd = [sys.executable, __file__, "--variant", k, "--path", path, "--out", tmp]
                if args.seeded:
                    cmd.append("--seeded")
                out = subprocess.run(cmd, check=True, capture_output=True, text=True)
                row[k] = {"median_s": statistics.median(times[k]), "min_s": min(times[k]),
                          **json.loads(out.stdout.strip().splitlines()[-1])}
            base = row["baseline"]
            for k in MODES:
                row[k]["time_ratio"] = row[k]["median_s"] / base["median_s"]
                row[k]["peak_rss_ratio"] = row[k]["peak_rss_mb"] / base["peak_rss_mb"]
            results.append(row)
    meta = {"python": platform.python_version(), "machine": platform.machine(),
            "cpus": __import__("os").cpu_count(),
            "workload": "count + sum(payroll, employment) by county x naics2 from Parquet, "
                        "per-record report written"}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "units.json").write_text(json.dumps({"meta": meta, "results": results},
                                                             indent=2))
    print("| rows | unit mode | baseline (s) | tabdp (s) | time ratio | peak RSS base / tabdp "
          "(MB) |")
    print("|---:|---|---:|---:|---:|---:|")
    for r in results:
        b = r["baseline"]
        for k in MODES:
            t = r[k]
            print(f"| {r['rows']:,} | {k} | {b['median_s']:.3f} | {t['median_s']:.3f} | "
                  f"{t['time_ratio']:.1f}x | {b['peak_rss_mb']:.0f} / {t['peak_rss_mb']:.0f} |")


if __name__ == "__main__":
    main()
