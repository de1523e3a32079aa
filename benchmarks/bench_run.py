"""Benchmark: a whole ``tabdp run`` of the example spec against the job's floor (issue 29, item 4).

``tabdp run`` of ``examples/cbp_release.toml`` in **row mode** (the spec without ``input.unit``:
four tables and their rollups, a curve budget, δ = 1e-9, the public and confidential HTML
pages), secure randomness, on ``N`` synthetic establishments
(``tabdp.datasets.synth.generate_establishments(N, seed=20261126)``: 10 states × 30 counties,
the domains of the example's hierarchy files), one Parquet file. Its input path, hierarchy files
and output folders are rewritten to a temporary folder; nothing else in the spec changes.

The **floor** is a plain-Polars program that computes the same base tables and writes the same
per-record report, and nothing more:

* the four base tables, each joined onto its public key set (read from the same hierarchy CSV
  files) and written to Parquet: county × NAICS2 payroll, employment and count; state × NAICS6
  payroll (one ``collect_all``, so Polars may share the scan);
* the per-record report, one row per record, with the columns of tabdp's
  ``per_record_losses.parquet`` in row mode (``row``, ``rho``, ``epsilon``, ``size``,
  ``epsilon_delta`` and one ``rho_<table>`` per table), sunk to Parquet (zstd level 1); each
  loss is a vectorized transcendental expression of the shape of the example's policies
  (``ε·tanh(ε/2)`` with ``ε = d·log1p(x/σ)``, the count's constant ρ = 1/8, ``ρ + 2√(ρ ln(1/δ))``).

Both run as whole processes (``tabdp.cli run SPEC --overwrite --quiet`` and ``bench_run.py
--floor-child ...``, each through `_PEAK`) with byte-code caching on (``PYTHONPYCACHEPREFIX`` in
the temporary folder, filled by a warm-up round), interleaved round by round, medians of
``--repeat`` rounds after one warm-up; wall time, CPU time (``os.wait4``) and peak RSS: the
child's own ``VmHWM``, which it writes as it exits (`_PEAK`). Not ``ru_maxrss``: Linux carries
into it the high-water mark of the memory image the child was forked from, so every child of
this benchmark (which holds the generated rows) would report at least this process's peak.
``fixed`` below is tabdp's median at the smallest row count (start-up, planning, tables,
rollups, HTML pages); the issue's targets: fixed ≤ 2 s, ``(tabdp(N) - fixed) / floor(N)`` ≤ 2
at 10M rows, peak RSS ≤ 2× the floor's.

``--stages N`` runs tabdp once more at ``N`` rows under cProfile and prints the cumulative
seconds of the top-level stages (the functions of ``tabdp.release`` and ``tabdp.report`` that
the run calls, and imports), to show where the time above the floor goes. cProfile inflates
the Python-heavy parts; ``--phases N`` instead runs tabdp once more at ``N`` rows with timers
around the runner's phases (`_PHASES`: the releases' pass, the report's sink and its row
check, the loss statistics, the rollups, the pages, the writes): each phase's *process* CPU
seconds (every thread: on a shared machine they move much less than wall seconds), wall
seconds, minor page faults and the highest resident memory sampled while it ran.

Usage: ``python benchmarks/bench_run.py [--rows 1000 1000000] [--ten-million] [--repeat 3]
[--stages 1000000] [--phases 10000000]``. Writes ``benchmarks/results/run.json`` and prints a
Markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SPEC = ROOT / "examples" / "cbp_release.toml"
HIER = ROOT / "data" / "hierarchies"
SEED = 20261126
PARQUET: dict[str, Any] = {"compression": "zstd", "compression_level": 1}
#: The example's calibrated ExpPolyLog tables: name -> (measure, by). Their (σ, d) are not
#: needed exactly: the floor only has to evaluate a loss of the same shape.
SUM_TABLES = {"county_naics2_payroll": ("payroll", ["county", "naics2"]),
              "county_naics2_employment": ("employment", ["county", "naics2"]),
              "state_naics6_payroll": ("payroll", ["state", "naics6"])}
COUNT_TABLE = "county_naics2_estabs"
DELTA = 1e-9


# -- inputs ----------------------------------------------------------------------------------
def write_inputs(folder: Path, n: int) -> Path:
    """Write ``n`` synthetic rows and the row-mode copy of the example spec into ``folder``.

    Args:
        folder: An existing folder.
        n: Rows (establishments).

    Returns:
        The spec's path.
    """
    from tabdp.datasets.synth import generate_establishments

    data = folder / "data.parquet"
    if not data.exists():
        generate_establishments(n, seed=SEED).write_parquet(data)
    text = SPEC.read_text(encoding="utf-8")
    swaps = {'path = "../data/cbp_sample.parquet"': f'path = "{data}"',
             '"../data/hierarchies/': f'"{HIER}/',
             '"../out/cbp_release/public"': f'"{folder}/out/public"',
             '"../out/cbp_release/confidential"': f'"{folder}/out/confidential"'}
    for old, new in swaps.items():
        if old not in text:
            raise SystemExit(f"bench_run: the example spec no longer contains {old!r}; update "
                             "write_inputs")
        text = text.replace(old, new)
    text, units = re.subn(r'^unit = "estab_id".*$', "", text, flags=re.M)  # row mode
    if units != 1:
        raise SystemExit("bench_run: expected one `unit = \"estab_id\"` line in the spec")
    spec = folder / "spec.toml"
    spec.write_text(text, encoding="utf-8")
    return spec


# -- the floor program (run in a child process) ----------------------------------------------
def floor(data: str, out: str) -> None:
    """The plain-Polars floor: the four base tables and the per-record report.

    Args:
        data: The input Parquet file.
        out: Output folder (created).
    """
    import polars as pl

    Path(out).mkdir(parents=True, exist_ok=True)
    geo = pl.read_csv(HIER / "geography.csv", schema_overrides={"state": pl.String,
                                                                 "county": pl.String})
    ind = pl.read_csv(HIER / "naics.csv", infer_schema=False)
    keys = {("county", "naics2"): geo.select("county").unique().join(
                ind.select("naics2").unique(), how="cross"),
            ("state", "naics6"): geo.select("state").unique().join(
                ind.select("naics6").unique(), how="cross")}
    lf = pl.scan_parquet(data)
    by_cn = ["county", "naics2"]
    plans = [lf.group_by(by_cn).agg(pl.col("payroll").sum(), pl.col("employment").sum(),
                                    pl.len().alias("count")),
             lf.group_by(["state", "naics6"]).agg(pl.col("payroll").sum())]
    cn, sn = pl.collect_all(plans)
    cn = keys[("county", "naics2")].join(cn, on=by_cn, how="left")
    for name, col in (("county_naics2_payroll", "payroll"),
                      ("county_naics2_employment", "employment"), (COUNT_TABLE, "count")):
        cn.select(*by_cn, pl.col(col).fill_null(0)).write_parquet(f"{out}/{name}.parquet")
    (keys[("state", "naics6")].join(sn, on=["state", "naics6"], how="left")
     .write_parquet(f"{out}/state_naics6_payroll.parquet"))

    def rho(col: str, sigma: float, d: float) -> pl.Expr:
        eps = pl.col(col).abs().cast(pl.Float64).truediv(sigma).log1p() * d
        return eps * (eps * 0.5).tanh()

    losses = {"rho_county_naics2_payroll": rho("payroll", 6.0e5, 0.9),
              "rho_county_naics2_employment": rho("employment", 12.0, 0.9),
              f"rho_{COUNT_TABLE}": pl.lit(0.125),
              "rho_state_naics6_payroll": rho("payroll", 6.0e5, 0.9)}
    total = pl.sum_horizontal(*losses.values())
    (lf.with_row_index("row")
     .select(pl.col("row").cast(pl.Int64), total.alias("rho"), pl.lit(float("inf")).alias(
                 "epsilon"),
             pl.max_horizontal(pl.col("payroll").abs().cast(pl.Float64),
                               pl.col("employment").abs().cast(pl.Float64),
                               pl.lit(1.0)).alias("size"),
             (total + 2.0 * (total * -math.log(DELTA)).sqrt())
             .alias("epsilon_delta"),
             *[e.alias(k) for k, e in losses.items()])
     .sink_parquet(f"{out}/per_record_losses.parquet", **PARQUET))


# -- measuring -------------------------------------------------------------------------------
def _env(tmp: Path, code: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its byte code
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    env["PYTHONPATH"] = os.pathsep.join([str(code), *filter(None, [env.get("PYTHONPATH")])])
    env["BENCH_RUN_CWD"] = str(tmp)
    return env


#: Runs a module (``-m NAME``) or a script (``PATH``) with its arguments, and writes the
#: process's peak resident memory (``VmHWM``, kB) to the file ``$BENCH_RUN_PEAK`` as it exits.
#: ``VmHWM`` belongs to the memory image, which ``exec`` replaces: it is the child's own peak.
_PEAK = """\
import atexit, os, runpy, sys
def _peak():
    with open('/proc/self/status') as f:
        kb = next(int(x.split()[1]) for x in f if x.startswith('VmHWM:'))
    with open(os.environ['BENCH_RUN_PEAK'], 'w') as f:
        f.write(str(kb))
