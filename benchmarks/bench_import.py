"""Benchmark: start-up cost of tabdp against Polars, each in a fresh interpreter.

Every measurement starts a new ``python`` process (nothing cached in ``sys.modules``; the OS file
cache is warm after the first round) and times, inside it, the statement alone with
``time.perf_counter``, so the interpreter's own start-up is excluded. Rounds interleave the
statements, so a machine that slows down mid-run slows all of them alike. Measured:

* ``import polars`` and ``import pandas`` — the reference points;
* ``import tabdp`` — the package alone (SciPy, Matplotlib, mpmath, python-flint, pandas and
  Polars load on first use);
* ``import polars, tabdp`` and ``import polars, tabdp + first .dp use`` — what a Polars user pays
  before the first release (the latter imports the frame layer and the mechanisms);
* ``tabdp --help`` — the command line's whole start-up (interpreter included: wall clock of the
  process), the figure a user waits for.

Reported: the median and minimum over ``--rounds`` rounds, and each median as a ratio of
``import polars``'s.

Usage: ``python benchmarks/bench_import.py [--rounds 15]``.
Writes ``benchmarks/results/import.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

FIRST_USE = ("import polars as pl, tabdp\n"
             "df = pl.DataFrame({'c': ['a', 'b'], 'x': [1.0, 2.0]})\n"
             "df.dp.sum('x', by='c', keys=tabdp.KeySet.from_dict(c=['a', 'b']),\n"
             "          mechanism=tabdp.mechanisms.Gaussian(sigma=1.0),\n"
             "          session=tabdp.Session(seed=1))")
STATEMENTS = {
    "import polars": "import polars",
    "import pandas": "import pandas",
    "import tabdp": "import tabdp",
    "import polars, tabdp": "import polars, tabdp",
    "import polars, tabdp + first .dp use": FIRST_USE,
}
TIMER = ("import time\nt0 = time.perf_counter()\nexec(compile({src!r}, '<bench>', 'exec'))\n"
         "print(time.perf_counter() - t0)")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def time_statement(src: str) -> float:
    """Seconds ``src`` takes in a fresh interpreter (interpreter start-up excluded)."""
    out = subprocess.run([sys.executable, "-c", TIMER.format(src=src)], env=_env(), check=True,
                         capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def time_cli_help() -> float:
    """Wall-clock seconds of ``python -m tabdp.cli --help`` (the whole process)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tabdp.cli", "--help"], env=_env(), check=True,
                   capture_output=True)
    return time.perf_counter() - t0


def time_bare_interpreter() -> float:
    """Wall-clock seconds of ``python -c pass`` (what every process pays before importing)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=_env(), check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    """Run the rounds, write the JSON results and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    samples: dict[str, list[float]] = {k: [] for k in [*STATEMENTS, "tabdp --help (process)",
                                                       "python -c pass (process)"]}
    for src in STATEMENTS.values():  # warm the file cache once, untimed
        time_statement(src)
    for _ in range(args.rounds):
        for name, src in STATEMENTS.items():
            samples[name].append(time_statement(src))
        samples["tabdp --help (process)"].append(time_cli_help())
        samples["python -c pass (process)"].append(time_bare_interpreter())

    ref = statistics.median(samples["import polars"])
    results = [{"statement": name, "median_s": statistics.median(xs), "min_s": min(xs),
                "ratio_to_import_polars": statistics.median(xs) / ref, "rounds": len(xs)}
               for name, xs in samples.items()]
    import numpy
    import pandas
    import polars
    import scipy

    import tabdp

    meta = {"python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "tabdp": tabdp.__version__, "polars": polars.__version__,
            "pandas": pandas.__version__, "numpy": numpy.__version__, "scipy": scipy.__version__,
            "rounds": args.rounds, "when": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "import.json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=2) + "\n")

    print(f"Python {meta['python']}, {meta['cpus']} CPUs, {args.rounds} rounds "
          f"(polars {meta['polars']}, pandas {meta['pandas']})\n")
    print("| statement | median (s) | min (s) | median / import polars |")
    print("|---|---:|---:|---:|")
    for r in results:
        print(f"| `{r['statement']}` | {r['median_s']:.3f} | {r['min_s']:.3f} | "
              f"{r['ratio_to_import_polars']:.2f} |")


if __name__ == "__main__":
    main()
