"""Two truths about consistent tables (docs/hierarchy.md), measured on small seeded examples.

1. **Rounding can make a measured level worse than its own direct release.** One state of
   ``n = 30`` counties, counties measured with ``DiscreteGaussian(2)`` and the state with
   ``DiscreteGaussian(3)``. The GLS state estimate has sd ``1/sqrt(1/9 + 1/(30·4))`` = 2.89,
   below the direct release's 3.0; with ``integer=True`` the finest cells are rounded
   stochastically and independently, the state is the sum of 30 rounded cells, and its sd is
   ``sqrt(2.89² + 30/6)`` = 3.66 > 3.0. Printed: the published sd and the empirical error sd
   over ``--seeds`` noise draws, with and without ``integer``.
2. **Heavy-tailed (leptokurtic) additive noise over-covers.** 4 states × 8 counties, county and
   state measured with the same mechanism; the margin of such a table is the normal
   approximation ``z·sd``; printed: the coverage of the 90% intervals per level (pooled over
   cells and draws) for Laplace, generalized Gaussian with p = 0.5 and 0.3, and ExpPolyLog.

Seeds: the true values come from ``numpy.random.default_rng(20261205)``; draw ``s`` uses noise
seed ``s`` for the finest level and ``10**6 + s`` for the coarser one (``s`` in
``range(--seeds)``).

Usage::

    python benchmarks/bench_consistent_sd_and_tails.py --seeds 400

About 20 s of CPU at 400 seeds.
"""

from __future__ import annotations

import argparse

import numpy as np
import polars as pl

from tabdp.hierarchy import consistent
from tabdp.mechanisms import DiscreteGaussian, ExpPolyLog, GeneralizedGaussian, Laplace

TRUTH_SEED = 20261205


def rounding(seeds: int) -> None:
    n = 30
    counties = [f"c{i:02d}" for i in range(n)]
    geo = pl.DataFrame({"state": ["X"] * n, "county": counties})
    truth = np.random.default_rng(TRUTH_SEED).integers(0, 50, n).astype(float)
    mc, ms = DiscreteGaussian(2.0), DiscreteGaussian(3.0)
    for label, opts in (("integer=False", {}), ("integer=True", {"integer": True})):
        errs, direct, sd = [], [], float("nan")
        for seed in range(seeds):
            yc = mc.release_table(truth, rng=seed).estimate
            ys = ms.release_table([truth.sum()], rng=10**6 + seed).estimate
            rel = {("county",): pl.DataFrame({"county": counties, "n": yc}),
                   ("state",): pl.DataFrame({"state": ["X"], "n": ys})}
            st = consistent(rel, measures=["n"], hierarchies={"geo": geo},
                            mechanisms={("county",): mc, ("state",): ms}, **opts)[("state",)]
            errs.append(st["n"][0] - truth.sum())
            direct.append(ys[0] - truth.sum())
            sd = float(st["n_sd"][0])
        print(f"rounding, {label}: published state sd {sd:.3f}, empirical error sd "
              f"{np.std(errs, ddof=1):.3f}; direct release sd 3.0 (empirical "
              f"{np.std(direct, ddof=1):.3f}); {seeds} draws")


def tails(seeds: int) -> None:
    s, c = 4, 8
    states = [f"s{i}" for i in range(s)]
    counties = [f"s{i}c{j}" for i in range(s) for j in range(c)]
    geo = pl.DataFrame({"state": [x[:2] for x in counties], "county": counties})
    truth = np.random.default_rng(TRUTH_SEED).integers(0, 100, s * c).astype(float)
    tstate = truth.reshape(s, c).sum(axis=1)
    levels = ((("county",), "county", truth), (("state",), "state", tstate),
              ((), "nation", np.array([truth.sum()])))
    for mech in (Laplace(scale=1.0), GeneralizedGaussian(sigma=1.0, p=0.5),
                 GeneralizedGaussian(sigma=1.0, p=0.3), ExpPolyLog(1.0, 1.0, 4.0, 1.0)):
        hits = dict.fromkeys(("county", "state", "nation"), 0)
        for seed in range(seeds):
            yc = mech.release_table(truth, rng=seed).estimate
            ys = mech.release_table(tstate, rng=10**6 + seed).estimate
            rel = {("county",): pl.DataFrame({"county": counties, "n": yc}),
                   ("state",): pl.DataFrame({"state": states, "n": ys})}
            out = consistent(rel, measures=["n"], hierarchies={"geo": geo}, mechanisms=mech,
                             outputs=[key for key, _, _ in levels], level=0.9)
            for key, name, t in levels:
                f = out[key]
                hits[name] += int(np.sum((f["n_lower"].to_numpy() <= t)
                                         & (t <= f["n_upper"].to_numpy())))
        cells = {"county": s * c, "state": s, "nation": 1}
        print(f"tails, {mech!r}: 90% coverage " + ", ".join(
            f"{k} {hits[k] / (cells[k] * seeds):.3f} ({cells[k] * seeds} cell-draws)"
            for k in hits))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=400)
    args = parser.parse_args()
    rounding(args.seeds)
    tails(args.seeds)


if __name__ == "__main__":
    main()
