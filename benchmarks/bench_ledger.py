"""Benchmark: the cost of a lifetime ledger (issue 31) next to the release it accounts.

The release: ``df.dp.sum`` of payroll and employment and ``df.dp.count`` by county x 6-digit
NAICS in unit mode (``unit="estab_id"``), then the per-record report. It runs alternately without
a ledger and with one (``Session(ledger=...)``, ``autocommit=False``, one commit at the end, as
the release workflow does). The ledger already holds ``--past`` releases over the same units, so
opening it verifies and reads a real state and history; each round works on a fresh copy of
that ledger (the copy is not timed).

* Time: medians over ``--repeat`` interleaved rounds (after a warm-up round), with the ledger's
  phases timed apart: open (lock, verify, read the state), lookup (every read of the
  lifetime totals: the filter's and the report's ``rho_lifetime``), charge (adding this run's
  losses), commit (history, state, chain entry).
* Memory: each variant once more in a fresh subprocess (peak ``VmHWM``).

The figure for issue 31's target is ``with_ledger_extra_over_release_cpu``: (CPU of the
release with the ledger - CPU of the release alone) / CPU of the release alone, medians of
interleaved rounds in one process. It counts everything the ledger causes, in its phases or
not (the lifetime filter, the session's per-unit merge when the filter leaves different units
in two queries, the per-record report's joins and ``rho_lifetime``); ``outside_phases_cpu``
is the part of it outside the four timed phases. ``floor_over_release_cpu`` is the floor
program's CPU over the release alone's (`_floor`: only the file work of a ledger that reads
every unit's totals and writes a history file and a new state per release, in Parquet). Usage:
``python benchmarks/bench_ledger.py [--rows 1000000] [--big] [--repeat 3] [--past 2]``
(``--big``: 10M units). Writes ``benchmarks/results/ledger.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BY = ["county", "naics6"]
PHASES = ("open", "lookup", "charge", "commit")


def _usage() -> tuple[float, float, float, int]:
    """Wall time, user and system CPU seconds (all threads), minor page faults, of now."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), r.ru_utime, r.ru_stime, r.ru_minflt


def _timed(cls: Any, name: str, acc: dict[str, float], phase: str) -> None:
    """Wrap ``cls.name`` so that its time adds to ``acc[phase]`` (outermost call only).

    Wall time in ``acc[phase]``, CPU time of the process (all threads) in ``acc[phase+"_cpu"]``,
    its system part in ``acc[phase+"_sys"]`` and the minor page faults in ``acc[phase+"_flt"]``
    (``getrusage``: on this machine a fresh page's fault, zeroing and any compaction for a
    huge page are system time, often a third or more of a phase's CPU at 10M units).
    """
    raw = cls.__dict__[name]
    is_cls = isinstance(raw, classmethod)
    orig = raw.__func__ if is_cls else raw
    depth = [0]

    def wrapper(*a: Any, **k: Any) -> Any:
        depth[0] += 1
        u0 = _usage()
        try:
            return orig(*a, **k)
        finally:
            depth[0] -= 1
            if not depth[0]:
                u1 = _usage()
                for key, d in ((phase, u1[0] - u0[0]), (phase + "_cpu", u1[1] + u1[2] - u0[1]
                               - u0[2]), (phase + "_sys", u1[2] - u0[2]),
                               (phase + "_flt", u1[3] - u0[3])):
                    acc[key] = acc.get(key, 0.0) + d

    setattr(cls, name, classmethod(wrapper) if is_cls else wrapper)


def _setup(rows: int, path: Path) -> Any:
    import polars as pl

    from tabdp.datasets.synth import generate_establishments

    if not path.exists():
        generate_establishments(rows, seed=20261126, n_states=50,
                                counties_per_state=63).write_parquet(path)
    return pl.read_parquet(path)


