"""Benchmark: peak memory at scale (20M to 100M rows) in every privacy-unit mode (issue 29, item 5).

Issue 14's workload (a count and sums of employment and payroll by county x NAICS sector,
59,850 public cells, the per-record report written) read from Parquet, in each mode:

* ``row``: each row a unit, a streaming session (``Session(streaming=True)``), against a plain
  Polars *streaming* group-by of the same cells (``groupby``) and the row-mode floor program
  (``floor_row``, `bench_floor`);
* ``id``: an id unique per row (``Session(unit="estab_id")``) against the unit-mode floor
  program with the same unit (``floor_id``), its (unit, cell) group-by and per-unit sum run by
  Polars' streaming engine;
* ``firm``: firms of several rows (``Session(unit="firm_id")``) against ``floor_firm``.

Every variant runs alone in a fresh subprocess; its peak RSS is the child's ``ru_maxrss``
(``resource.getrusage(RUSAGE_CHILDREN)``) and its wall time is measured around it. The machine's
load average is recorded with each figure: wall time moves with load, peak memory does not.

The input is ``--path`` (a Parquet file or glob). ``--make-parts N`` writes N parts of
``--part`` rows each into ``--dir`` (ids unique across parts; with ``--firm-rows k`` the firm id
is ``estab_id // k``: firms of exactly k rows) and exits.

Usage: ``python benchmarks/bench_scale.py --path /tmp/x/*.parquet --variants groupby floor_row
row --rows-label 20000000 [--partitions K]``. Merges into ``benchmarks/results/scale.json``
(one entry per (rows, variant, note)).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
BY = ["county", "naics2"]
MEASURES = ["payroll", "employment"]
#: tabdp variant -> privacy unit column
TABDP = {"row": None, "id": "estab_id", "firm": "firm_id"}
FLOORS = {"floor_row": None, "floor_id": "estab_id", "floor_firm": "firm_id"}


def _variant(kind: str, path: str, out: str, partitions: int | None) -> None:
    import polars as pl

    import tabdp
    from tabdp import mechanisms as mech

    if kind == "groupby":
        (pl.scan_parquet(path).group_by(BY)
         .agg(pl.col("payroll").sum(), pl.col("employment").sum(), pl.len())
         .collect(engine="streaming"))
        return
    kf = pl.scan_parquet(path).select(BY).unique().collect(engine="streaming")
    counties = sorted(kf["county"].unique().to_list())
    sectors = sorted(kf["naics2"].unique().to_list())
    if kind in FLOORS:
        from bench_floor import _floor

        keys = pl.DataFrame({"county": counties}).join(pl.DataFrame({"naics2": sectors}),
                                                       how="cross")
        _floor(FLOORS[kind], path, out, keys, engine="streaming")()
        return
    keyset = tabdp.KeySet.from_dict(county=counties, naics2=sectors)
    extra: dict[str, Any] = {} if partitions is None else {"unit_partitions": partitions}
    unit = TABDP[kind]
    # row mode: a streaming session; unit mode: the default (streaming is row mode's ledger)
    s = tabdp.Session(unit=unit, streaming=True if unit is None else None, **extra)
    lf = pl.scan_parquet(path)
    lf.dp.sum(MEASURES, by=BY, keys=keyset, mechanism=mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0),
              session=s)
    lf.dp.count(by=BY, keys=keyset, session=s)
    s.report().write_per_record(f"{out}/per_record_{kind}.parquet")


def _make_parts(folder: Path, n_parts: int, part: int, firm_rows: int | None) -> None:
    import polars as pl

    from tabdp.datasets.synth import generate_establishments

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n_parts):
        df = generate_establishments(part, seed=20261126 + i, n_states=50, counties_per_state=63)
        df = df.with_columns(pl.col("estab_id") + i * part)
        if firm_rows:
            df = df.with_columns((pl.col("estab_id") // firm_rows).alias("firm_id"))
        df.write_parquet(folder / f"part-{i:04d}.parquet")
        del df


def _kib(file: str, field: str) -> int:
    try:
        for line in Path(file).read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _run(kind: str, path: str, out: str, partitions: int | None, max_mb: float | None
         ) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--variant", kind, "--path", path, "--out", out]
    if partitions is not None:
        cmd += ["--partitions", str(partitions)]
    load = os.getloadavg()
    t = time.perf_counter()
    err = tempfile.TemporaryFile(mode="w+")
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True)
    killed = None
    while child.poll() is None:  # a watchdog: the machine is shared, never let it swap or OOM
        time.sleep(0.2)
        rss, avail = _kib(f"/proc/{child.pid}/status", "VmRSS:"), _kib("/proc/meminfo",
                                                                       "MemAvailable:")
        if (max_mb and rss > max_mb * 1024) or (avail and avail < 1024 * 1024):
            killed = {"rss_mb": rss / 1024, "available_mb": avail / 1024}
            child.kill()
            child.wait()
    wall = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    res: dict[str, Any] = {"seconds": wall, "load_avg_before": load,
                           "load_avg_after": os.getloadavg()}
    if killed is not None:
        res["killed_by_watchdog"] = killed
    elif child.returncode:
        err.seek(0)
        res["failed"] = err.read().strip().splitlines()[-3:]
    # the largest child's so far: main() runs one driver per variant, each with one child
    res["peak_rss_mb"] = peak / 1024
    return res


def main() -> None:
    """Run the variants (each in a fresh process) and merge the figures into scale.json."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--path")
    ap.add_argument("--variants", nargs="+", default=["groupby", *FLOORS, *TABDP])
    ap.add_argument("--rows-label", type=int, help="rows in --path (for the record)")
    ap.add_argument("--partitions", type=int, help="tabdp: Session(unit_partitions=K)")
    ap.add_argument("--note", default="")
    ap.add_argument("--max-rss-mb", type=float, help="kill a variant whose RSS passes this")
    ap.add_argument("--dir", default="/tmp/tabdp-scale")
    ap.add_argument("--make-parts", type=int)
    ap.add_argument("--part", type=int, default=10_000_000)
    ap.add_argument("--firm-rows", type=int)
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        _variant(args.variant, args.path, args.out, args.partitions)
        return
    if args.make_parts:
        _make_parts(Path(args.dir), args.make_parts, args.part, args.firm_rows)
        return
    if args.driver:  # one variant, in a driver of its own (its children's peak is its own)
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            print(json.dumps(_run(args.variants[0], args.path, tmp, args.partitions,
                                 args.max_rss_mb)))
        return
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    file = HERE / "results" / "scale.json"
    data = json.loads(file.read_text()) if file.exists() else {}
    if "variants" not in data:  # the earlier layout (row mode only, 10M-100M rows)
        data = {"meta": {}, "variants": [], "earlier_row_stream": data}
    data["meta"] = {
        "python": platform.python_version(), "cpus": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "workload": "count + sum(payroll, employment) by county x naics2 (59,850 keys) from "
                    "Parquet, per-record report written; tabdp sessions streaming=True, "
                    "secure randomness; floors and group-by on Polars' streaming engine",
        "measure": "peak RSS of a fresh child process (ru_maxrss of RUSAGE_CHILDREN); wall "
                   "time on a shared machine (load average recorded before and after)"}
    for kind in args.variants:
        cmd = [sys.executable, __file__, "--driver", "--variants", kind, "--path", args.path,
               "--dir", args.dir]
        if args.partitions is not None:
            cmd += ["--partitions", str(args.partitions)]
        if args.max_rss_mb is not None:
            cmd += ["--max-rss-mb", str(args.max_rss_mb)]
        done = subprocess.run(cmd, check=True, capture_output=True, text=True)
        res = json.loads(done.stdout.strip().splitlines()[-1])
        entry = {"rows": args.rows_label, "variant": kind,
                 "mode": {"groupby": "plain streaming group-by", "floor_row": "row floor",
                          "floor_id": "id-per-row floor", "floor_firm": "firm floor",
                          "row": "each row a unit", "id": "an id per row",
                          "firm": "firms"}[kind],
                 "partitions": args.partitions if kind in TABDP else None,
                 "note": args.note, **res}
        if file.exists():  # re-read: another run may have added its figures meanwhile
            data["variants"] = json.loads(file.read_text()).get("variants", data["variants"])
        data["variants"] = [v for v in data["variants"]
                            if (v["rows"], v["variant"], v.get("note", ""),
                                v.get("partitions")) !=
                            (entry["rows"], kind, entry["note"], entry["partitions"])]
        data["variants"].append(entry)
        file.write_text(json.dumps(data, indent=2))
        print(json.dumps(entry), flush=True)


if __name__ == "__main__":
    main()
