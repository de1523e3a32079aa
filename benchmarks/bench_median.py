"""Benchmark: error of private medians by noise family (issue 4, seed 002).

Median annual payroll per establishment by state × 2-digit NAICS on synthetic CBP-like data
(:func:`tabdp.datasets.synth.generate_establishments`, one row per establishment), public bounds
(0, 1e9), ε = 1 per release, released with ``df.dp.median`` for each smooth-sensitivity noise
family at its default γ:

* PolyPlace (γ = ε/3, pure ε-DP) — the default;
* Student's t (Bun–Steinke, γ = 0.15ε, std-optimal d, pure ε-DP);
* Laplace with smooth sensitivity (Nissim–Raskhodnikova–Smith, δ = 1e-5, γ = ε/(2 ln(2/δ)),
  only (ε, δ)-DP);
* generalized Cauchy (NRS, γ = 0.15ε, std-optimal c, pure ε-DP);

plus PolyPlace at the γ picked by :func:`tabdp.mechanisms.smooth.choose_gamma` from public guesses
only: a typical cell size n = rows / cells and the default spread and centre derived from the
bounds.

Each configuration is released ``--seeds`` times (independent noise, same data). Errors are
``estimate − true median`` of the values clipped to the bounds (the lower median, computed here
with a Polars group-by). Reported over all cells × seeds: the median absolute error, the RMSE,
the median absolute relative error ``|error| / true median``, the RMSE predicted from the
released ``_sd`` columns, and the ratios of median |error| and RMSE to PolyPlace's.

Usage: ``python benchmarks/bench_median.py [--rows 1000000] [--seeds 20]``.
Writes ``benchmarks/results/median.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import numpy as np
import polars as pl

import tabdp
from tabdp.datasets.synth import generate_establishments, naics2_domain, state_domain
from tabdp.mechanisms import SmoothSensitivityMechanism
from tabdp.mechanisms.smooth import choose_gamma

HERE = Path(__file__).resolve().parent
BY = ["state", "naics2"]
BOUNDS = (0.0, 1e9)
EPSILON = 1.0
DELTA = 1e-5


def true_medians(df: pl.DataFrame, keys: tabdp.KeySet) -> tuple[np.ndarray, np.ndarray]:
    """Lower median of the clipped payroll and the cell size, per key (key-set order)."""
    agg = (df.with_columns(pl.col("state").cast(pl.String), pl.col("naics2").cast(pl.String))
           .group_by(BY)
           .agg(pl.col("payroll").clip(*BOUNDS).quantile(0.5, interpolation="lower")
                .alias("truth"), pl.len().alias("n")))
    placed = keys.to_polars().join(agg, on=BY, how="left", maintain_order="left")
    n = placed["n"].fill_null(0).to_numpy().astype(np.int64)
    truth = placed["truth"].fill_null(BOUNDS[0]).to_numpy()  # empty cell: the padded low bound
    return truth, n


def run(df: pl.DataFrame, keys: tabdp.KeySet, truth: np.ndarray, noise: str,
        gamma: float | None, seeds: int) -> dict[str, object]:
    """Release the medians ``seeds`` times; error statistics over cells × seeds."""
    delta = DELTA if noise == "laplace" else None
    mech = SmoothSensitivityMechanism(noise, EPSILON, gamma, delta=delta)
    errs, sds = [], []
    t0 = time.perf_counter()
    for seed in range(seeds):
        out = df.dp.median("payroll", by=BY, keys=keys, bounds=BOUNDS, epsilon=EPSILON,
                           noise=noise, gamma=mech.gamma, delta=delta,
                           session=tabdp.Session(seed=1000 + seed))
        errs.append(out["payroll_median"].to_numpy() - truth)
        sds.append(out["payroll_median_sd"].to_numpy())
    secs = (time.perf_counter() - t0) / seeds
    err = np.concatenate(errs)
    sd = np.concatenate(sds)
    per_seed_mae = [float(np.median(np.abs(e))) for e in errs]
    rel = np.abs(err) / np.tile(truth, seeds)
    return {
        "noise": noise,
        "gamma": mech.gamma,
        "shape": mech.shape,
        "guarantee": mech.guarantee(),
        "std_per_unit_ss": mech.unit.std(),
        "median_abs_error": float(np.median(np.abs(err))),
        "rmse": float(np.sqrt(np.mean(err**2))),
        "median_abs_rel_error": float(np.median(rel)),
        "rmse_predicted_from_sd": float(np.sqrt(np.mean(sd**2))),
        "median_abs_error_per_seed": {"min": min(per_seed_mae), "max": max(per_seed_mae)},
        "seconds_per_release": secs,
    }


def main() -> None:
    """Run the benchmark, print a Markdown table and write the JSON results."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--data-seed", type=int, default=20261121)
    args = ap.parse_args()

    t_start = time.perf_counter()
    df = generate_establishments(args.rows, seed=args.data_seed)
    keys = tabdp.KeySet.from_dict(state=state_domain(), naics2=naics2_domain())
    truth, n = true_medians(df, keys)
    # a public guess of the typical cell size: rows / cells (spread and centre from the bounds)
    n_guess = max(1, round(args.rows / len(keys)))
    g_chosen = choose_gamma(EPSILON, "polyplace", bounds=BOUNDS, n=n_guess)

    configs = [("polyplace", None, "polyplace (default γ)"),
               ("student_t", None, "student_t"),
               ("laplace", None, "laplace-SS (δ=1e-5)"),
               ("cauchy", None, "cauchy"),
               ("polyplace", g_chosen, f"polyplace (choose_gamma, n≈{n_guess})")]
    results = []
    for noise, gamma, label in configs:
        r = run(df, keys, truth, noise, gamma, args.seeds)
        r["label"] = label
        results.append(r)
    base = results[0]
    for r in results:
        r["ratio_median_abs_error_vs_polyplace"] = r["median_abs_error"] / base["median_abs_error"]
        r["ratio_rmse_vs_polyplace"] = r["rmse"] / base["rmse"]

    meta = {"rows": args.rows, "cells": len(keys), "seeds": args.seeds,
            "data_seed": args.data_seed, "bounds": list(BOUNDS), "epsilon": EPSILON,
            "cell_size": {"min": int(n.min()), "median": float(np.median(n)),
                          "max": int(n.max())},
            "true_median": {"min": float(truth.min()), "median": float(np.median(truth)),
                            "max": float(truth.max())},
            "choose_gamma": {"n_guess": n_guess, "gamma": g_chosen},
            "python": platform.python_version(), "machine": platform.machine(),
            "seconds_total": time.perf_counter() - t_start}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "median.json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=2))

    print(f"Median payroll per establishment, {args.rows:,} establishments, {len(keys)} cells "
          f"(state × naics2; {n.min():,}–{n.max():,} establishments per cell, median "
          f"{np.median(n):,.0f}), bounds (0, 1e9), ε = {EPSILON:g}, {args.seeds} seeds.\n")
    print("| noise | γ | guarantee | median abs error ($) | RMSE ($) | median rel. error | "
          "RMSE from _sd ($) | median abs error / PolyPlace | RMSE / PolyPlace |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        gtee = r["guarantee"]
        kind = (f"ε={gtee['epsilon']:g}" if gtee["type"] == "pure"  # type: ignore[index]
                else f"(ε={gtee['epsilon']:g}, δ={gtee['delta']:g})")  # type: ignore[index]
        print(f"| {r['label']} | {r['gamma']:.4g} | {kind} | {r['median_abs_error']:,.0f} | "
              f"{r['rmse']:,.0f} | {100 * r['median_abs_rel_error']:.2f}% | "  # type: ignore[operator]
              f"{r['rmse_predicted_from_sd']:,.0f} | "
              f"{r['ratio_median_abs_error_vs_polyplace']:.2f}x | "
              f"{r['ratio_rmse_vs_polyplace']:.2f}x |")
    print(f"\nTotal {meta['seconds_total']:.1f} s "
          f"({results[0]['seconds_per_release']:.2f} s per release of {len(keys)} medians).")
    assert math.isfinite(base["rmse"])  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
