r"""Coverage of the consistent estimate's 90% margins for counts, many draws (issue 30).

The setting of ``bench_hierarchy.py``'s discrete-count check: establishment counts by county ×
sector (every key of the public domains), the measured levels released with
``DiscreteGaussian(σ/√f)`` (σ = 2 at full share, the planned shares ``f`` of
``plan_split``), published by [`consistent`][tabdp.hierarchy.consistent] with ``grid = 1``
(whole numbers, randomized lattice margins). ``--draws`` independent noise draws (default
20,000) go through the public entry point in batches of measures; per level the coverage of
the published 90% intervals (mean over cells and draws), and at the national cell (one cell:
its coverage is a single binomial proportion) also: the empirical variance of the error against
the margin's ``sd² + r/6`` (``r`` rounding ranges below: one per column of the finest cells,
the average variance of their systematic rounding), and a binomial test of coverage = 0.90.

Usage::

    python benchmarks/bench_hierarchy_coverage.py --data data/cbp_sample.parquet --draws 20000

Writes ``benchmarks/results/hierarchy_coverage_<rows>.json``.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from scipy.stats import binomtest  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_hierarchy as bh  # noqa: E402

from tabdp.datasets.synth import generate_establishments  # noqa: E402
from tabdp.hierarchy import Product, consistent, gaussian_shares, plan_split  # noqa: E402
from tabdp.hierarchy.consistent import _round_variance  # noqa: E402
from tabdp.mechanisms import DiscreteGaussian  # noqa: E402

HERE = Path(__file__).resolve().parent


def run(data: Path, draws: int, rho: float, batch: int, sigma: float = 2.0) -> dict[str, Any]:
    load_start = os.getloadavg()
    c0 = time.process_time()
    df = pl.read_parquet(data, columns=["county", "naics2"])
    geo, keys = bh.public()
    truth_f = bh.finest_counts(df, keys)
    forecast = bh.finest_counts(
        generate_establishments(df.height, seed=20261122).select("county", "naics2"), keys)
    prod = Product.build(bh.OUTPUTS, keys, {"geo": geo})
    idx = prod.index(bh.FINEST, truth_f)
    fin = np.zeros(prod.present.size)
    fin[idx] = truth_f["total"].to_numpy()
    fin = fin.reshape(prod.present.shape)
    true = {lv: prod.aggregate(lv, fin).reshape(-1) for lv in bh.OUTPUTS}
    sigma0 = 1.0 / math.sqrt(2.0 * rho)
    shares = plan_split(keys, bh.MEASURED, hierarchies={"geo": geo}, expected=forecast,
                        mechanism_at=gaussian_shares(sigma0), cv=bh.CV, step=0.05,
                        outputs=bh.OUTPUTS).shares
    mech = {lv: DiscreteGaussian(sigma=sigma / math.sqrt(shares[lv])) for lv in bh.MEASURED
            if shares[lv] > 0}
    rng = np.random.default_rng(20261202)
    hits = {lv: 0 for lv in bh.OUTPUTS}
    cells = {lv: 0 for lv in bh.OUTPUTS}
    nat_err: list[np.ndarray] = []
    nat_moe: list[np.ndarray] = []
    nat_sd = 0.0
    for s0 in range(0, draws, batch):
        nb = min(batch, draws - s0)
        names = [f"n{k}" for k in range(nb)]
        rel = {}
        for lv, m in mech.items():
            t = true[lv]
            noise = m.release_table(np.zeros(t.size * nb), rng=rng).estimate.reshape(nb, -1)
            k = prod.keys(lv) if lv else pl.DataFrame()
            rel[lv] = pl.concat([k, pl.DataFrame({n: t + noise[j] for j, n in enumerate(names)})],
                                how="horizontal")
        out = consistent(rel, measures=names, hierarchies={"geo": geo}, mechanisms=mech,
                         outputs=bh.OUTPUTS, grid=1.0,
                         output_keys={lv: prod.keys(lv) for lv in bh.OUTPUTS if lv})
        for lv in bh.OUTPUTS:
            o = out[lv]
            err = np.stack([o[n].to_numpy() - true[lv] for n in names])
            moe = np.stack([o[f"{n}_moe"].to_numpy() for n in names])
            hits[lv] += int(np.sum(np.abs(err) <= moe))
            cells[lv] += err.size
            if not lv:
                nat_err.append(err[:, 0])
                nat_moe.append(moe[:, 0])
                nat_sd = float(o[f"{names[0]}_sd"][0])
    e = np.concatenate(nat_err)
    h = np.concatenate(nat_moe)
    n_fin = int(prod.present.sum())
    nat_rvar = float(_round_variance(prod, *prod.pair(()), 1.0).item())
    k_hit = int(np.sum(np.abs(e) <= h))
    test = binomtest(k_hit, e.size, 0.9)
    return {
        "data": str(data), "rows": df.height, "draws": draws, "sigma_finest_full_share": sigma,
        "planned_shares": {bh.label(k): v for k, v in shares.items()},
        "coverage90": {bh.label(lv): hits[lv] / cells[lv] for lv in bh.OUTPUTS},
        "cells_x_draws": {bh.label(lv): cells[lv] for lv in bh.OUTPUTS},
        "national": {
            "coverage90": k_hit / e.size, "binomial_se": math.sqrt(0.09 / e.size),
            "p_value_coverage_0.90": test.pvalue,
            "ci_99": list(test.proportion_ci(0.99)),
            # the published sd includes the rounding variance: 1/6 per rounding range
            # (one per column of the finest cells, `_block_round`)
            "sd_estimator": math.sqrt(max(nat_sd**2 - nat_rvar, 0.0)),
            "rounding_variance": nat_rvar,
            "finest_cells": n_fin, "margin_sd_t": nat_sd,
            "empirical_sd_error": float(e.std()), "mean_error": float(e.mean()),
            "margins_seen": sorted({float(x) for x in np.unique(h)}),
        },
        "cpu_seconds": time.process_time() - c0,
        "load_average_start": load_start, "load_average_end": os.getloadavg(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=Path("data/cbp_sample.parquet"))
    ap.add_argument("--draws", type=int, default=20_000)
    ap.add_argument("--rho", type=float, default=0.02)
    ap.add_argument("--batch", type=int, default=250)
    args = ap.parse_args()
    rep = run(args.data, args.draws, args.rho, args.batch)
    out = HERE / "results" / f"hierarchy_coverage_{rep['rows']}.json"
    out.write_text(json.dumps(rep, indent=1, default=str))
    print(json.dumps(rep, indent=1, default=str))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
