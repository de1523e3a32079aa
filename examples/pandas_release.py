"""Method-call workflow from pandas: a county x sector release of payroll and establishments.

The same release as ``tabdp run examples/cbp_release.toml`` (tables 1 and 3), written as
method calls on a pandas DataFrame: useful in a notebook, for tuning on synthetic data, or
inside an existing pandas pipeline. Outputs are pandas DataFrames.

Usage: ``python examples/pandas_release.py [--seed N]`` (``--seed`` for reproducible tests only).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

import tabdp


def main(argv: list[str] | None = None) -> pd.DataFrame:
    """Run the release and return the joined county x sector table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=tabdp.datasets.cbp_sample_path(),
                    help="input Parquet (default: the bundled synthetic sample)")
    ap.add_argument("--seed", type=int, default=None,
                    help="reproducible noise for tests only (default: secure randomness)")
    args = ap.parse_args(argv)

    df = pd.read_parquet(args.data)
    # Public key domains come from the public hierarchy files, never from the data.
    geo = pd.read_csv(tabdp.datasets.hierarchy_path("geography"), dtype=str)
    naics = pd.read_csv(tabdp.datasets.hierarchy_path("naics"), dtype=str)
    keys = tabdp.KeySet.from_dict(county=geo["county"].unique(),
                                  naics2=sorted(naics["naics2"].unique()))

    session = tabdp.Session(unit="estab_id", seed=args.seed)
    by = ["county", "naics2"]
    # Payroll: exponential-polylog noise (p = 1) calibrated so that an establishment of median
    # size ($250,000) loses at most rho = 0.5, the largest plausible one ($20 billion) at most
    # rho = 50, and every size in between at most the curve through these two points (the loss
    # grows like d x ln(size)). Unbiased; sd about $610,000 in every cell.
    pay = tabdp.calibrate("exp_polylog", {2.5e5: 0.5, 2e10: 50.0}, typical_total=1e7,
                          p=1).mechanism
    payroll = df.dp.sum("payroll", by=by, keys=keys, session=session, name="payroll",
                        mechanism=pay)
    # Counts: exact discrete Gaussian noise (the default for counts), rho = 1/8 per establishment.
    estabs = df.dp.count(by=by, keys=keys, session=session, name="estabs")
    table = payroll.merge(estabs, on=by)

    report = session.report(delta=1e-9)
    per_record = report.per_record          # CONFIDENTIAL: one row per establishment
    print(table.head())
    print(f"\n{len(table):,} cells; mechanisms: "
          + ", ".join(f"{q['name']}: {q['mechanism']['class']}"
                      for q in report.to_dict()["queries"]))
    print(f"Per-establishment rho (CONFIDENTIAL): median {per_record['rho'].median():.3g}, "
          f"max {per_record['rho'].max():.3g}; epsilon at delta=1e-9: max "
          f"{per_record['epsilon_delta'].max():.3g}")
    return table


if __name__ == "__main__":
    main()