atexit.register(_peak)
if sys.argv[1] == '-m':
    sys.argv = [sys.argv[2], *sys.argv[3:]]
    runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)
else:
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name='__main__')
"""


#: Runs ``tabdp.cli run ...`` (its arguments) with timers around the runner's phases and
#: writes ``{phase: {n, cpu_s, wall_s, minflt, peak_rss_mb}}`` (and ``total``) as JSON to
#: ``$BENCH_RUN_PHASES`` as it exits. Process CPU (``time.process_time``: every thread) and
#: minor faults (``getrusage``) are differences over each call; the peak is the highest
#: ``VmRSS`` a thread samples every 20 ms while the phase runs (nested phases: the innermost;
#: ``total``: the child's own ``VmHWM``, as `_PEAK`).
_PHASES = """\
import atexit, functools, json, os, resource, runpy, sys, threading, time
t0 = time.perf_counter()
stats, active = {}, []
def rss(key='VmRSS:'):
    with open('/proc/self/status') as f:
        return next(int(x.split()[1]) for x in f if x.startswith(key)) / 1024
def sample():
    while True:
        if active:
            s = stats[active[-1]]
            s['peak_rss_mb'] = max(s['peak_rss_mb'], rss())
        time.sleep(0.02)
threading.Thread(target=sample, daemon=True).start()
def wrap(owner, name, label):
    f = getattr(owner, name)
    @functools.wraps(f)
    def timed(*a, **k):
        s = stats.setdefault(label, dict(n=0, cpu_s=0.0, wall_s=0.0, minflt=0, peak_rss_mb=0.0))
        c, w = time.process_time(), time.perf_counter()
        m = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        active.append(label)
        try:
            return f(*a, **k)
        finally:
            active.pop()
            s['n'] += 1
            s['cpu_s'] += time.process_time() - c
            s['wall_s'] += time.perf_counter() - w
            s['minflt'] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - m
            s['peak_rss_mb'] = max(s['peak_rss_mb'], rss())
    setattr(owner, name, timed)
