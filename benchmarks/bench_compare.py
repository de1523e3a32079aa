"""Benchmark: ``tabdp compare`` on the 1M-establishment sample (issue 32's target).

County × NAICS2 payroll with state and national margins: 51 states × 60 counties = 3,060
counties × 19 sectors, plus the state, sector and national margins of the Tau-Argus table
(62,240 cells; two hierarchies). Runs the whole comparison (DP release, Tau-Argus primary and
secondary suppression, the LP audit of every withheld cell, Tau-Argus' own audit and the
check that both agree where it runs, utility and risk, report) and records wall and CPU
times, the Tau-Argus steps (its child process: writing its input files, the batch, the
suppression alone, reading the result) and the machine's load average (the machine may be
shared).

Usage: ``python benchmarks/bench_compare.py [--rows 1000000] [--sdc "p=10; nk=2,85;
secondary=MOD"] [--dir /tmp/tabdp-compare] [--tau-audit auto|on|off]``. Writes
``benchmarks/results/compare.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

SPEC = """
[release]
name = "cbp_1m_compare"
title = "Payroll by county and sector, 1M synthetic establishments"
level = 0.9
delta = 1e-9

[input]
path = "data.parquet"
unit = "estab_id"

[hierarchies.geo]
file = "geography.csv"
levels = ["state", "county"]

[hierarchies.industry]
file = "{naics}"
levels = ["naics2", "naics3", "naics4", "naics6"]

[output]
public = "out/public"
confidential = "out/confidential"

[publication]
cv_flag = 0.3

[[tables]]
name = "county_naics2_payroll"
measures = ["payroll"]
by = ["county", "naics2"]
publication = {{ round = 1000.0 }}
[tables.calibrate]
family = "exp_polylog"
typical_total = 1e7
targets = {{ "2.5e5" = 0.5, "2e10" = 50.0 }}
fixed = {{ p = 1 }}

[[tables.rollups]]
by = ["state", "naics2"]

[[tables.rollups]]
by = ["naics2"]

[[tables.rollups]]
by = []
"""


def _cpu() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--sdc", default="p=10; nk=2,85; secondary=MOD")
    ap.add_argument("--dir", default="/tmp/tabdp-compare")
    ap.add_argument("--tau-audit", choices=["auto", "on", "off"], default="auto",
                    help="Tau-Argus' own audit (auto: tables of at most 5,000 cells only)")
    args = ap.parse_args()

    import tabdp
    from tabdp.compare import compare
    from tabdp.datasets.synth import county_to_state, generate_establishments

    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    generate_establishments(args.rows, seed=2026, n_states=51, counties_per_state=60
                            ).write_parquet(d / "data.parquet")
    county_to_state(n_states=51, counties_per_state=60).write_csv(d / "geography.csv")
    naics = Path(tabdp.__file__).resolve().parents[1] / "data" / "hierarchies" / "naics.csv"
    (d / "spec.toml").write_text(SPEC.format(naics=naics.as_posix()), encoding="utf-8")
    gen = time.perf_counter() - t0
    load0 = os.getloadavg()
    c0, w0 = _cpu(), time.perf_counter()
    tau_audit = {"auto": None, "on": True, "off": False}[args.tau_audit]
    res = compare(d / "spec.toml", args.sdc, overwrite=True, tau_audit=tau_audit,
                  progress=lambda s: print(f"[{time.perf_counter() - w0:7.1f}s] {s}",
                                           flush=True))
    wall, cpu = time.perf_counter() - w0, _cpu() - c0
    load1 = os.getloadavg()
    s = res.summary
    out = {"rows": args.rows, "sdc": args.sdc, "generate_seconds": gen,
           "wall_seconds": wall, "cpu_seconds_incl_children": cpu,
           "load_average_before": load0, "load_average_after": load1,
           "cpus": os.cpu_count(), "python": platform.python_version(),
           "timings_seconds": s["timings_seconds"], "tables": s["tables"],
           "tau_steps_seconds": [t["tau_steps_seconds"] for t in s["tables"]],
           "audit": s["audit"], "tau_audit_check": s["tau_audit_check"],
           "utility": s["utility"], "coverage": s["coverage"],
           "risk_sdc": {k: v for k, v in s["risk"]["sdc"].items() if k != "worst"},
           "risk_dp": s["risk"]["dp"]}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "compare.json").write_text(json.dumps(out, indent=2, default=str)
                                                   + "\n", encoding="utf-8")
    print(json.dumps({k: out[k] for k in ("wall_seconds", "cpu_seconds_incl_children",
                                          "load_average_before", "load_average_after",
                                          "timings_seconds", "tau_steps_seconds")},
                     indent=2))


if __name__ == "__main__":
    main()
