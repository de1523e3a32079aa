r"""Consistent hierarchical tables (issue 30): GLS vs rollup-only vs direct-only, many seeds.

Establishment counts by geography × industry on a CBP-like sample (every key of the public
domains, empty cells included). Each establishment is in one cell of every level, so a level
released with ``Gaussian(σ)`` charges it ρ = 1/(2σ²) there; at equal per-record loss ρ:

* **rollup-only**: all of ρ on county × sector (σ₀ = 1/√(2ρ)); every other level is a sum.
* **direct-only (planned split)**: the measured levels county × sector, state × sector,
  sector (national) and county (all industries) each released with ``σ₀/√f_l`` for the shares
  ``f_l`` of [`plan_split`][tabdp.hierarchy.plan_split]; unmeasured levels (state, nation) are
  sums of the county × sector release (today's ``direct = true``: no post-processing).
* **consistent (planned split)**: the same four releases, post-processed by GLS.
* **consistent (equal split)**: shares 1/4 each.

The planner's forecast of cell totals is a *different* synthetic sample (another seed of the
same generator: a stand-in for last year's public figures), never the data released.

Metrics over ``--seeds`` noise draws (the 200 draws are solved at once: the solver takes many
right-hand sides): RMSE per level, bias per level with its standard error (mean over cells and
seeds of the error; se from the seeds), coverage of the 90% intervals (exact Gaussian law),
usable cells (published cv = sd/|estimate| < 0.3), additivity (integer grid: every parent equals
the sum of its children in every level pair), the bias of the non-negative and integer options,
and solve times (entry point on the sample; the solver alone on synthetic products of 1M and
10M cells, with the full key set and with ``--absent`` (30%) of the finest cells absent at
random, and county × six-digit industry products; one BLAS thread, CPU seconds and the load
average recorded with each).

Usage::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_hierarchy.py \
        --data data/cbp_sample.parquet --seeds 200

Writes ``benchmarks/results/hierarchy_<rows>.json`` and prints a Markdown table.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

try:
    import tabdp  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tabdp.datasets.synth import generate_establishments, public_domains  # noqa: E402
from tabdp.hierarchy import Product, Tree, consistent, gaussian_shares, plan_split, solve  # noqa: E402
from tabdp.mechanisms import DiscreteGaussian, Gaussian  # noqa: E402

HERE = Path(__file__).resolve().parent
Z90 = 1.6448536269514722
CV = 0.3
FINEST = ("county", "naics2")
MEASURED = [("county", "naics2"), ("state", "naics2"), ("naics2",), ("county",)]
OUTPUTS = [("county", "naics2"), ("state", "naics2"), ("naics2",), ("county",), ("state",), ()]


def label(lv: tuple[str, ...]) -> str:
    return " x ".join(lv) if lv else "national"


def public() -> tuple[pl.DataFrame, pl.DataFrame]:
    doms = public_domains()
    geo = pl.DataFrame({"county": doms["county"]}).with_columns(
        state=pl.col("county").str.slice(0, 2)).select("state", "county")
    keys = geo.select("county").join(pl.DataFrame({"naics2": doms["naics2"]}), how="cross")
    return geo, keys


def finest_counts(df: pl.DataFrame, keys: pl.DataFrame) -> pl.DataFrame:
    agg = df.group_by(list(FINEST)).agg(total=pl.len().cast(pl.Float64))
    return keys.join(agg, on=list(FINEST), how="left").with_columns(
        pl.col("total").fill_null(0.0))


def run(data: Path, seeds: int, rho: float, step: float, timing_cells: list[int],
        naics_counties: list[int], absent: float = 0.3,
        naics_absent_counties: tuple[int, ...] = ()) -> dict[str, Any]:
    load_start = os.getloadavg()
    df = pl.read_parquet(data, columns=["county", "naics2"])
    geo, keys = public()
    truth_f = finest_counts(df, keys)
    forecast = finest_counts(
        generate_establishments(df.height, seed=20261122).select("county", "naics2"), keys)
    prod = Product.build(OUTPUTS, keys, {"geo": geo})
    idx = prod.index(FINEST, truth_f)
    fin = np.zeros(prod.present.size)
    fin[idx] = truth_f["total"].to_numpy()
    fin = fin.reshape(prod.present.shape)
    true = {lv: prod.aggregate(lv, fin) for lv in OUTPUTS}
    sigma0 = 1.0 / math.sqrt(2.0 * rho)

    t0 = time.perf_counter()
    plan = plan_split(keys, MEASURED, hierarchies={"geo": geo}, expected=forecast,
                      mechanism_at=gaussian_shares(sigma0), cv=CV, step=step, outputs=OUTPUTS)
    t_plan = time.perf_counter() - t0
    shares = plan.shares
    equal = {lv: 1.0 / len(MEASURED) for lv in MEASURED}
    rng = np.random.default_rng(12345)

    def draw(lv: tuple[str, ...], sd: float) -> np.ndarray:
        t = true[lv]
        return t[:, :, None] + rng.normal(0.0, sd, t.shape + (seeds,))

    def summary(est: dict[tuple[str, ...], np.ndarray], sd: dict[tuple[str, ...], np.ndarray]
                ) -> dict[str, Any]:
        out = {}
        for lv in OUTPUTS:
            err = est[lv] - true[lv][:, :, None]
            s = sd[lv]
            cover = float(np.mean(np.abs(err) <= Z90 * s[:, :, None])) if np.all(s > 0) \
                else None
            per_seed_bias = err.mean(axis=(0, 1))
            with np.errstate(divide="ignore"):
                cv = s[:, :, None] / np.abs(est[lv])
            out[label(lv)] = {
                "rmse": float(np.sqrt(np.mean(err**2))),
                "bias": float(per_seed_bias.mean()),
                "bias_se": float(per_seed_bias.std(ddof=1) / math.sqrt(seeds)),
                "coverage90": cover,
                "usable": float(np.mean(cv < CV)),
                "sd": float(np.sqrt(np.mean(s**2))),
            }
        return out

    results: dict[str, Any] = {}
    # rollup-only
    y0 = draw(FINEST, sigma0)
    est_r = {lv: prod.aggregate(lv, y0[:, :, :]) for lv in OUTPUTS}
    n_cells = {lv: prod.aggregate(lv, prod.present.astype(float)) for lv in OUTPUTS}
    sd_r = {lv: sigma0 * np.sqrt(n_cells[lv]) for lv in OUTPUTS}
    results["rollup_only"] = summary(est_r, sd_r)

    def releases(sh: dict[tuple[str, ...], float]) -> dict[tuple[int, int], Any]:
        ms = {}
        for lv in MEASURED:
            if sh[lv] == 0.0:
                continue
            sd = sigma0 / math.sqrt(sh[lv])
            y = draw(lv, sd)
            ms[prod.pair(lv)] = (y, np.full(true[lv].shape, 1.0 / sd**2), lv, sd)
        return ms

    def gls(ms: dict[tuple[int, int], Any]) -> tuple[dict, dict, float]:
        t = time.perf_counter()
        res = solve(prod.outer.tree, prod.inner.tree, prod.present,
                    {k: (v[0], v[1]) for k, v in ms.items()})
        dt = time.perf_counter() - t
        fin_e = res.x[-1]
        est = {lv: prod.aggregate(lv, fin_e) for lv in OUTPUTS}
        sd = {lv: np.sqrt(res.variance(*prod.pair(lv))) for lv in OUTPUTS}
        return est, sd, dt

    ms_p = releases(shares)
    # direct-only: measured levels as released; the others sums of the finest release
    est_d, sd_d = {}, {}
    fine = ms_p[prod.pair(FINEST)]
    for lv in OUTPUTS:
        if prod.pair(lv) in ms_p:
            v = ms_p[prod.pair(lv)]
            est_d[lv], sd_d[lv] = v[0], np.full(true[lv].shape, v[3])
        else:
            est_d[lv] = prod.aggregate(lv, fine[0])
            sd_d[lv] = fine[3] * np.sqrt(n_cells[lv])
    results["direct_only_planned"] = summary(est_d, sd_d)
    est_c, sd_c, t_solve = gls(ms_p)
    results["consistent_planned"] = summary(est_c, sd_c)
    est_e, sd_e, _ = gls(releases(equal))
    results["consistent_equal"] = summary(est_e, sd_e)

    # options: non-negative, then integer (finest cells clamped / rounded, levels re-summed)
    res_fin = solve(prod.outer.tree, prod.inner.tree, prod.present,
                    {k: (v[0], v[1]) for k, v in ms_p.items()}).x[-1]
    opt = {}
    round_rng = np.random.default_rng(12345)

    def stochastic(x: np.ndarray) -> np.ndarray:
        """The library's integer option: up with probability equal to the fractional part."""
        low = np.floor(x)
        return low + (round_rng.random(x.shape) < x - low)

    for name, f in (("nonnegative", lambda x: np.maximum(x, 0.0)),
                    ("nonnegative_integer", lambda x: stochastic(np.maximum(x, 0.0)))):
        x = f(res_fin)
        est = {lv: prod.aggregate(lv, x) for lv in OUTPUTS}
        opt[name] = {label(lv): summary(est, sd_c)[label(lv)]["bias"] for lv in OUTPUTS}
        opt[name + "_se"] = {label(lv): results["consistent_planned"][label(lv)]["bias_se"]
                             for lv in OUTPUTS}
    results["options_bias"] = opt

    # the entry point on released frames, one draw, integer grid: additivity and time
    rel = {}
    for lv in MEASURED:
        if shares[lv] == 0.0:
            continue
        sd = sigma0 / math.sqrt(shares[lv])
        k = prod.keys(lv)
        t = true[lv].reshape(-1)
        rel[lv] = k.with_columns(n=pl.Series(t + rng.normal(0.0, sd, t.size)),
                                 n_sd=pl.lit(sd)) if lv else pl.DataFrame(
            {"n": t + rng.normal(0.0, sd, 1), "n_sd": [sd]})
    t = time.perf_counter()
    out = consistent(rel, measures=["n"], hierarchies={"geo": geo},
                     mechanisms={lv: Gaussian(sigma=sigma0 / math.sqrt(shares[lv]))
                                 for lv in rel}, outputs=OUTPUTS, grid=1.0)
    t_entry = time.perf_counter() - t
    results["additivity"] = additivity(out, geo)

    results["solve_seconds_100k_all_seeds"] = t_solve
    results["entry_point_seconds"] = t_entry
    results["plan_seconds"] = t_plan
    results["discrete_coverage"] = discrete_coverage(prod, keys, geo, true, shares, seeds)
    results["timing"] = {str(n): solver_time(n) for n in timing_cells}
    if timing_cells:
        results["timing_naics6"] = {str(n): solver_time_naics(n) for n in naics_counties}
    if absent > 0:
        results["timing_absent"] = {str(n): solver_time(n, absent=absent) for n in timing_cells}
    if naics_absent_counties:
        results["timing_naics6_absent"] = {
            str(n): solver_time_naics(n, n_state=max(1, n // 20), absent=absent)
            for n in naics_absent_counties}
    return {
        "data": str(data), "rows": df.height, "seeds": seeds, "rho": rho, "sigma_full": sigma0,
        "cells": {label(lv): int(true[lv].size) for lv in OUTPUTS},
        "planned_shares": {label(k): v for k, v in shares.items()},
        "planned_usable_objective": plan.objective, "equal_usable_objective": plan.equal_objective,
        "results": results, "python": platform.python_version(),
        "load_average_start": load_start, "load_average_end": os.getloadavg(),
    }


def discrete_coverage(prod: Product, keys: pl.DataFrame, geo: pl.DataFrame,
                      true: dict[tuple[str, ...], np.ndarray],
                      shares: dict[tuple[str, ...], float], seeds: int,
                      sigma: float = 2.0) -> dict[str, Any]:
    """Coverage of the 90% margins of counts released with discrete Gaussian noise (grid 1).

    The measured levels get ``DiscreteGaussian(sigma/√f)`` for the planned shares ``f`` (σ = 2
    on the finest level at full share: errors of a few units, where whole-number margins are
    a lattice step apart in coverage); the entry point publishes whole numbers. Reported per
    level: the coverage of the published (randomized) margins, and of the smallest whole-number
    margin with continuity-corrected normal coverage ≥ 90% (the margin before randomization).
    """
    mech = {lv: DiscreteGaussian(sigma=sigma / math.sqrt(shares[lv])) for lv in MEASURED
            if shares[lv] > 0}
    rng = np.random.default_rng(777)
    n_cells = {lv: prod.aggregate(lv, prod.present.astype(float)) for lv in OUTPUTS}
    names = [f"n{k}" for k in range(seeds)]
    rel = {}
    for lv, m in mech.items():
        t = true[lv].reshape(-1)
        noise = m.release_table(np.zeros(t.size * seeds), rng=rng).estimate.reshape(seeds, -1)
        k = prod.keys(lv) if lv else pl.DataFrame()
        rel[lv] = pl.concat([k, pl.DataFrame({n: t + noise[j] for j, n in enumerate(names)})],
                            how="horizontal")
    t0 = time.perf_counter()
    out = consistent(rel, measures=names, hierarchies={"geo": geo}, mechanisms=mech,
                     outputs=OUTPUTS, grid=1.0, output_keys={lv: prod.keys(lv) for lv in OUTPUTS
                                                             if lv})
    dt = time.perf_counter() - t0
    res: dict[str, Any] = {"sigma_finest_full_share": sigma, "seconds": dt}
    for lv in OUTPUTS:
        o = out[lv]
        tr = true[lv].reshape(-1)
        err = np.stack([o[n].to_numpy() - tr for n in names])
        moe = np.stack([o[f"{n}_moe"].to_numpy() for n in names])
        # the published sd includes the average variance 1/6 of the stochastic rounding of
        # each finest cell below; "sd" reports the estimator's
        sd_t = o[f"{names[0]}_sd"].to_numpy()
        sd = np.sqrt(np.maximum(sd_t**2 - n_cells[lv].reshape(-1) / 6.0, 0.0))
        hi = np.ceil(Z90 * sd_t - 0.5)
        res[label(lv)] = {"coverage90": float(np.mean(np.abs(err) <= moe)),
                          "coverage90_whole_number_margin": float(np.mean(np.abs(err) <= hi)),
                          "sd": float(np.sqrt(np.mean(sd**2)))}
    return res


def additivity(out: dict[tuple[str, ...], pl.DataFrame], geo: pl.DataFrame) -> dict[str, Any]:
    """Every parent equals the sum of its children (integer grid: exact), every level pair."""
    checks = {}
    st = geo.unique()
    for par in OUTPUTS:
        for child in OUTPUTS:
            if par == child or not set(par) <= ({"state"} | set(child)) and "state" in par:
                continue
            cols = set(par)
            if not cols <= set(child) | ({"state"} if "county" in child else set()):
                continue
            if len(child) <= len(par) and set(child) == cols:
                continue
            c = out[child]
            if "state" in cols and "state" not in c.columns:
                c = c.join(st, on="county")
            keys = sorted(cols)
            s = (c.group_by(keys).agg(pl.col("n").sum().alias("s")) if keys
                 else c.select(pl.col("n").sum().alias("s")))
            p = out[par]
            j = p.join(s, on=keys, how="left") if keys else p.with_columns(s["s"])
            ok = bool((j["n"] == j["s"].fill_null(0.0)).all())
            checks[f"{label(par)} = sum of {label(child)}"] = ok
    return {"pairs_checked": len(checks), "all_exact": all(checks.values()), "pairs": checks}


def solver_time(cells: int, d: int = 20, counties_per_state: int = 60,
                absent: float = 0.0) -> dict[str, Any]:
    """Solver alone on a synthetic product: n_small × d cells under counties, states, nation.

    ``absent``: share of finest cells structurally absent at random (0: the key set is the
    cross product, as with public domains; > 0: every small area has its own pattern, the
    solver's worst case, as no two leaves share a covariance).
    """
    n_leaf = cells // d
    n_county = max(n_leaf // 160, 1)
    n_state = max(n_county // counties_per_state, 1)
    rng = np.random.default_rng(1)
    par1 = np.zeros(n_state, dtype=np.int64)
    par2 = np.sort(rng.integers(0, n_state, n_county))
    par2[:n_state] = np.arange(n_state)
    par2.sort()
    par3 = np.sort(rng.integers(0, n_county, n_leaf))
    par3[:n_county] = np.arange(n_county)
    par3.sort()
    outer = Tree.from_parents([par1, par2, par3])
    inner = Tree.from_parents([np.zeros(d, dtype=np.int64)])
    present = rng.random((n_leaf, d)) >= absent
    present[:, 0] = True
    meas = {}
    for a, b, s in ((3, 1, 5.0), (2, 1, 5.0), (1, 1, 4.0), (0, 1, 4.0), (3, 0, 5.0), (2, 0, 5.0)):
        shape = (outer.sizes[a], inner.sizes[b])
        meas[(a, b)] = (rng.normal(size=shape + (1,)), np.full(shape, 1 / s**2))
    t = time.perf_counter()
    c = time.process_time()
    res = solve(outer, inner, present, meas)
    t_solve, c_solve = time.perf_counter() - t, time.process_time() - c
    t = time.perf_counter()
    c = time.process_time()
    for a in range(4):
        for b in range(2):
            res.variance(a, b)
    t_var, c_var = time.perf_counter() - t, time.process_time() - c
    return {"cells": n_leaf * d, "present_cells": int(present.sum()), "outer_leaves": n_leaf,
            "d": d, "absent": absent, "solve_seconds": t_solve, "solve_cpu_seconds": c_solve,
            "variances_seconds": t_var, "variances_cpu_seconds": c_var,
            "load_average": os.getloadavg()}


def _split(rng: np.random.Generator, n_par: int, n_child: int) -> np.ndarray:
    """Sorted parent index of ``n_child`` nodes, every parent with at least one child."""
    p = np.sort(rng.integers(0, n_par, n_child))
    p[:n_par] = np.arange(n_par)
    return np.sort(p)


def solver_time_naics(n_county: int, n_state: int = 52,
                      sizes: tuple[int, ...] = (20, 96, 308, 692, 1012),
                      absent: float = 0.0) -> dict[str, Any]:
    """Solver alone on a county × six-digit-industry product (a NAICS-like inner tree).

    Outer: nation → ``n_state`` states → ``n_county`` counties. Inner: all industries → 2-,
    3-, 4-, 5- and 6-digit codes (the 2022 NAICS counts by default: 20, 96, 308, 692, 1,012),
    random fan-outs. Measured: county × 6-digit, state × 6-digit, nation × 6-digit, county ×
    2-digit, state × 4-digit, county × all; one mechanism per level. ``absent``: share of
    county × 6-digit cells absent from the key set at random (0: the full cross product).
    """
    rng = np.random.default_rng(1)
    outer = Tree.from_parents([np.zeros(n_state, dtype=np.int64),
                               _split(rng, n_state, n_county)])
    inner = Tree.from_parents([np.zeros(sizes[0], dtype=np.int64)]
                              + [_split(rng, sizes[i - 1], sizes[i])
                                 for i in range(1, len(sizes))])
    present = rng.random((outer.sizes[-1], inner.sizes[-1])) >= absent
    present[:, 0] = True
    dd = inner.depth
    meas = {}
    for a, b, s in ((2, dd, 5.0), (1, dd, 10.0), (0, dd, 20.0), (2, 1, 10.0), (1, 3, 10.0),
                    (2, 0, 10.0)):
        shape = (outer.sizes[a], inner.sizes[b])
        meas[(a, b)] = (rng.normal(size=shape + (1,)), np.full(shape, 1 / s**2))
    t = time.perf_counter()
    c = time.process_time()
    res = solve(outer, inner, present, meas)
    t_solve, c_solve = time.perf_counter() - t, time.process_time() - c
    t = time.perf_counter()
    c = time.process_time()
    for a in range(outer.depth + 1):
        for b in range(dd + 1):
            res.variance(a, b)
    t_var, c_var = time.perf_counter() - t, time.process_time() - c
    return {"cells": n_county * inner.sizes[-1], "present_cells": int(present.sum()),
            "counties": n_county, "states": n_state, "inner_sizes": list(inner.sizes),
            "absent": absent, "solve_seconds": t_solve, "solve_cpu_seconds": c_solve,
            "variances_seconds": t_var, "variances_cpu_seconds": c_var,
            "load_average": os.getloadavg()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=Path("data/cbp_sample.parquet"))
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--rho", type=float, default=0.02)
    ap.add_argument("--step", type=float, default=0.05)
    ap.add_argument("--timing", type=str, default="1000000",
                    help="comma-separated cell counts for the solver timing (e.g. 1e6,1e7)")
    ap.add_argument("--naics-counties", type=str, default="3000,10000",
                    help="comma-separated county counts for the county × NAICS6 timing")
    ap.add_argument("--absent", type=float, default=0.3,
                    help="share of finest cells absent at random in the key-set-with-absent-"
                         "cells timings (0: none)")
    ap.add_argument("--naics-absent-counties", type=str, default="",
                    help="comma-separated county counts for county × NAICS6 with absent cells "
                         "(20 counties per state; costly: O(d³) per county for the variances)")
    args = ap.parse_args()
    cells = [int(float(x)) for x in args.timing.split(",") if x]
    naics = [int(float(x)) for x in args.naics_counties.split(",") if x]
    naics_absent = tuple(int(float(x)) for x in args.naics_absent_counties.split(",") if x)
    rep = run(args.data, args.seeds, args.rho, args.step, cells, naics, args.absent,
              naics_absent)
    out = HERE / "results" / f"hierarchy_{rep['rows']}.json"
    out.write_text(json.dumps(rep, indent=1, default=str))
    print(f"planned shares: {rep['planned_shares']}")
    print("| level | variant | RMSE | bias (se) | coverage 90% | usable |")
    print("|---|---|---|---|---|---|")
    for lv in OUTPUTS:
        for v in ("rollup_only", "direct_only_planned", "consistent_planned",
                  "consistent_equal"):
            r = rep["results"][v][label(lv)]
            cov = "" if r["coverage90"] is None else f"{r['coverage90']:.3f}"
            print(f"| {label(lv)} | {v} | {r['rmse']:.3f} | {r['bias']:.3f} "
                  f"({r['bias_se']:.3f}) | {cov} | {r['usable']:.3f} |")
    print(json.dumps({k: rep["results"].get(k) for k in
                      ("additivity", "options_bias", "solve_seconds_100k_all_seeds",
                       "entry_point_seconds", "discrete_coverage", "timing",
                       "timing_naics6", "timing_absent", "timing_naics6_absent")},
                     indent=1, default=str)[:6000])
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
