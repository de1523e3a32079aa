"""Publication rules applied after noise: coefficients of variation, flags, suppression, clamping.

Every rule is post-processing of the released estimates and their public uncertainty, so it
costs no privacy. The public tables are in long form, one row per cell and measure, with a
stable schema (the same columns and types for every table, even an empty one)::

    <key columns>, measure, estimate, sd, moe, lower, upper, cv, flag

Flag codes (a cell may carry several, concatenated in this order; ``""`` when none):

* ``C`` — low reliability: the coefficient of variation ``cv = sd / |estimate|`` is at least the
  table's ``cv_flag`` threshold (an estimate of 0 has ``cv = inf``).
* ``N`` — the noisy estimate is negative. With ``negative = "clamp"`` it is published as 0
  (clamping is post-processing but biases the estimate upward: for an empty cell by
  ``E[max(0, Z)]``, half the noise's mean absolute error, about 0.40 sd for Gaussian noise and
  0.35 sd for Laplace noise, at most 0.5 sd for any symmetric noise; less for larger cells;
  the unclamped value is what rollups sum).
* ``S`` — withheld: ``cv`` is at least ``suppress_cv``; estimate, sd, moe, lower, upper and cv
  are null, and the flag is ``S`` alone (no ``C`` or ``N``: the table shows nothing of the
  withheld value, not even its sign, beyond ``cv >= suppress_cv``). Withholding is not
  secondary suppression: a rollup or coarser consistent level sums the withheld cell's noisy
  value, so a parent minus its published children gives it back (DP noise: no privacy is
  lost; the cell is withheld for its unreliability, not to hide it). The intervals of
  the cells left published are unconditional: conditional on being published (chosen because
  ``|estimate|`` is large beside ``sd``), small cells' intervals cover less than the level
  (see the release-workflow docs).
* ``X`` — the noise has no finite variance (heavy-tailed stable noise): ``sd`` is ``inf`` and
  ``cv`` is null; use ``moe``.

* ``R`` — coarsely rounded: the table's public rounding unit (``round``) moved this estimate
  and is more than `ROUND_MOE_SHARE` (0.1) times the cell's margin
  of error. The rounding error, up to half the unit, is then not negligible beside the noise;
  ``sd`` and ``moe`` describe the noise only (the interval's ends are rounded outward, so it
  still covers).
* ``B`` — biased post-processing: every cell of a consistent table published with
  ``nonnegative = true`` or ``integer = true`` (see the hierarchy docs). ``sd``, ``moe``,
  ``lower`` and ``upper`` are those of the unbiased consistent estimate: the same table
  without ``nonnegative`` (the rounding to whole numbers is unbiased and its variance is in
  ``sd`` and ``moe``); with ``nonnegative`` the interval's ends are raised to 0 where negative,
  and the interval need not contain the clamped estimate.

Order of the rules: suppression (``S``) is decided on the released (unbiased) estimate; then a
negative estimate is clamped to 0 if the table asks for it; then the estimate is rounded to the
table's public unit (``round``), if any. The published ``cv`` is always ``sd / |published
estimate|`` (the clamped or rounded value: never a rounded estimate beside the cv of another
value), and ``C`` is set where the released or the published estimate's cv reaches the
threshold (rounding never removes a flag; a count rounded to 0 is flagged). ``sd`` and ``moe``
are the noise's and are never rounded.

``lower`` and ``upper`` are the ends of the ``level`` confidence interval of the cell: the
mechanism's exact interval (asymmetric for transformation mechanisms, whose symmetric
``estimate ± moe`` mis-covers; ``estimate ∓ moe`` for additive ones). The estimate's rules apply
to them too, always so that the interval can only grow: a withheld cell (``S``) has null ends;
with ``negative = "clamp"`` both ends are raised to 0 where negative (the true value of a
non-negative measure is ≥ 0, so coverage is kept); with a rounding unit, ``lower`` is rounded
down and ``upper`` up to it. Rollups have only a sd and a symmetric margin, so their interval is
``estimate ∓ moe``: central from the exact law of the sum's error for additive mechanisms; for
rollups of transformation-mechanism cells a symmetric interval from a normal approximation
with the plug-in sd, whose coverage is approximate and whose misses are not balanced.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

from tabdp._numeric import INT64_CLAMP
from tabdp.frame import coefficient_of_variation, flag_codes
from tabdp.release.spec import ROUND_MOE_SHARE, Publication

__all__ = ["FLAG_CODES", "COLUMN_DOCS", "publish", "empty_public_table"]

#: Flag code -> meaning (appears in the public summary).
FLAG_CODES: dict[str, str] = {
    "C": "low reliability: coefficient of variation (sd / |estimate|) at or above the table's "
         "cv_flag threshold; where the table is rounded for publication, that of the "
         "published or of the unrounded noisy estimate, whichever is larger (rounding never "
         "removes a flag, so a flagged cell's cv column may be below the threshold)",
    "N": "the noisy estimate is negative (published as 0 when the table clamps negatives, "
         "which biases the estimate upward, for an empty cell by about 0.4 sd with Gaussian "
         "noise; rollups always sum the unclamped, unbiased values); never on a withheld cell",
    "S": "withheld: coefficient of variation at or above the table's suppress_cv threshold "
         "(estimate, sd, moe, lower, upper and cv are null; the flag is S alone, B aside, so "
         "this table shows nothing of the withheld value, not even its sign). Not secondary "
         "suppression: a rollup or coarser level sums the withheld cell's noisy value, so a "
         "parent minus its published children gives it back (noise-protected like every "
         "estimate; withheld as unreliable, not as sensitive). The intervals of the "
         "published cells are unconditional: among the cells left published, small ones "
         "(true value under about 1 sd) cover less than the level",
    "X": "the noise has no finite variance (heavy-tailed stable noise): sd is inf and cv is "
         "null; use the margin of error",
    "R": "coarsely rounded: the table's rounding unit (publication.round) moved this estimate "
         f"and is more than {ROUND_MOE_SHARE:g} x its margin of error, so the rounding error "
         "(up to half the unit) is not negligible beside the noise; sd and moe describe the "
         "noise only, and lower and upper are rounded outward so the interval still covers",
    "L": "at the Int64 limit: the column is declared integer and the noisy estimate lay "
         "outside the Int64 range (or was not a number), so it is published clamped to "
         "±(2^63 − 1024) (null where not a number); lower and upper describe the unclamped "
         "estimate, cv the published one",
    "B": "biased post-processing: a consistent table published with nonnegative = true and/or "
         "integer = true (finest consistent cells set to 0 where negative, rounded to whole "
         "numbers); sd, moe, lower, upper and cv (so the C and S flags) are those of the "
         "unbiased consistent estimate (where the table is rounded for publication, C is "
         "also set where the published estimate's cv reaches the threshold), "
         "i.e. of the same table without nonnegative (the rounding's variance included); "
         "with nonnegative, ends raised to 0 where negative, and the interval need not "
         "contain the clamped estimate",
}

#: Column dictionary of the public tables.
COLUMN_DOCS: dict[str, str] = {
    "<keys>": "the cell's key columns (every key of the public key set appears, empty cells "
              "included)",
    "measure": "the measure released (a sum's column name, or 'count')",
    "estimate": "the released estimate: the exact noisy value rounded to the public grid. "
                "Before rounding it is unbiased for every mechanism's default estimator. Up "
                "to 2^40 grid steps from 0 (|estimate| <= 2^40 x grid, about 1.1e12 x grid) "
                "the grid is the multiples of its step, the rounding moves the estimate by at "
                "most half a step, and a table's grid step is at most a tenth of its noise's "
                "sd (coarser grids are refused; discrete noise on its default grid of 1 gives "
                "exact integers, not rounded), so the rounding's bias is negligible beside "
                "the sd. Beyond, the grid keeps 40 significant bits (its spacing doubles at "
                "each power of two from 2^40 x grid): the rounding moves the estimate by at "
                "most 2^-40 of its magnitude, which can exceed the sd (the moe includes it; "
                "for log and root mechanisms, all of this holds for the transformed value "
                "on its grid). "
                "Clamping (flag N), publication.round (flag R) "
                "and a consistent table's nonnegative (flag B) may move it further. In a "
                "consistent table (the summary's consistent entry) it is instead the "
                "generalized least squares combination of the measured levels, whose finest "
                "cells are rounded to the grid without bias, each by less than one step "
                "counted in whole steps (the published double is off from its consistent "
                "estimate by less than one step plus 2^-51 of its magnitude: under 1 + 2^-11 "
                "steps where |estimate| <= 2^40 x grid; beyond 2^53 grid steps float64 cannot "
                "hold every multiple of the step and a cell can move by several steps), and "
                "every coarser cell the exact sum of its finest cells in whole steps (a table "
                "whose finest cells add up to 2^61 grid steps or more in magnitude is left "
                "unrounded by the consistent step and rounded cell by cell to the grid)",
    "sd": "standard deviation of the estimate: the noise's (plug-in from the estimate for "
          "transformation mechanisms; inf where it does not exist). The grid rounding of a "
          "table's cells is not included: at a grid of at most a tenth of the sd it adds under "
          "0.05% to it where |estimate| <= 2^40 x grid (beyond, the rounding, up to 2^-40 of "
          "the estimate's magnitude, can exceed the sd; the moe includes it); for a "
          "consistent table on a grid (whose stochastic rounding of sums "
          "of cells is larger) it is included, as in the moe; under flag B, that of the "
          "unbiased consistent estimate",
    "moe": "margin of error: half-width of the confidence interval at the release's level "
           "(90% by default): the central interval of the error for additive mechanisms and "
           "their rollups; (upper - lower) / 2 of the exact asymmetric interval for a cell of "
           "a transformation mechanism; z x sd for a rollup of transformation-mechanism cells "
           "(a symmetric interval from a normal approximation with the plug-in sd: "
           "approximate coverage, not central); in a consistent table, exact for Gaussian "
           "and alpha-stable noise, and for other noise laws a margin certified to cover at "
           "least the level in every cell (from the law of the cell's error; whole numbers "
           "for integer noise on a whole grid; the summary's consistent methods). "
           "Unconditional: with suppress_cv, the published small cells cover less",
    "lower": "lower end of the confidence interval at the release's level: exact and possibly "
             "asymmetric for transformation mechanisms, estimate - moe for additive ones and "
             "rollups (for rollups of transformation-mechanism cells a symmetric interval from "
             "a normal approximation; for a consistent table with nonnegative = true, flag B: "
             "the unbiased consistent estimate - moe); raised to 0 where the table clamps "
             "negatives, rounded down to the table's rounding unit, null when the cell is "
             "withheld",
    "upper": "upper end of the same interval (estimate + moe for additive mechanisms and "
             "rollups, symmetric from a normal approximation for rollups of "
             "transformation-mechanism cells, the unbiased consistent estimate + moe under "
             "flag B; raised to 0 where the table clamps negatives, rounded up to the rounding "
             "unit, null when withheld)",
    "cv": "coefficient of variation sd / |estimate| (inf for an estimate of 0; null where sd "
          "is inf or the cell is withheld; under flag B with nonnegative = true, of the "
          "unbiased consistent estimate, as are the C and S flags)",
    "flag": "publication flags, concatenated codes (see flag_codes); '' when none",
}


def empty_public_table(key_schema: Mapping[str, pl.DataType | type[pl.DataType]]
                       ) -> pl.DataFrame:
    """An empty public table with the stable schema.

    Args:
        key_schema: Key column name → dtype.

    Returns:
        A frame with no rows and the columns keys, measure, estimate, sd, moe, lower, upper,
        cv, flag.

    Example:
        >>> empty_public_table({"county": pl.String}).columns
        ['county', 'measure', 'estimate', 'sd', 'moe', 'lower', 'upper', 'cv', 'flag']
    """
    schema: dict[str, pl.DataType | type[pl.DataType]] = {
        **dict(key_schema), "measure": pl.String, "estimate": pl.Float64, "sd": pl.Float64,
        "moe": pl.Float64, "lower": pl.Float64, "upper": pl.Float64, "cv": pl.Float64,
        "flag": pl.String}
    return pl.DataFrame(schema=schema)


def _round_to(x: np.ndarray, step: object) -> np.ndarray:
    if isinstance(step, (int, float)) and not isinstance(step, bool) and step > 0:
        s = float(step)
        return np.round(x / s) * s
    return x


def _public_rounding(est: np.ndarray, sd: np.ndarray, moe: np.ndarray, lower: np.ndarray,
                     upper: np.ndarray, cv: np.ndarray, unit: float
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Round to a public unit: estimate to nearest, interval outward; flag ``R`` where coarse.

    Returns the rounded estimate, lower, upper, the cv that decides the ``C`` flag (the larger
    of the released and the published estimate's, so rounding never removes a flag) and the
    ``R`` mask: the rounding moved the estimate and the unit is more than
    `ROUND_MOE_SHARE` times the cell's margin of error (the
    rounding error, up to half the unit, is then not negligible beside the noise, and sd and
    moe do not include it).
    """
    published = np.round(est / unit) * unit + 0.0  # + 0.0: no "-0.0"
    with np.errstate(invalid="ignore"):
        coarse = np.isfinite(moe) & (unit > ROUND_MOE_SHARE * moe)
        flag_r = coarse & (published != est) & np.isfinite(est)
        cv_flag = np.fmax(cv, coefficient_of_variation(published, sd))
    # the interval's ends outward, so it can only grow (and still covers)
    lower = np.floor(lower / unit) * unit + 0.0
    upper = np.ceil(upper / unit) * unit + 0.0
    return published, lower, upper, cv_flag, flag_r


