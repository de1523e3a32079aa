"""Method-call workflow from Polars: county x sector payroll, employment and establishment counts.

Runs on the bundled synthetic sample (``tabdp.datasets.cbp_sample_path()``, the
repository's ``data/cbp_sample.parquet``) and writes

* ``out/demo/public/``: the noisy table (Parquet + CSV) and ``summary.json``, the public summary
  (mechanisms, parameters, policy curves: nothing computed from records);
* ``out/demo/confidential/``: ``per_record_losses.parquet`` (each establishment's privacy loss)
  and ``confidential_summary.json``. These reveal record values: never publish them.

Usage: ``python examples/polars_release.py [--data PATH] [--out DIR] [--seed N]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import polars as pl

import tabdp
from tabdp import mechanisms as mech
from tabdp.datasets.synth import public_domains

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> Path:
    """Run the demo release and return the output folder."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=tabdp.datasets.cbp_sample_path(),
                    help="input Parquet (default: the bundled synthetic sample)")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "demo")
    ap.add_argument("--seed", type=int, default=None,
                    help="reproducible noise for tests only (default: secure randomness)")
    args = ap.parse_args(argv)

    # Public input, fixed before looking at the data: key domains and per-record loss targets.
    domains = public_domains()
    keys = tabdp.KeySet.from_dict(county=domains["county"], naics2=domains["naics2"])
    # Payroll in $1,000 (the CBP convention) and employment: exponential-polylog noise (p = 1)
    # calibrated to per-record targets. In each table an establishment of median size ($250,000
    # of payroll, i.e. 250 in $1,000; 5 employees) loses at most rho = 0.5, the largest plausible
    # one ($20 billion; 250,000 employees) at most rho = 50, and every size in between at most
    # the curve through these two points (the loss grows like d x ln(size)). The noise is
    # unbiased and the same for every cell: sd about $610,000 of payroll and 12 employees.
    # Establishment counts: Gaussian noise (released as exact integers), rho = 0.125 each.
    pay = tabdp.calibrate("exp_polylog", {250.0: 0.5, 2e7: 50.0}, typical_total=1e4,
                          p=1).mechanism
    emp = tabdp.calibrate("exp_polylog", {5.0: 0.5, 2.5e5: 50.0}, typical_total=100.0,
                          p=1).mechanism
    count_mech = mech.Gaussian(sigma=2.0)

    data = pl.scan_parquet(args.data).with_columns(payroll_k=pl.col("payroll") / 1000.0)
    session = tabdp.Session(unit="estab_id", seed=args.seed)
    by = ["county", "naics2"]
    payroll = data.dp.sum("payroll_k", by=by, keys=keys, mechanism=pay,
                          session=session, name="payroll")
    employment = data.dp.sum("employment", by=by, keys=keys, mechanism=emp,
                             session=session, name="employment")
    counts = data.dp.count(by=by, keys=keys, mechanism=count_mech, session=session,
                           name="establishments")
    table = payroll.join(employment, on=by).join(counts, on=by)
    report = session.report()

    # Write atomically: build in a temporary folder, then move into place.
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".demo-", dir=args.out.parent))
    try:
        (tmp / "public").mkdir()
        (tmp / "confidential").mkdir()
        table.write_parquet(tmp / "public" / "county_naics2.parquet")
        table.write_csv(tmp / "public" / "county_naics2.csv")
        summary = report.to_dict()
        (tmp / "public" / "summary.json").write_text(json.dumps(summary, indent=2))
        per_record = report.per_record
        per_record.write_parquet(tmp / "confidential" / "per_record_losses.parquet")
        (tmp / "confidential" / "confidential_summary.json").write_text(
            json.dumps(report.confidential_summary(), indent=2))
        if args.out.exists():
            shutil.rmtree(args.out)
        tmp.rename(args.out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

    conf = report.confidential_summary()
    print(f"Released {len(keys)} cells (county x NAICS sector) from {args.data.name}:")
    print(table.head(5))
    print(f"\nMechanisms: payroll_k {pay!r}; employment {emp!r}; counts {count_mech!r}")
    print("Public policy (rho paid by one establishment of a given size, per cell):")
    for label, m, sizes in (("payroll_k", pay, [100, 1e3, 1e4, 1e5, 1e6, 1e7]),
                            ("employment", emp, [1, 10, 100, 1e3, 1e4, 1e5])):
        cells = ", ".join(f"{x:g}: {float(m.rho(x)):.3g}" for x in sizes)
        print(f"  {label:11s} {cells}")
    print(f"Per-establishment loss (CONFIDENTIAL): {conf['units']} units, median rho "
          f"{conf['rho_q0.5']:.3g}, max rho {conf['rho_max']:.3g}")
    print(f"\nPublic outputs:       {args.out / 'public'}")
    print(f"Confidential outputs: {args.out / 'confidential'}  (do not publish)")
    return args.out


if __name__ == "__main__":
    main()