def _copy_ledger(base: Path, work: Path) -> None:
    """A fresh copy of the ledger ``base`` at ``work``, its anchor included.

    The anchor is the chain head kept next to the folder (``.<name>.head.json``): a copy
    without it, or beside the anchor of an earlier round's copy, is refused as an older copy.
    """
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(base, work)
    anchor = base.parent / f".{base.name}.head.json"
    if anchor.exists():
        shutil.copy2(anchor, work.parent / f".{work.name}.head.json")
    # the copy's dirty pages written out now, not by the timed release's fsyncs (the commit
    # fsyncs its files: on ext4 that waited on the copy's 1.6 GB at 10M units)
    os.sync()


def _release(df: Any, ledger: Any = None) -> list[int]:
    import tabdp
    from tabdp import mechanisms as mech
    from tabdp.datasets.synth import public_domains

    doms = public_domains(n_states=50, counties_per_state=63)
    keys = tabdp.KeySet.from_dict(county=doms["county"], naics6=doms["naics6"])
    s = tabdp.Session(unit="estab_id", seed=1, ledger=ledger)
    df.dp.sum(["payroll", "employment"], by=BY, keys=keys,
              mechanism=mech.LogTransform(sigma=0.5, offset=1000.0), session=s)
    df.dp.count(by=BY, keys=keys, mechanism=mech.Gaussian(sigma=2.0), session=s)
    s.report().per_record  # noqa: B018 - computing it is part of the workload
    if ledger is not None:
        s.commit_ledger(label="bench")
        ledger.close()
    # the units each query charged (with a ledger, the lifetime filter may leave some out)
    return [r.losses.n for r in s.records if r.losses is not None]


def _floor(work: Path) -> Callable[[], dict[str, float]]:
    """The ledger's floor: the file work any per-unit ledger in Parquet does per release.

    A plain program over the same ledger copy, with none of tabdp's checks: BLAKE3 of the
    state file and of the newest history file (what an open hashes), the state read by
    Polars into one float64 array per column, this run's charges (one array per column,
    made before the clock starts: the release computes them) added into them, then the run's
    history rows and the new state written as one Parquet file each (pyarrow, plain
    encoding, no compression, required fields, the unit ids ``DELTA_BINARY_PACKED``),
    fsynced and hashed. No lock, chain entry, Delta log, filter or report. Returns the timed
    part (which returns the CPU seconds of its three parts); the charges are built when
    called.
    """
    import mmap

    import numpy as np
    import polars as pl
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tabdp.privacy.lifetime import _file_hasher

    def newest(table: Path) -> Path:
        return max(table.glob("*.parquet"), key=lambda f: f.stat().st_mtime_ns)

    def hashed(path: Path) -> None:
        h = _file_hasher()
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            h.update(mm)

    def write(path: Path, units: Any, cols: dict[str, Any]) -> None:
        t = pa.table({"unit": units, **{c: pa.array(v) for c, v in cols.items()}})
        t = t.cast(pa.schema([f.with_nullable(False) for f in t.schema]))
        pq.write_table(t, path, compression="none", use_dictionary=False,
                       write_statistics=False, column_encoding={"unit": "DELTA_BINARY_PACKED"})
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        hashed(path)

    state_file = newest(work / "state")
    history_file = newest(work / "history")
    cols = [c for c in pl.read_parquet_schema(state_file) if c != "unit"]
    n = pl.scan_parquet(state_file).select(pl.len()).collect().item()
    rng = np.random.default_rng(1)
    charges = {c: rng.random(n) for c in cols}

    def run() -> dict[str, float]:
        u0 = _usage()
        hashed(state_file)
        hashed(history_file)
        state = pl.read_parquet(state_file)
        units = state["unit"].to_arrow()
        life = {c: state[c].to_numpy() + charges[c] for c in cols}
        u1 = _usage()
        write(work / "floor_history.parquet", units, charges)
        u2 = _usage()
        write(work / "floor_state.parquet", units, life)
        u3 = _usage()
        # CPU-s of each part: read (hash, parse, add), the history file, the state file
        return {part: b[1] + b[2] - a[1] - a[2] for part, a, b in
                (("read", u0, u1), ("history", u1, u2), ("state", u2, u3))}

    return run


