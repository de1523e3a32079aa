"""Run one Tau-Argus engine in its own process (``python -m tabdp.compare._tau_worker DIR``).

The native engine of pytauargus 0.6.0 is not safe to run twice in one process (a second run,
or an audit right after MOD, crashes it), so `protect()` runs each
table here: ``DIR/job.json`` and ``DIR/micro.parquet`` in, ``DIR/cells.parquet`` (every cell
of the protected table) out; ``DIR audit`` then writes ``DIR/audit.json`` (Tau-Argus' own
audit) from a second process. All files stay in ``DIR``, inside the
comparison's confidential folder.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    """Run the job in the folder given as the only argument.

    Args:
        argv: ``[folder]`` or ``[folder, "audit"]`` (default: ``sys.argv[1:]``).

    Returns:
        0 on success.

    Example:
        >>> callable(main)
        True
    """
    import polars as pl
    from pytauargus import protect

    _java_apriori_bounds()
    _java_round_jj()
    args = argv if argv is not None else sys.argv[1:]
    wd = Path(args[0])
    job = json.loads((wd / "job.json").read_text(encoding="utf-8"))
    if args[1:] == ["audit"]:
        # a second process: one engine run per process (a second one can crash)
        rows = _audit(wd, pl.read_parquet(wd / "cells.parquet"), job["cols"])
        (wd / "audit.json").write_text(json.dumps(rows), encoding="utf-8")
        return 0
    import time

    from pytauargus.engine import Engine, run_batch
    from pytauargus.result import TableResult

    steps: dict[str, float] = {}
    t0 = time.perf_counter()
    micro = pl.read_parquet(wd / "micro.parquet")
    res = protect(micro.to_pandas(), job["cols"], response=job["response"],
                  safety_rules=job["rules"], suppress=job["suppress"],
                  hrc=job["hrc"] or None, workdir=str(wd / "tau"), run=False,
                  holding_var=job.get("holding"))
    if job.get("apriori"):
        _add_apriori(Path(res.files["arb"]), wd / "linked.hst", job["apriori"])
    steps["write_tau_argus_files"] = time.perf_counter() - t0
    raw_suppress = Engine.suppress

    def timed(self: Any, cmd: Any) -> None:
        t = time.perf_counter()
        raw_suppress(self, cmd)
        steps["suppress"] = time.perf_counter() - t

    Engine.suppress = timed
    t0 = time.perf_counter()
    run_batch(res.files["arb"])
    steps["batch_other_than_suppress"] = time.perf_counter() - t0 - steps.get("suppress", 0.0)
    t0 = time.perf_counter()
    rows = TableResult(path=res.files["tab1"], exp_vars=list(job["cols"]),
                       response=job["response"], is_freq=False).rows
    pl.DataFrame(rows).write_parquet(wd / "cells.parquet")
    steps["read_result"] = time.perf_counter() - t0
    (wd / "timings.json").write_text(json.dumps(steps), encoding="utf-8")
    return 0


def _add_apriori(arb: Path, hst: Path, rows: list[list[Any]]) -> None:
    """Suppress cells a-priori: each row is the cell's codes, then its protection below/above.

    Each cell gets a ``U`` line (manual unsafe: Tau-Argus' secondary suppression protects it
    like a primary cell) and a ``PL`` line (its protection levels), read by an ``<APRIORY>``
    command placed before ``<SUPPRESS>``.
    """
    lines = []
    for r in rows:
        codes = [str(c) for c in r[:-2]]
        lines.append(";".join([*codes, "U"]))
        lines.append(";".join([*codes, "PL", repr(float(r[-2])), repr(float(r[-1]))]))
    hst.write_text("\n".join(lines) + "\n", encoding="utf-8")
    text = arb.read_text(encoding="utf-8")
    cmd = f'<APRIORY> "{hst.resolve()}",1,";"\n'
    text = text.replace("<SUPPRESS>", cmd + "<SUPPRESS>", 1)
    arb.write_text(text, encoding="utf-8")


def _java_apriori_bounds() -> None:
    """Give every cell τ-ARGUS' a-priori bounds: 0 (or 1.5 × a negative minimum) to 1.5 × max.

    τ-ARGUS (Java, ``TableService.computeTables``) bounds every cell of the JJ file that
    OPT, RND and the audit solve by ``minTabVal = min(0, 1.5 × smallest cell)`` and
    ``maxTabVal = 1.5 × largest cell``; pytauargus 0.6.0 passes the smallest and largest
    cell themselves. Those bounds forbid rounding any cell below the smallest one down to 0,
    so RND finds no pattern on any table ("NO OUTPUT PATTERN EXISTS"), and they tell OPT and
    the audit that the intruder knows more than τ-ARGUS assumes. Restored here, in this
    child process only.
    """
    from pytauargus.engine import Engine

    raw = Engine._table_cell_bounds
    if getattr(raw, "_tabdp_java", False):
        return

    def bounds(self: Any, tab: int) -> tuple[float, float]:
        lo, hi = raw(self, tab)
        return (min(0.0, 1.5 * lo), max(0.0, 1.5 * hi))

    bounds._tabdp_java = True  # type: ignore[attr-defined]
    Engine._table_cell_bounds = bounds


def _java_round_jj() -> None:
    """Prepare the rounder's JJ file as τ-ARGUS does (Java ``OptiSuppress.correctRoundJJ``).

    τ-ARGUS gives every unsafe cell whose value is below the rounding base the protection
    levels ``value`` and ``value`` (both below the base). pytauargus 0.6.0 widens the upper one
    to the base itself, which the rounder rejects ("too long protection levels") and then
    finds no pattern. Restored here, in this child process only.
    """
    from pytauargus.engine import Engine

    raw = Engine._correct_round_jj
    if getattr(raw, "_tabdp_java", False):
        return

    def correct(self: Any, path: str, base: int, no_partitions: bool, unit_cost: bool
                ) -> None:
        raw(self, path, base, no_partitions, unit_cost)
        with open(path, encoding="utf-8", errors="replace") as fin:
            lines = fin.read().splitlines()
        n = int(lines[1].strip())
        for i in range(2, 2 + n):
            t = lines[i].split()
            if len(t) >= 9 and t[3] == "u" and float(t[1]) < base:
                t[6] = t[7] = t[1]
                t[8] = "0"
                lines[i] = " ".join(t)
        with open(path, "w", encoding="utf-8") as fout:
            fout.write("\n".join(lines) + "\n")

    correct._tabdp_java = True  # type: ignore[attr-defined]
    Engine._correct_round_jj = correct


def _audit(wd: Path, cells: object, cols: list[str]) -> list[dict[str, object]]:
    """Tau-Argus' audit of the suppression pattern, in a fresh engine.

    The engine's audit right after MOD crashes (pytauargus 0.6.0), so the pattern is read back
    into a new run as an a-priori file (secondary cells ``ML``) and audited there.
    """
    import re

    import polars as pl
    from pytauargus.engine import run_batch

    assert isinstance(cells, pl.DataFrame)
    sec = cells.filter(pl.col("status") == "M")
    hst = wd / "secondary.hst"
    hst.write_text("".join(";".join([*map(str, r), "ML"]) + "\n"
                           for r in sec.select(cols).iter_rows()), encoding="utf-8")
    arb = (wd / "tau" / "batch.arb").read_text(encoding="utf-8")
    arb = re.sub(r"<WRITETABLE>.*", "", arb)
    if sec.height:
        arb = re.sub(r"<SUPPRESS>.*", f'<APRIORY> "{hst.resolve()}",1,";"', arb)
    else:
        arb = re.sub(r"<SUPPRESS>.*", "", arb)
    (wd / "tau" / "audit.arb").write_text(arb, encoding="utf-8")
    eng = run_batch(str(wd / "tau" / "audit.arb"))
    rows = list(eng.audit(0))
    # the a-priori bounds of every cell, as the audit's JJ file gives them
    lo, hi = eng._table_cell_bounds(0)
    jj = wd / "tau" / "audit.jj"
    eng._tau.write_jj_format(0, str(jj), lo, hi, False, False, False)
    lines = jj.read_text(encoding="utf-8").splitlines()
    n = int(lines[1])
    bounds = {}
    for line in lines[2:2 + n]:
        f = line.split()
        bounds[int(f[0])] = (float(f[4]), float(f[5]))
    for r in rows:
        r["apriori"] = bounds.get(int(r["cell"]))
    rows.append({"apriori_all": sorted(bounds.items())})
    return rows


if __name__ == "__main__":  # pragma: no cover - run as a subprocess
    raise SystemExit(main())