import polars as pl
import tabdp.frame._stream as st, tabdp.frame.backends.polars as pb
import tabdp.release._staging as stg, tabdp.release._tables as tb, tabdp.release.runner as rn
import tabdp.report.html as html
wrap(rn, 'plan_summary', 'plan')
wrap(pb.StreamingBackend, '_prefetch', "releases' pass (every table)")
wrap(st, 'sink_report', 'per-record report (sink, row check included)')
wrap(st, '_checked_source', 'row check (input read again)')
wrap(tb, '_rollup', 'rollups')
wrap(tb, 'publish', 'publication rules and rounding')
wrap(html, 'loss_statistics', 'loss statistics (report read back)')
wrap(html, 'render_summary_html', 'public page')
wrap(html, 'render_confidential_html', 'confidential page')
wrap(pl.DataFrame, 'write_parquet', 'public and other Parquet writes')
wrap(stg._Staging, '__exit__', 'staging: renames into place')
def dump():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    stats['total'] = dict(n=1, cpu_s=time.process_time(), wall_s=time.perf_counter() - t0,
                          minflt=ru.ru_minflt, peak_rss_mb=rss('VmHWM:'))
    with open(os.environ['BENCH_RUN_PHASES'], 'w') as f:
        json.dump(stats, f)
atexit.register(dump)
sys.argv = ['tabdp', *sys.argv[1:]]
runpy.run_module('tabdp.cli', run_name='__main__', alter_sys=True)
"""


def _timed(cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (MB) of one child process.

    CPU seconds move less than wall seconds with the load of a shared machine. The peak is
    the child's own (`_PEAK`). Raises SystemExit if the child fails.
    """
    peak_file = Path(env["BENCH_RUN_CWD"]) / "peak_kb"
    peak_file.unlink(missing_ok=True)
    env = {**env, "BENCH_RUN_PEAK": str(peak_file)}
    t = time.perf_counter()
    # cwd: `python -m` puts the working folder first on sys.path, ahead of PYTHONPATH; a
    # neutral folder keeps a checkout's tabdp from shadowing the one under test
    proc = subprocess.Popen(cmd, env=env, cwd=env["BENCH_RUN_CWD"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"bench_run: {' '.join(cmd)} failed ({proc.returncode}):\n"
                         f"{err.decode(errors='replace')[-3000:]}")
    return {"seconds": seconds, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mb": (int(peak_file.read_text()) / 1024 if peak_file.exists()
                            else math.nan)}  # (nan: a command without `_PEAK`)