def _prepare(df: Any, base: Path, past: int, budget: float = 1000.0) -> None:
    import tabdp

    if base.exists():
        return
    for i in range(past):
        # each past release over a different 90% of the units (units enter and leave)
        part = df.filter((df["estab_id"] % 10) != i % 10)
        led = tabdp.Ledger.open(base, series="bench", lifetime_budget=budget,
                                autocommit=False, create=True)
        _release(part, led)


def _rounds(df: Any, base: Path, work: Path, repeat: int,
            budget: float = 1000.0) -> dict[str, Any]:
    import tabdp

    acc: dict[str, float] = {}
    _timed(tabdp.Ledger, "open", acc, "open")
    # every read of the lifetime totals: the filter's (`Ledger.lookup_lifetime`) and the
    # report's `rho_lifetime` (`Ledger.lookup`) alike (timing `Ledger.lookup` alone missed the
    # filter's, which call the run's totals directly)
    from tabdp.privacy import lifetime

    _timed(lifetime._RunTotals, "lookup", acc, "lookup")
    _timed(tabdp.Ledger, "charge", acc, "charge")
    _timed(tabdp.Ledger, "commit", acc, "commit")
    times: dict[str, list[float]] = {"release": [], "with_ledger": []}
    cpu: dict[str, list[float]] = {"release": [], "with_ledger": []}
    phases: dict[str, list[float]] = {p: [] for p in PHASES}
    phases_cpu: dict[str, list[float]] = {p: [] for p in PHASES}
    phases_sys: dict[str, list[float]] = {p: [] for p in PHASES}
    phases_flt: dict[str, list[float]] = {p: [] for p in PHASES}
    sys_cpu: dict[str, list[float]] = {"release": [], "with_ledger": []}
    faults: dict[str, list[int]] = {"release": [], "with_ledger": []}
    charged: dict[str, list[int]] = {}
    loads: list[float] = []

    def alone() -> list[int]:
        return _release(df)

    def with_ledger() -> list[int]:
        return _release(df, tabdp.Ledger.open(work, series="bench", lifetime_budget=budget,
                                              autocommit=False, create=True))

    fns: dict[str, Callable[[], list[int]]] = {"release": alone, "with_ledger": with_ledger}
    floor_cpu: list[float] = []
    floor_parts: list[dict[str, float]] = []
    for i in range(repeat + 1):
        for k, fn in fns.items():
            if k == "with_ledger":
                _copy_ledger(base, work)
                acc.clear()
            gc.collect()
            u0 = _usage()
            charged[k] = fn()
            u1 = _usage()
            if k == "with_ledger":  # then the floor program, on a fresh copy of the ledger
                _copy_ledger(base, work)
                floor = _floor(work)
                gc.collect()
                f0 = _usage()
                parts = floor()
                f1 = _usage()
                if i:
                    floor_cpu.append(f1[1] + f1[2] - f0[1] - f0[2])
                    floor_parts.append(parts)
                del floor
            loads.append(os.getloadavg()[0])
            if i:
                times[k].append(u1[0] - u0[0])
                cpu[k].append(u1[1] + u1[2] - u0[1] - u0[2])
                sys_cpu[k].append(u1[2] - u0[2])
                faults[k].append(u1[3] - u0[3])
                if k == "with_ledger":
                    for p in PHASES:
                        phases[p].append(acc.get(p, 0.0))
                        phases_cpu[p].append(acc.get(p + "_cpu", 0.0))
                        phases_sys[p].append(acc.get(p + "_sys", 0.0))
                        phases_flt[p].append(acc.get(p + "_flt", 0.0))
    med = {k: statistics.median(v) for k, v in times.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    ph = {p: statistics.median(v) for p, v in phases.items()}
    ph_cpu = {p: statistics.median(v) for p, v in phases_cpu.items()}
    # the ledger's CPU time over the release's own (the release with the ledger, less the
    # ledger's phases), each round, in the same process
    own = [sum(phases_cpu[p][j] for p in PHASES) / (cpu["with_ledger"][j]
           - sum(phases_cpu[p][j] for p in PHASES)) for j in range(len(cpu["with_ledger"]))]
    # each round: (release with the ledger - release alone) / release alone, the two run
    # back to back in this process (the honest ratio: all the ledger costs, phases or not)
    extra = [cpu["with_ledger"][j] / cpu["release"][j] - 1.0 for j in range(len(cpu["release"]))]
    return {"seconds": times, "median": med, "phases_seconds": phases, "phases_median": ph,
            "sys_cpu_seconds": sys_cpu, "minor_faults": faults,
            "phases_sys_cpu_seconds": phases_sys, "phases_minor_faults": phases_flt,
            # units each query charged: with a binding lifetime filter the ledger run charges
            # fewer, and the release then does work the release alone does not (its totals
            # without the units left out, the session's merge of two different unit sets)
            "units_charged": charged, "load_1m_per_variant": loads, "lifetime_budget": budget,
            "cpu_seconds": cpu, "cpu_median": med_cpu, "phases_cpu_seconds": phases_cpu,
            "phases_cpu_median": ph_cpu,
            "ratio_with_ledger": med["with_ledger"] / med["release"],
            "ledger_over_release": sum(ph.values()) / med["release"],
            "ledger_over_release_cpu": sum(ph_cpu.values()) / med_cpu["release"],
            "ledger_over_own_release_cpu_rounds": own,
            "ledger_over_own_release_cpu": statistics.median(own),
            # THE figure for issue 31's target: everything the ledger adds, in and out of its
            # phases (the lifetime filter, the session's per-unit merges of queries the filter
            # left different units in, the report's joins and rho_lifetime...), over the
            # release alone: medians of CPU seconds, the two variants interleaved in one process
            "with_ledger_extra_over_release_cpu": med_cpu["with_ledger"] / med_cpu["release"]
            - 1.0,
            "with_ledger_extra_over_release_cpu_rounds": extra,
            # the floor program (`_floor`): CPU-s per round, and its median over the release
            # alone's (what a ledger that reads and rewrites every unit's totals in Parquet
            # costs at least, next to the release)
            "floor_cpu_seconds": floor_cpu,
            "floor_over_release_cpu": statistics.median(floor_cpu) / med_cpu["release"],
            "floor_parts_cpu_seconds": floor_parts,
            # a ledger that rewrote no state (only reads it and appends a history file)
            "floor_without_state_write_over_release_cpu": statistics.median(
                p["read"] + p["history"] for p in floor_parts) / med_cpu["release"],
            # the ledger's cost outside its four timed phases (CPU-s, median over rounds)
            "outside_phases_cpu": statistics.median(
                cpu["with_ledger"][j] - cpu["release"][j]
                - sum(phases_cpu[p][j] for p in PHASES) for j in range(len(extra)))}


def _peak(variant: str, data: Path, base: Path, work: Path) -> float:
    """Peak RSS (GB) of one variant in a fresh process."""
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import bench_ledger as b, "
            f"polars as pl, shutil, resource; from pathlib import Path; "
            f"df = pl.read_parquet({str(data)!r}); ")
    if variant == "ledger_only":  # the ledger's own work, no release: open, charge, commit
        code += (f"import tabdp, numpy as np; b._copy_ledger(Path({str(base)!r}), "
                 f"Path({str(work)!r})); "
                 f"led = tabdp.Ledger.open(Path({str(work)!r}), autocommit=False); "
                 "u = df['estab_id'].unique().sort(); n = len(u); "
                 "cols = ['rho', 'epsilon', 'rho_z', 'rho_g', 'eps_a', 'delta_a']; "
                 "led.lookup(u, cols); "
                 "led.charge(u, {c: np.full(n, 1e-3) for c in cols}, {'size': np.ones(n)}); "
                 "led.commit(label='mem'); led.close(); ")
    elif variant == "with_ledger":
        code += (f"import tabdp; b._copy_ledger(Path({str(base)!r}), Path({str(work)!r})); "
                 f"b._release(df, tabdp.Ledger.open(Path({str(work)!r}), series='bench', "
                 f"autocommit=False, create=True)); ")
    else:
        code += "b._release(df); "
    code += f"print({_HWM})"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env=os.environ.copy())
    return int(out.stdout.strip().splitlines()[-1]) / 1e6