def _at_int64_limit(col: pl.Series) -> np.ndarray | None:
    """Cells of an integer estimate column at the Int64 clamp (`tabdp.frame._output`): ``L``.

    Example:
        >>> _at_int64_limit(pl.Series([1, 2**63 - 1024, None], dtype=pl.Int64)).tolist()
        [False, True, True]
        >>> _at_int64_limit(pl.Series([1.0])) is None
        True
    """
    if not col.dtype.is_integer():
        return None
    out = (col.is_null() | (col.cast(pl.Int64, strict=False).abs() >= INT64_CLAMP)
           ).fill_null(True)
    return out.to_numpy()


def publish(wide: pl.DataFrame, *, keys: Sequence[str], measures: Sequence[str],
            rules: Publication, grid: Mapping[str, object] | None = None) -> pl.DataFrame:
    """Apply publication rules to a released (or rolled-up) wide table; return the long form.

    Args:
        wide: Key columns, then per measure ``m``, ``m_sd``, ``m_moe`` (unbiased estimates)
            and optionally ``m_lower``, ``m_upper`` (the interval's ends; absent:
            ``m ∓ m_moe``).
        keys: The key columns.
        measures: The measures, in output order.
        rules: Thresholds and the negative policy.
        grid: Optional public grid step per measure: estimates are (re-)rounded to it (sums of
            grid multiples can drift in floating point; rounding them back is post-processing).

    Returns:
        The long public table (see the module docstring): rows ordered by measure, then by the
        order of ``wide``.

    Example:
        >>> w = pl.DataFrame({"c": ["a", "b"], "x": [10.0, -1.0], "x_sd": [1.0, 1.0],
        ...                   "x_moe": [1.6, 1.6]})
        >>> publish(w, keys=["c"], measures=["x"], rules=Publication(cv_flag=0.3))["flag"].to_list()
        ['', 'CN']
    """
    grid = dict(grid or {})
    parts = []
    for m in measures:
        est = wide[m].cast(pl.Float64).to_numpy().astype(np.float64, copy=True)
        sd = wide[f"{m}_sd"].cast(pl.Float64).to_numpy().astype(np.float64, copy=True)
        moe = wide[f"{m}_moe"].cast(pl.Float64).to_numpy().astype(np.float64, copy=True)
        if f"{m}_lower" in wide.columns and f"{m}_upper" in wide.columns:
            lower = wide[f"{m}_lower"].cast(pl.Float64).to_numpy().astype(np.float64, copy=True)
            upper = wide[f"{m}_upper"].cast(pl.Float64).to_numpy().astype(np.float64, copy=True)
        else:
            lower, upper = est - moe, est + moe
        # an Int64 estimate the accessor clamped to the Int64 range (at the limit, or null:
        # NaN): flag L (a function of the noisy estimate only; review r37)
        clamped = _at_int64_limit(wide[m])
        est = _round_to(est, grid.get(m))
        raw = est
        # a consistent table with nonnegative (flag B): its sd and interval are those of the
        # unbiased estimate (``m_centre``), and so are its cv, C and S: the clamped estimate
        # can be mostly bias (an empty state published at about 50 sd: review r38)
        centre = (wide[f"{m}_centre"].cast(pl.Float64).to_numpy()
                  if f"{m}_centre" in wide.columns else None)
        # cv and flags: the accessor's definitions (tabdp.frame._output), from the noisy
        # estimate and the public sd only
        cv = coefficient_of_variation(est if centre is None else centre, sd)
        cv_valid = np.isfinite(sd)
        with np.errstate(invalid="ignore"):
            flag_s = np.zeros(est.shape, bool) if rules.suppress_cv is None else (
                cv_valid & (cv >= rules.suppress_cv))
        if rules.negative == "clamp":
            est = np.where(raw < 0.0, 0.0, est)
            # the published 0 has an infinite cv: low reliability (flag C)
            cv = coefficient_of_variation(est if centre is None else centre, sd)
            # the true value is >= 0: raising negative ends to 0 keeps the coverage
            lower = np.maximum(lower, 0.0)
            upper = np.maximum(upper, 0.0)
        unit = rules.round.get(m) if isinstance(rules.round, Mapping) else rules.round
        flag_r = np.zeros(est.shape, bool)
        if unit is not None:
            est, lower, upper, cv, flag_r = _public_rounding(est, sd, moe, lower, upper, cv,
                                                             float(unit))
        codes = flag_codes(raw, sd, cv, cv_flag=rules.cv_flag, suppressed=flag_s,
                           clamped=clamped)
        if flag_r.any():
            codes = np.where(flag_r & ~flag_s, np.char.add(codes, "R"), codes)
        # a withheld estimate reveals nothing of its value beyond S itself: no N (its sign) and
        # no C (cv >= cv_flag, which says more than S when cv_flag > suppress_cv)
        codes = np.where(flag_s, "S", codes)
        # the published estimate's (under flag B with nonnegative: the unbiased estimate's)
        cv = coefficient_of_variation(est if centre is None else centre, sd)
        withheld = flag_s
        values = pl.DataFrame([
            pl.Series("measure", [m] * len(est), dtype=pl.String),
            pl.Series("estimate", est, dtype=pl.Float64),
            pl.Series("sd", sd, dtype=pl.Float64),
            pl.Series("moe", moe, dtype=pl.Float64),
            pl.Series("lower", lower, dtype=pl.Float64),
            pl.Series("upper", upper, dtype=pl.Float64),
            pl.Series("cv", cv, dtype=pl.Float64, nan_to_null=True),
            pl.Series("flag", codes, dtype=pl.String),
        ])
        base = pl.concat([wide.select(keys), values], how="horizontal") if keys else values
        part = base.with_columns(
            pl.when(pl.Series(withheld)).then(None).otherwise(pl.col(c)).alias(c)
            for c in ("estimate", "sd", "moe", "lower", "upper", "cv")
        ).with_columns(
            pl.when(pl.Series(cv_valid)).then(pl.col("cv")).otherwise(None).alias("cv"))
        parts.append(part)
    if not parts:
        return empty_public_table(wide.select(keys).schema)
    return pl.concat(parts, how="vertical")
