"""Benchmark: the author-mode declared read with its UTF-8 check (issue 27, review R14).

`tabdp.release.declared.scan_declared` first reads the declared text columns of every file on
their own (``null_count``, all files in one parallel pass) so that a file holding text that is
not UTF-8 is read leniently instead of stopping the run. This measures that check's cost on the
normal path (every value UTF-8): the declared read of ``N`` synthetic establishments
(`tabdp.datasets.synth.generate_establishments`, all 11 columns declared, 6 of them text),
written as ``--files`` Parquet files, collected in full, with the check
(``scan_declared(...)``) and without it (``schema_only=True``: the read before the check), and
a plain ``pl.scan_parquet`` of the folder as the baseline. Interleaved rounds, medians, ratios
to the baseline taken in the same process; the load average is printed with them (the machine
may be shared).

Usage: ``python benchmarks/bench_declared_read.py [--rows 1000000] [--files 8] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import interleaved_times  # noqa: E402


def main() -> None:
    """Write the files, time the three reads, print the medians and ratios."""
    from tabdp.datasets.synth import generate_establishments
    from tabdp.release.declared import scan_declared

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    df = generate_establishments(args.rows, seed=20261126, n_states=50, counties_per_state=63)
    schema = dict(df.schema)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        step = -(-df.height // args.files)
        for i in range(args.files):
            df.slice(i * step, step).write_parquet(folder / f"part-{i:03d}.parquet")
        fns = {
            "plain scan_parquet": lambda: pl.scan_parquet(folder).collect(),
            "declared, no check": lambda: scan_declared(folder, schema,
                                                        schema_only=True).collect(),
            "declared, UTF-8 check": lambda: scan_declared(folder, schema).collect(),
        }
        load = os.getloadavg()
        times = interleaved_times(fns, args.repeat)
        load_after = os.getloadavg()
    base = statistics.median(times["plain scan_parquet"])
    print(f"{args.rows:,} rows in {args.files} files, {args.repeat} rounds; "
          f"load average {load} before, {load_after} after")
    print("| read | median s | ratio to plain |")
    print("|---|---|---|")
    for k, v in times.items():
        m = statistics.median(v)
        print(f"| {k} | {m:.3f} | {m / base:.2f} |")
    check = statistics.median(times["declared, UTF-8 check"])
    old = statistics.median(times["declared, no check"])
    print(f"UTF-8 check: x{check / old:.3f} of the declared read without it")


if __name__ == "__main__":
    main()