def _commands(folder: Path, spec: Path) -> dict[str, list[str]]:
    py = sys.executable
    return {"tabdp": [py, "-c", _PEAK, "-m", "tabdp.cli", "run", str(spec), "--overwrite",
                      "--quiet"],
            "floor": [py, "-c", _PEAK, str(Path(__file__).resolve()), "--floor-child",
                      str(folder / "data.parquet"), str(folder / "floor")]}


def _variants(folder: Path, spec: Path, env: dict[str, str], baseline: Path | None,
              tmp: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Variant name -> (command, environment); ``tabdp_baseline`` runs another checkout."""
    cmds = _commands(folder, spec)
    out = {k: (cmd, env) for k, cmd in cmds.items()}
    if baseline is not None:
        (tmp / "baseline").mkdir(exist_ok=True)
        out["tabdp_baseline"] = (cmds["tabdp"], _env(tmp / "baseline", baseline))
    return out


def stages(folder: Path, spec: Path, env: dict[str, str], top: int = 25) -> list[dict[str, Any]]:
    """Cumulative seconds of tabdp's top-level stages in one profiled run.

    Args:
        folder: The run's folder.
        spec: Its spec.
        env: Child environment.
        top: Rows to keep.

    Returns:
        ``[{"function": ..., "cumulative_s": ..., "calls": ...}]``, largest first.
    """
    import pstats

    prof = folder / "run.prof"
    cmd = [sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "tabdp.cli", "run",
           str(spec), "--overwrite", "--quiet"]
    _timed(cmd, env)
    st: Any = pstats.Stats(str(prof)).stats
    rows = []
    for (file, line, name), (_, calls, _, cum, _) in st.items():
        mod = file.replace(str(ROOT) + os.sep, "")
        if mod.startswith(("tabdp/release", "tabdp/report", "tabdp/plotting", "tabdp/privacy",
                           "tabdp/frame")) and not name.startswith("<"):
            rows.append({"function": f"{mod}:{line} {name}", "cumulative_s": round(cum, 3),
                         "calls": calls})
    rows.sort(key=lambda r: -r["cumulative_s"])
    return rows[:top]


def phases(folder: Path, spec: Path, env: dict[str, str]) -> dict[str, dict[str, float]]:
    """Process CPU, wall seconds, minor faults and peak RSS of each phase of one tabdp run.

    Args:
        folder: The run's folder.
        spec: Its spec.
        env: Child environment.

    Returns:
        Phase -> ``{n, cpu_s, wall_s, minflt, peak_rss_mb}`` (`_PHASES`), ``total`` last.
    """
    out = folder / "phases.json"
    cmd = [sys.executable, "-c", _PHASES, "run", str(spec), "--overwrite", "--quiet"]
    _timed(cmd, {**env, "BENCH_RUN_PHASES": str(out)})
    return dict(json.loads(out.read_text()))


def main() -> None:
    """Run the benchmark and print a table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000, 1_000_000])
    ap.add_argument("--ten-million", action="store_true", help="also run 10,000,000 rows")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--stages", type=int, default=None, metavar="N",
                    help="also profile one tabdp run at N rows (one of --rows)")
    ap.add_argument("--phases", type=int, default=None, metavar="N",
                    help="also time the phases of one tabdp run at N rows (one of --rows)")
    ap.add_argument("--code", type=Path, default=ROOT,
                    help="checkout whose tabdp runs (default: this one), e.g. to compare commits")
    ap.add_argument("--baseline-code", type=Path, default=None,
                    help="another checkout, run as the variant tabdp_baseline, interleaved")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "run.json",
                    help="results file (default: %(default)s)")
    ap.add_argument("--floor-child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.floor_child:
        floor(*args.floor_child)
        return
    rows = sorted(set(args.rows) | ({10_000_000} if args.ten_million else set()))
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench_run-") as name:
        tmp = Path(name)
        env = _env(tmp, args.code.resolve())
        for n in rows:
            folder = tmp / f"n{n}"
            folder.mkdir()
            spec = write_inputs(folder, n)
            variants = _variants(folder, spec, env, args.baseline_code and
                                 args.baseline_code.resolve(), tmp)
            times: dict[str, list[dict[str, float]]] = {k: [] for k in variants}
            load = [os.getloadavg()[0]]
            for i in range(args.repeat + 1):  # round 0 warms up (byte code, page cache)
                for k, (cmd, venv) in variants.items():
                    r = _timed(cmd, venv)
                    if i:
                        times[k].append(r)
                load.append(os.getloadavg()[0])
            row: dict[str, Any] = {"rows": n, "load_avg_1min": [min(load), max(load)]}
            for k, rs in times.items():
                row[k] = {"median_s": statistics.median(r["seconds"] for r in rs),
                          "times_s": [round(r["seconds"], 3) for r in rs],
                          "median_cpu_s": statistics.median(r["cpu_s"] for r in rs),
                          "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in rs)}
            if args.stages == n:
                row["stages"] = stages(folder, spec, env)
            if args.phases == n:
                row["phases"] = phases(folder, spec, env)
            results.append(row)
            base = (f", baseline {row['tabdp_baseline']['median_s']:.2f} s"
                    if "tabdp_baseline" in row else "")
            print(f"{n:,} rows: tabdp {row['tabdp']['median_s']:.2f} s, floor "
                  f"{row['floor']['median_s']:.2f} s{base} (load {min(load):.1f}-"
                  f"{max(load):.1f})", file=sys.stderr, flush=True)
    fixed = results[0]["tabdp"]["median_s"]
    for row in results:
        t, f = row["tabdp"], row["floor"]
        row["time_ratio"] = t["median_s"] / f["median_s"]
        row["above_fixed_ratio"] = (t["median_s"] - fixed) / f["median_s"]
        row["peak_rss_ratio"] = t["peak_rss_mb"] / f["peak_rss_mb"]
    meta = {"python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "fixed_cost_rows": results[0]["rows"],
            "workload": "tabdp run of examples/cbp_release.toml in row mode (no input.unit), "
                        "secure randomness, against a plain-Polars program writing the same "
                        "base tables and per-record report; whole processes, medians"}
    meta["code"] = str(args.code.resolve())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    print(f"fixed cost (tabdp at {results[0]['rows']:,} rows): {fixed:.2f} s")
    print("| rows | floor (s) | tabdp (s) | ratio | above fixed / floor | CPU floor / tabdp (s) "
          "| peak RSS floor / tabdp (MB) | load |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in results:
        f, t = r["floor"], r["tabdp"]
        print(f"| {r['rows']:,} | {f['median_s']:.2f} | {t['median_s']:.2f} | "
              f"{r['time_ratio']:.1f}× | {r['above_fixed_ratio']:.2f}× | "
              f"{f['median_cpu_s']:.2f} / {t['median_cpu_s']:.2f} | "
              f"{f['peak_rss_mb']:.0f} / {t['peak_rss_mb']:.0f} | "
              f"{r['load_avg_1min'][0]:.1f}–{r['load_avg_1min'][1]:.1f} |")
        if "tabdp_baseline" in r:
            b = r["tabdp_baseline"]
            print(f"    baseline ({args.baseline_code}): {b['median_s']:.2f} s "
                  f"(CPU {b['median_cpu_s']:.2f} s), {b['peak_rss_mb']:.0f} MB")
        for s in r.get("stages", []):
            print(f"    {s['cumulative_s']:8.3f} s  {s['calls']:>5}  {s['function']}")
        for name, p in r.get("phases", {}).items():
            print(f"    {name:48s} {p['cpu_s']:7.2f} CPU-s {p['wall_s']:7.2f} s "
                  f"{p['minflt']:>9,} faults {p['peak_rss_mb']:6.0f} MB  x{p['n']}")


if __name__ == "__main__":
    main()
