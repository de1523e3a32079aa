"""Benchmark: the certified Subbotin (ε, δ) policy (r ∉ {1, 2}) against its float solver.

``epsilon_for_scale("subbotin", ...)`` with r ∉ {1, 2} — the per-record ledger's policy of
``Subbotin(r, scale, delta=...)`` — refines and verifies the float solver's ε for every distinct
Δ/scale in Arb ball arithmetic (issue 29 item 6). This measures, in one process and interleaved,
the float solver alone (the former answer, calibrated to δ·(1 − 1e-7)) and the certified
answer, at a given number of distinct sensitivities (log-uniform over [1e-3, 1e3], scale 2,
δ = 1e-6), reporting CPU seconds (process user + sys), wall seconds and the load average.

Usage::

    python benchmarks/bench_subbotin_certified.py --distinct 1000 100000 --r 3 --repeat 1
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from tabdp.privacy import approx


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _run(n: int, r: float, repeat: int) -> None:
    rng = np.random.default_rng(1)
    d = np.exp(rng.uniform(np.log(1e-3), np.log(1e3), n))
    law = approx._law(r)
    ub = np.unique(d / 2.0)
    rows: dict[str, list[tuple[float, float]]] = {"float": [], "certified": []}
    for _ in range(repeat):
        for name in rows:
            c0, w0 = _cpu(), time.perf_counter()
            if name == "float":
                approx._eps_direct(ub, 1e-6 * (1.0 - 1e-9), law)
            else:
                approx.epsilon_for_scale("subbotin", 2.0, 1e-6, d, r=r)
            rows[name].append((_cpu() - c0, time.perf_counter() - w0))
    load = os.getloadavg()
    f = np.median([c for c, _ in rows["float"]])
    c = np.median([c for c, _ in rows["certified"]])
    cw = np.median([w for _, w in rows["certified"]])
    print(
        f"distinct={n:>8} r={r:g} load={load[0]:.1f}/{load[1]:.1f}: float {f:.2f} CPU-s, "
        f"certified {c:.2f} CPU-s ({cw:.1f} s wall), {1e6 * c / n:.0f} us CPU per value, "
        f"ratio {c / max(f, 1e-9):.0f}x"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--distinct", type=int, nargs="+", default=[1000, 100_000])
    ap.add_argument("--r", type=float, nargs="+", default=[3.0])
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    for r in a.r:
        for n in a.distinct:
            _run(n, r, a.repeat)


if __name__ == "__main__":
    main()
