"""Benchmark: exactly rounded noise (tabdp.noise.exact) against naive float sampling.

For 1M cells (``--cells``), in the same process and alternating the variants (``--repeat``
rounds after a warm-up; medians compared, so machine-load drift hits both):

* **Laplace and Gaussian**: ``round_noisy(law, q, default grid, seeded RandomSource)`` against the
  naive, floating-point-unsafe ``q + numpy_generator.laplace(...)`` / ``normal(...)``. This is the
  headline ratio (target: within 3x).
* The same exact path with the **secure** default source (OS CSPRNG bits), timed in its own
  alternating group and scaled to the headline group's naive time - naive numpy has no secure
  counterpart, so this ratio includes the cost of ``os.urandom``.
* **The other laws** (generalized Gaussian, ExpPolyLog p = 1, 2, 1.5, PolyPlace, Student t,
  generalized Cauchy, Logistic, Subbotin r = 4, Cauchy as SaS α = 1, SaS α = 1.5 and 1.9):
  exact path against tabdp's own float sampler ``q + law.sample(n)`` (no rounding guarantee;
  Chambers–Mallows–Stuck for SaS), and against numpy's ``standard_t`` / ``logistic`` /
  ``standard_cauchy`` where numpy has the law. Certified tables are built in the warm-up round;
  their one-time build cost is reported separately (``table_build_s``).
* The number of cells decided by the high-precision path (fallbacks) for every law.

Optionally (``--tmlt-python PATH``) it times Tumult Core's per-value Arb sampler
(``tmlt.core.random.laplace.laplace`` and ``continuous_gaussian.gaussian``) on ``--tmlt-cells``
values in a subprocess run by that interpreter, and extrapolates to ``--cells``. tmlt.core is not a
tabdp dependency; create a separate environment for it, e.g.::

    python3 -m venv /tmp/tmlt-venv
    /tmp/tmlt-venv/bin/pip install tmlt.core
    python benchmarks/bench_exact_noise.py --tmlt-python /tmp/tmlt-venv/bin/python

Usage: ``python benchmarks/bench_exact_noise.py [--cells 1000000] [--repeat 5]``.
Writes ``benchmarks/results/exact_noise.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tabdp.noise import (  # noqa: E402
    ExpPolyLog,
    Gaussian,
    GeneralizedCauchy,
    GeneralizedGaussian,
    Laplace,
    Logistic,
    PolyPlace,
    StudentT,
    Subbotin,
    SymmetricStable,
)
from tabdp.noise.exact import default_grid, noise_spread, round_noisy  # noqa: E402
from tabdp.rng import RandomSource  # noqa: E402

_TMLT_SNIPPET = r"""
import json, sys, time
n = int(sys.argv[1])
from tmlt.core.random.laplace import laplace
from tmlt.core.random.continuous_gaussian import gaussian
out = {}
for name, draw in (("laplace", lambda q: laplace(q, 10.0)),
                   ("gaussian", lambda q: gaussian(100.0, q))):
    draw(0.0)
    t0 = time.perf_counter()
    for i in range(n):
        draw(float(i))
    out[name] = (time.perf_counter() - t0) / n
