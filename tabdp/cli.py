"""The ``tabdp`` command: validate, plan and run release specs.

Usage::

    tabdp validate release.toml          # check the spec; reads no data
    tabdp plan release.toml [--out DIR]  # mechanisms, policy curves, expected errors; no data
    tabdp run release.toml [--overwrite] # the release: public and confidential folders
    tabdp demo [--out DIR]               # the bundled example on the sample data

Exit codes:

====  ==========================================================================
0     success
2     spec or usage error (malformed spec, bad option, output folder exists)
3     budget exceeded (some unit would pass the spec's per-record budget)
4     data error (input missing or unreadable, missing columns, bad values)
70    internal error (a bug in tabdp: please report it with the traceback)
====  ==========================================================================

Nothing is written when a command fails.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from tabdp.exceptions import (
    BudgetExceededError,
    CalibrationError,
    ColumnNotFoundError,
    ColumnTypeError,
    DataValidationError,
    InvalidParameterError,
    SpecError,
    TabdpError,
    UnsupportedBackendError,
)

__all__ = ["main", "EXIT_OK", "EXIT_USAGE", "EXIT_BUDGET", "EXIT_DATA", "EXIT_INTERNAL"]

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_BUDGET = 3
EXIT_DATA = 4
EXIT_INTERNAL = 70


def exit_code(err: BaseException) -> int:
    """The documented exit code of an error.

    Args:
        err: The exception that ended the command.

    Returns:
        2 (spec/usage), 3 (budget), 4 (data) or 70 (internal).

    Example:
        >>> exit_code(SpecError("tables[0].kind", "bad")), exit_code(KeyError("x"))
        (2, 70)
    """
    if isinstance(err, BudgetExceededError):
        return EXIT_BUDGET
    if isinstance(err, (DataValidationError, ColumnNotFoundError, ColumnTypeError)):
        return EXIT_DATA
    if isinstance(err, (SpecError, InvalidParameterError, CalibrationError,
                        UnsupportedBackendError)):
        return EXIT_USAGE
    return EXIT_INTERNAL


class _Bar:
    """A plain progress bar on stderr (one line per step when stderr is not a terminal)."""

    def __init__(self, stream: TextIO, enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled
        self.tty = stream.isatty()
        self.t0 = time.monotonic()

    def __call__(self, i: int, n: int, what: str) -> None:
        if not self.enabled:
            return
        width = 24
        done = int(width * i / max(n, 1))
        line = (f"[{'#' * done}{'.' * (width - done)}] {i}/{n} {what} "
                f"({time.monotonic() - self.t0:.1f}s)")
        if self.tty:
            self.stream.write("\r\x1b[2K" + line)
            if i == n:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tabdp",
        description="Differentially private tables with per-record guarantees: validate, plan "
                    "and run release specs (release.toml).",
        epilog="Exit codes: 0 ok, 2 spec/usage error, 3 budget exceeded, 4 data error, "
               "70 internal error. Nothing is written when a command fails.")
    from tabdp import __version__

    p.add_argument("--version", action="version", version=f"tabdp {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    v = sub.add_parser("validate", help="check a spec (reads no data)")
    v.add_argument("spec", type=Path)
    pl_ = sub.add_parser("plan", help="mechanisms, policy curves and expected errors "
                                      "(reads no data)")
    pl_.add_argument("spec", type=Path)
    pl_.add_argument("--out", type=Path, default=None,
                     help="folder for plan.json and plan.html (default: the spec's output.plan)")
    pl_.add_argument("--overwrite", action="store_true", help="replace an existing plan folder")
    r = sub.add_parser("run", help="run the release")
    r.add_argument("spec", type=Path)
    r.add_argument("--overwrite", action="store_true",
                   help="replace existing output folders (default: refuse)")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    d = sub.add_parser("demo", help="run the bundled example spec on the bundled synthetic "
                                    "sample (tabdp.datasets)")
    d.add_argument("--out", type=Path, default=None,
                   help="folder for the demo outputs (default: ./tabdp-demo, replaced on each "
                        "run)")
    d.add_argument("--overwrite", action="store_true",
                   help="replace existing outputs in the --out folder")
    d.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _example_spec() -> Path:
    from tabdp.datasets import example_spec_path

    return example_spec_path()


def _cmd_validate(args: argparse.Namespace, out: TextIO) -> int:
    from tabdp.release.spec import load_spec

    spec = load_spec(args.spec)
    n_roll = sum(len(t.rollups) for t in spec.tables)
    out.write(f"{args.spec}: valid. Release {spec.release.name!r}: {len(spec.tables)} table(s), "
              f"{n_roll} rollup(s); unit {spec.input.unit or 'row'}; "
              f"randomness {'seeded (TESTS ONLY)' if spec.seed is not None else 'secure'}.\n")
    out.write(f"  sha256 {spec.sha256}\n")
    return EXIT_OK


def _fmt(x: float | None) -> str:
    return "inf" if x is None else f"{x:.4g}"


def _cmd_plan(args: argparse.Namespace, out: TextIO) -> int:
    from tabdp.release.runner import plan_summary, write_plan
    from tabdp.release.spec import load_spec

    spec = load_spec(args.spec)
    folder = write_plan(spec, args.out, overwrite=args.overwrite)
    s = plan_summary(spec)
    sizes = s["record_sizes"]
    out.write(f"Plan of release {spec.release.name!r} (no data read)\n")
    head = "".join(f"{x:>10.0e}" for x in sizes)
    for t in s["tables"]:
        params = ", ".join(f"{k}={v}" for k, v in t["mechanism"]["params"].items())
        what = ("count" if t["kind"] == "count" else f"sum of {', '.join(t['measures'])}")
        out.write(f"\n{t['name']}: {what} by {', '.join(t['by']) or '(national)'}; "
                  f"{t['cells']:,} cells\n")
        out.write(f"  mechanism {t['mechanism']['class']}({params}); guarantee "
                  f"{t['guarantee']}\n")
        out.write(f"  {'record size':<36}{head}\n")
        out.write(f"  {'rho of a unit in one cell':<36}" + "".join(
            f"{_fmt(r['rho']):>10}" for r in t["table_policy_curve"]) + "\n")
        for m, rows in t["expected_error"].items():
            cells = "  ".join(f"{r['total']:.0e}: ±{_fmt(r['moe'])}" for r in rows)
            out.write(f"  {m} margin of error ({s['release']['level']:.0%}) by cell total: "
                      f"{cells}\n")
    out.write(f"\n{'Total: record size':<38}{head}\n")
    out.write(f"{'Total rho per unit':<38}" + "".join(
        f"{_fmt(r['rho']):>10}" for r in s["total_policy_curve"]) + "\n")
    over = [r for r in s["budget_check"] if r["exceeds"]]
    if over:
        sizes_txt = ", ".join(f"{r['delta']:g} (planned {_fmt(r['planned_rho'])} > "
                              f"limit {r['limit']:.4g})" for r in over)
        out.write(f"\nWARNING: the planned worst-case total exceeds the budget at record sizes "
                  f"{sizes_txt}. Units of those sizes that contribute to every table may be "
                  "refused at run time (exit 3); raise the budget or lower the losses.\n")
    elif s["budget_check"]:
        out.write("\nBudget: the planned worst-case total is within the budget at every record "
                  "size shown.\n")
    out.write(f"\nPlan written to {folder} (plan.json, plan.html)\n")
    return EXIT_OK


def _cmd_run(args: argparse.Namespace, out: TextIO, err: TextIO, spec_path: Path,
             overwrite: bool) -> int:
    from tabdp.release.runner import run_release
    from tabdp.release.spec import load_spec

    spec = load_spec(spec_path)
    if getattr(args, "out", None) is not None:
        import dataclasses

        spec = dataclasses.replace(spec, output=dataclasses.replace(
            spec.output, public=args.out / "public", confidential=args.out / "confidential",
            plan=args.out / "plan"))
    res = run_release(spec, overwrite=overwrite, progress=_Bar(err, not args.quiet))
    out.write(f"Release {spec.release.name!r} done.\n")
    if spec.seed is not None:
        out.write("  WARNING: seeded randomness: for tests only, not for production.\n")
    out.write(f"  Public outputs:       {res.public}  (summary.html, manifest.json, "
              f"{len(res.files) - 3} table(s))\n")
    out.write(f"  Confidential outputs: {res.confidential}  (per_record_losses.parquet, "
              "confidential_report.html: never publish)\n")
    return EXIT_OK


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    """Run the ``tabdp`` command line.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).
        stdout: Stream for results (default ``sys.stdout``).
        stderr: Stream for errors and progress (default ``sys.stderr``).

    Returns:
        The exit code (see the module docstring).

    Example:
        >>> import io
        >>> main(["validate", "no-such-spec.toml"], stderr=io.StringIO())
        2
    """
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    parser = _parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as e:  # argparse: usage errors exit 2, --help/--version exit 0
        return int(e.code) if isinstance(e.code, int) else EXIT_USAGE
    try:
        if args.command == "validate":
            return _cmd_validate(args, out)
        if args.command == "plan":
            return _cmd_plan(args, out)
        if args.command == "run":
            return _cmd_run(args, out, err, args.spec, args.overwrite)
        if args.command == "demo":
            # The default demo folder is the demo's own and is refreshed on every run; a
            # folder given with --out is replaced only with --overwrite.
            default = args.out is None
            if default:
                args.out = Path.cwd() / "tabdp-demo"
            return _cmd_run(args, out, err, _example_spec(), default or args.overwrite)
        raise AssertionError(args.command)  # pragma: no cover
    except KeyboardInterrupt:
        err.write("tabdp: interrupted; nothing was written.\n")
        return 130
    except TabdpError as e:
        code = exit_code(e)
        kind = {EXIT_USAGE: "spec/usage error", EXIT_BUDGET: "budget exceeded",
                EXIT_DATA: "data error"}.get(code, "internal error")
        err.write(f"tabdp {args.command}: {kind}: {e}\n")
        if code == EXIT_INTERNAL:
            traceback.print_exc(file=err)
        return code
    except Exception as e:  # noqa: BLE001 - every other failure is a bug: exit 70
        err.write(f"tabdp {args.command}: internal error: {type(e).__name__}: {e}\n"
                  "This is a bug in tabdp; nothing was written. Please report it with this "
                  "traceback:\n")
        traceback.print_exc(file=err)
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