#: The peak resident memory of this process in kB: VmHWM, the high-water mark of its own
#: address space. Not ``ru_maxrss``: on Linux a child's ``ru_maxrss`` starts from the parent's
#: resident memory when it was spawned (the address space replaced by exec counts), so every
#: figure taken from a benchmark process holding 10M rows read as that process's size.
_HWM = ("next(int(x.split()[1]) for x in open('/proc/self/status') "
        "if x.startswith('VmHWM:'))")


def _history_memory(df: Any, data: Path, tmp: Path, pasts: list[int]) -> dict[str, Any]:
    """Peak RSS of the release with ledgers holding ``pasts`` releases (fresh processes)."""
    out: dict[str, Any] = {}
    for k in pasts:
        base = tmp / f"ledger_{df.height}_{k}"
        _prepare(df, base, k)
        work = tmp / f"work_mem_{k}"
        out[str(k)] = {"peak_rss_gb": _peak("with_ledger", data, base, work),
                       "ledger_only_peak_rss_gb": _peak("ledger_only", data, base, work),
                       "ledger_bytes": _du(base)}
        shutil.rmtree(work, ignore_errors=True)
    out["release_alone_peak_rss_gb"] = _peak("release", data, base, tmp / "unused")
    code = (f"import polars as pl, resource; df = pl.read_parquet({str(data)!r}); "
            f"import tabdp, deltalake; print({_HWM})")
    base_rss = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                              text=True, env=os.environ.copy())
    out["data_read_only_peak_rss_gb"] = int(base_rss.stdout.strip().splitlines()[-1]) / 1e6
    return out


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--big", action="store_true", help="10M units")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--past", type=int, default=2, help="releases already in the ledger")
    ap.add_argument("--lifetime-budget", type=float, default=1000.0,
                    help="the series' lifetime budget (1000: the filter leaves out the few "
                    "units whose third release would pass it, 76 per 1M; 1e9: nobody)")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--history-memory", default="",
                    help="e.g. 1,8: peak RSS with ledgers of that many past releases (only this)")
    ap.add_argument("--memory-only", action="store_true",
                    help="only the peak resident memory of each variant (fresh processes)")
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--out", default=str(HERE / "results" / "ledger.json"))
    a = ap.parse_args()
    rows = 10_000_000 if a.big else a.rows
    tmp = Path(a.tmp or tempfile.mkdtemp(prefix="bench_ledger_"))
    tmp.mkdir(parents=True, exist_ok=True)
    data = tmp / f"estab_{rows}.parquet"
    base = tmp / (f"ledger_{rows}_{a.past}" + ("" if a.lifetime_budget == 1000.0
                                                else f"_b{a.lifetime_budget:g}"))
    work = tmp / "work_ledger"
    df = _setup(rows, data)
    out = Path(a.out)
    if a.history_memory:
        pasts = [int(x) for x in a.history_memory.split(",")]
        mem = _history_memory(df, data, tmp, pasts)
        mem |= {"load_avg": os.getloadavg(),
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        old0: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
        old0[f"{rows}_history_memory"] = mem
        out.write_text(json.dumps(old0, indent=2) + "\n")
        print(json.dumps(mem, indent=2))
        return
    _prepare(df, base, a.past, a.lifetime_budget)
    if a.memory_only:
        peaks: dict[str, Any] = {v: _peak(v, data, base, work)
                                 for v in ("release", "with_ledger", "ledger_only")}
        peaks |= {"measure": "VmHWM of a fresh process per variant", "past_releases": a.past,
                  "load_avg": os.getloadavg(),
                  "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        old1: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
        old1[f"{rows}_peak_rss_gb"] = peaks
        out.write_text(json.dumps(old1, indent=2) + "\n")
        print(json.dumps(peaks, indent=2))
        return
    load_before = os.getloadavg()
    res = _rounds(df, base, work, a.repeat, a.lifetime_budget)
    res["load_avg_before"] = load_before
    if not a.no_memory:
        res["peak_rss_gb"] = {v: _peak(v, data, base, work) for v in ("release", "with_ledger")}
    res |= {"rows": rows, "past_releases": a.past, "repeat": a.repeat,
            "ledger_bytes_before": _du(base), "load_avg": os.getloadavg(),
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    shutil.rmtree(work, ignore_errors=True)
    old: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    old[str(rows) + ("" if a.lifetime_budget == 1000.0 else f"_b{a.lifetime_budget:g}")] = res
    out.write_text(json.dumps(old, indent=2) + "\n")
    m, ph = res["median"], res["phases_median"]
    print("| units | release alone | with ledger | ratio | "
          + " | ".join(PHASES) + " | ledger/release | peak RSS (alone / ledger) |")
    print("|---" * (6 + len(PHASES)) + "|")
    peak = res.get("peak_rss_gb", {})
    print(f"| {rows:,} | {m['release']:.2f} s | {m['with_ledger']:.2f} s | "
          f"{res['ratio_with_ledger']:.2f} | "
          + " | ".join(f"{ph[p]:.2f} s" for p in PHASES)
          + f" | {res['ledger_over_release']:.2f} | "
          f"{peak.get('release', float('nan')):.2f} / "
          f"{peak.get('with_ledger', float('nan')):.2f} GB |")
    pc = res["phases_cpu_median"]
    cm = res["cpu_median"]
    rounds = [round(x, 3) for x in res["with_ledger_extra_over_release_cpu_rounds"]]
    print(f"CPU: release alone {cm['release']:.2f} s, with ledger {cm['with_ledger']:.2f} s; "
          + ", ".join(f"{p} {pc[p]:.2f} s" for p in PHASES)
          + f", outside the phases {res['outside_phases_cpu']:.2f} s")
    print(f"the ledger's cost, (with - alone) / alone (CPU, same process): "
          f"{res['with_ledger_extra_over_release_cpu']:.2f}, per round {rounds}; phases only, "
          f"over the release's own CPU: {res['ledger_over_own_release_cpu']:.2f}")
    ps, pf = res["phases_sys_cpu_seconds"], res["phases_minor_faults"]
    print("system CPU (median): release alone "
          f"{statistics.median(res['sys_cpu_seconds']['release']):.2f} s, with ledger "
          f"{statistics.median(res['sys_cpu_seconds']['with_ledger']):.2f} s; "
          + ", ".join(f"{p} {statistics.median(ps[p]):.2f} s" for p in PHASES)
          + "; minor faults: alone "
          f"{statistics.median(res['minor_faults']['release']):,.0f}, with ledger "
          f"{statistics.median(res['minor_faults']['with_ledger']):,.0f} ("
          + ", ".join(f"{p} {statistics.median(pf[p]):,.0f}" for p in PHASES) + ")")
    print(f"the floor program (read, add, write and hash the state and a history file): "
          f"{statistics.median(res['floor_cpu_seconds']):.2f} CPU-s, "
          f"{res['floor_over_release_cpu']:.2f} of the release alone (without writing the "
          f"state: {res['floor_without_state_write_over_release_cpu']:.2f}); parts per round: "
          + str([{k: round(v, 2) for k, v in p.items()} for p in res['floor_parts_cpu_seconds']]))
    print("units charged per query:", res["units_charged"])
    print("load average:", res["load_avg"])


if __name__ == "__main__":
    main()