print(json.dumps(out))
"""


def _median_times(variants: dict[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    """Median and minimum time of each variant, the variants alternating in every round."""
    for f in variants.values():      # warm-up (tables, caches, page faults)
        f()
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(repeat):
        for k, f in variants.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    out = {k: statistics.median(v) for k, v in times.items()}
    out.update({f"{k}_min": min(v) for k, v in times.items()})
    return out


def _bench(cells: int, repeat: int) -> list[dict[str, Any]]:
    q = np.random.default_rng(1).integers(0, 10**6, cells).astype(np.float64)
    rows: list[dict[str, Any]] = []
    gen = np.random.default_rng(2)

    def exact(law: Any, secure: bool = False) -> Callable[[], Any]:
        g = default_grid(noise_spread(law))
        src = RandomSource() if secure else RandomSource(seed=3)
        return lambda: round_noisy(law, q, g, src)

    # headline: Laplace and Gaussian against naive numpy
    for _name, law, naive in (
        ("laplace", Laplace(scale=10.0), lambda: q + gen.laplace(0.0, 10.0, cells)),
        ("gaussian", Gaussian(sigma=10.0), lambda: q + gen.normal(0.0, 10.0, cells)),
    ):
        t = _median_times({"naive_numpy": naive, "exact": exact(law)}, repeat)
        # the secure source in its own group (os.urandom's allocations perturb its neighbours)
        ts = _median_times({"naive_numpy": naive, "exact_secure": exact(law, secure=True)},
                           max(1, repeat // 2))
        t["exact_secure"] = ts["exact_secure"] * t["naive_numpy"] / ts["naive_numpy"]
        d = exact(law)()
        rows.append({"law": repr(law), "grid": d.grid.describe(), "baseline": "numpy",
                     "baseline_s": t["naive_numpy"], "exact_s": t["exact"],
                     "exact_secure_s": t["exact_secure"],
                     "ratio": t["exact"] / t["naive_numpy"],
                     "ratio_of_minima": t["exact_min"] / t["naive_numpy_min"],
                     "ratio_secure": t["exact_secure"] / t["naive_numpy"],
                     "fallbacks": d.fallbacks, "fallback_rate": d.fallbacks / cells})

    # the other laws: against tabdp's own float inverse-CDF sampler (and numpy where it has one)
    others = [
        (GeneralizedGaussian(sigma=10.0, p=0.5), None),
        (ExpPolyLog(sigma=10.0, a=1.0, d=4.0), None),
        (ExpPolyLog(sigma=10.0, a=3.0, d=1.0, p=2.0), None),
        (ExpPolyLog(sigma=10.0, a=3.0, d=1.0, p=1.5), None),
        (PolyPlace(s=10.0, alpha=10.0), None),
        (StudentT(df=3.0, scale=10.0), lambda: q + 10.0 * gen.standard_t(3.0, cells)),
        (GeneralizedCauchy(c=4.0, scale=10.0), None),
        (Logistic(scale=10.0), lambda: q + gen.logistic(0.0, 10.0, cells)),
        (Subbotin(r=4.0, scale=10.0), None),
        (SymmetricStable(alpha=1.0, gamma=10.0), lambda: q + 10.0 * gen.standard_cauchy(cells)),
        (SymmetricStable(alpha=1.5, gamma=10.0), None),
        (SymmetricStable(alpha=1.9, gamma=10.0), None),
    ]
    for law, numpy_naive in others:
        src = RandomSource(seed=4)
        variants: dict[str, Callable[[], Any]] = {
            "tabdp_float": lambda law=law, src=src: q + law.sample(cells, src),
            "exact": exact(law)}
        if numpy_naive is not None:
            variants["naive_numpy"] = numpy_naive
        t0 = time.perf_counter()
        exact(law)()                                     # first use: builds the tables
        build = time.perf_counter() - t0
        t = _median_times(variants, max(1, repeat // 2))
        d = exact(law)()
        row = {"law": repr(law), "grid": d.grid.describe(), "baseline": "tabdp float sample()",
               "baseline_s": t["tabdp_float"], "exact_s": t["exact"],
               "ratio": t["exact"] / t["tabdp_float"],
               "ratio_of_minima": t["exact_min"] / t["tabdp_float_min"],
               "fallbacks": d.fallbacks, "fallback_rate": d.fallbacks / cells,
               "table_build_s": max(0.0, build - t["exact"])}
        if numpy_naive is not None:
            row["numpy_s"] = t["naive_numpy"]
            row["ratio_vs_numpy"] = t["exact"] / t["naive_numpy"]
        rows.append(row)
    return rows


def _bench_tmlt(python: str, n: int, cells: int) -> dict[str, Any]:
    try:
        res = subprocess.run([python, "-c", _TMLT_SNIPPET, str(n)], capture_output=True,
                             text=True, check=True, timeout=3600)
    except (OSError, subprocess.SubprocessError) as err:
        return {"error": f"could not time tmlt.core with {python}: {err}"}
    per_value = json.loads(res.stdout.strip().splitlines()[-1])
    return {"per_value_s": per_value, "values_timed": n,
            "extrapolated_s": {k: v * cells for k, v in per_value.items()}}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark and write the JSON results.

    Args:
        argv: Command-line arguments (default: ``sys.argv[1:]``).

    Returns:
        The results dict.
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tmlt-python", default=None,
                    help="interpreter of a separate venv with tmlt.core installed (optional)")
    ap.add_argument("--tmlt-cells", type=int, default=2000)
    ap.add_argument("--out", default=str(HERE / "results" / "exact_noise.json"))
    args = ap.parse_args(argv)

    rows = _bench(args.cells, args.repeat)
    result: dict[str, Any] = {
        "cells": args.cells, "repeat": args.repeat,
        "python": platform.python_version(), "numpy": np.__version__,
        "machine": platform.machine(), "processor": platform.processor(),
        "results": rows,
    }
    if args.tmlt_python:
        tm = _bench_tmlt(args.tmlt_python, args.tmlt_cells, args.cells)
        result["tmlt_core"] = tm
        if "per_value_s" in tm:
            for row in rows:
                key = row["law"].split("(")[0].lower()
                if key in tm["per_value_s"]:
                    row["tmlt_core_extrapolated_s"] = tm["extrapolated_s"][key]
                    row["speedup_vs_tmlt_core"] = tm["extrapolated_s"][key] / row["exact_s"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")

    print(f"| law | grid | baseline | baseline s | exact s | ratio (medians) | ratio (minima) | "
          f"fallbacks ({args.cells} cells) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        rmin = f"{r['ratio_of_minima']:.2f}" if "ratio_of_minima" in r else ""
        print(f"| {r['law']} | {r['grid']} | {r['baseline']} | {r['baseline_s']:.3f} | "
              f"{r['exact_s']:.3f} | {r['ratio']:.2f} | {rmin} | {r['fallbacks']} |")
        if "exact_secure_s" in r:
            print(f"| ... secure source | | | | {r['exact_secure_s']:.3f} | "
                  f"{r['ratio_secure']:.2f} | | |")
        if "ratio_vs_numpy" in r:
            print(f"| ... vs numpy | | numpy | {r['numpy_s']:.3f} | {r['exact_s']:.3f} | "
                  f"{r['ratio_vs_numpy']:.2f} | | |")
    if "tmlt_core" in result:
        print("tmlt.core:", json.dumps(result["tmlt_core"]))
    return result


if __name__ == "__main__":
    main()
