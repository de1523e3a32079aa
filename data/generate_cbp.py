"""Generate synthetic CBP-like establishment microdata and write it as Parquet (zstd).

The committed sample ``data/cbp_sample.parquet`` was made with::

    python data/generate_cbp.py --rows 100000 --seed 20261121 --compression-level 19 \
        --out data/cbp_sample.parquet --force

and equals ``tabdp.datasets.synth.generate_establishments(100_000, seed=20261121)`` exactly
(``tests/test_synth.py`` checks this). See ``data/README.md`` for the columns and the model.

``--out`` is required and an existing file is replaced only with ``--force``, so the shipped
sample is never overwritten by accident. The file is written with zstd at Polars' default level
(fast at any size); ``--compression-level`` (1-22) trades time for size: level 19 is what the
small shipped sample uses, and takes minutes for millions of rows.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

try:
    from tabdp.datasets.synth import generate_establishments
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tabdp.datasets.synth import generate_establishments

SAMPLE_ROWS = 100_000
SAMPLE_SEED = 20261121


def _parse_counties(text: str) -> int | list[int]:
    parts = [int(p) for p in text.split(",") if p.strip()]
    return parts[0] if len(parts) == 1 else parts


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, generate the data and write the Parquet file.

    Args:
        argv: Command-line arguments (default: ``sys.argv[1:]``).

    Returns:
        The process exit code (0 on success).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=SAMPLE_ROWS,
                        help="number of establishments (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=SAMPLE_SEED,
                        help="random seed (default: %(default)s)")
    parser.add_argument("--out", type=Path, required=True,
                        help="output Parquet file (required; an existing file is replaced only "
                             "with --force)")
    parser.add_argument("--force", action="store_true",
                        help="replace the output file if it exists")
    parser.add_argument("--n-states", type=int, default=10,
                        help="number of states, 1..51 (default: %(default)s)")
    parser.add_argument("--counties-per-state", type=_parse_counties, default=30,
                        help="counties per state: one int, or comma-separated ints, one per "
                             "state (default: %(default)s)")
    parser.add_argument("--unit-rows", action="store_true",
                        help="write establishment-quarter rows instead of establishments")
    parser.add_argument("--categorical", action="store_true",
                        help="store text columns as Enum (dictionary) over the public domains")
    parser.add_argument("--compression-level", type=int, default=None,
                        help="zstd level, 1-22 (default: Polars' default level; 19 makes files "
                             "about 10%% smaller and is slow for millions of rows)")
    args = parser.parse_args(argv)
    if args.out.exists() and not args.force:
        parser.error(f"{str(args.out)!r} already exists; generate_cbp.py never replaces a file "
                     "by default (the shipped sample lives at data/cbp_sample.parquet). Choose "
                     "another --out, or pass --force to replace it.")
    if args.compression_level is not None and not 1 <= args.compression_level <= 22:
        parser.error(f"--compression-level must be 1-22, got {args.compression_level}; leave it "
                     "out for the default level.")

    level = "default" if args.compression_level is None else str(args.compression_level)
    print(f"generating {args.rows:,} establishments (seed {args.seed}) ...", flush=True)
    start = time.perf_counter()
    df = generate_establishments(
        args.rows, seed=args.seed, n_states=args.n_states,
        counties_per_state=args.counties_per_state, unit_rows=args.unit_rows,
        categorical=args.categorical)
    generated = time.perf_counter() - start
    print(f"generated {df.height:,} rows in {generated:.1f} s; writing {args.out} (zstd level "
          f"{level}) ...", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    written = time.perf_counter()
    tmp = args.out.with_name(args.out.name + ".partial")  # an interrupted run leaves no half file
    df.write_parquet(
        tmp, compression="zstd", compression_level=args.compression_level,
        metadata={
            "generator": "tabdp.datasets.synth.generate_establishments",
            "rows": str(args.rows), "seed": str(args.seed), "n_states": str(args.n_states),
            "counties_per_state": str(args.counties_per_state),
            "unit_rows": str(args.unit_rows), "categorical": str(args.categorical),
        })
    tmp.replace(args.out)
    size = args.out.stat().st_size
    print(f"wrote {args.out}: {df.height:,} rows x {df.width} columns, {size / 1e6:.2f} MB "
          f"(generated in {generated:.2f} s, written in {time.perf_counter() - written:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
