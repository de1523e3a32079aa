"""The ``.dp`` accessor on pandas DataFrames, Polars DataFrames / LazyFrames and Spark frames.

The accessor holds no state: pandas rebuilds it on every attribute access and Polars caches it
per frame, so sessions are passed explicitly (``session=``). ``tabdp.dp(frame)`` returns the same
accessor with types a type checker can follow (``frame.dp`` is registered at run time, which
mypy and pyright cannot see).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import polars as pl

from tabdp._defaults import NEGATIVES as DEFAULT_NEGATIVES
from tabdp.frame._author import author_call
from tabdp.frame._grid import check_api_grid
from tabdp.frame._output import (
    integer_grid,
)
from tabdp.frame._requests import _check_output_names, _integer_columns
from tabdp.frame.backends import is_frame
from tabdp.frame.keys import KeySet
from tabdp.frame.releases import release_grouped, release_quantile
from tabdp.mechanisms import DEFAULT_LEVEL, Mechanism
from tabdp.privacy.session import Session

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DPAccessor", "dp"]

#: The frame type the accessor's releases return (pandas → pandas, Polars → Polars DataFrame).
_Out = TypeVar("_Out")


class DPAccessor(Generic[_Out]):
    """Differentially private grouped releases: ``df.dp.sum(...)``, ``df.dp.count(...)``.

    Registered on ``pandas.DataFrame`` and on ``polars.DataFrame`` / ``polars.LazyFrame`` when
    tabdp is imported, and on ``pyspark.sql.DataFrame`` when PySpark is imported (tabdp never
    imports it): on a Spark DataFrame every release runs in Spark and returns a Spark DataFrame
    (`tabdp.frame._spark`, docs/spark.md).

    For type checkers use [`tabdp.dp(frame)`][tabdp.dp], which returns this accessor typed by
    the frame's library (``DPAccessor[pandas.DataFrame]`` or ``DPAccessor[polars.DataFrame]``).

    Args:
        frame: The frame the accessor is attached to.

    Example:
        >>> import pandas as pd, tabdp
        >>> df = pd.DataFrame({"county": ["a", "a", "b"], "payroll": [10.0, 20.0, 5.0]})
        >>> keys = tabdp.KeySet.from_dict(county=["a", "b", "c"])
        >>> out = df.dp.sum("payroll", by="county", keys=keys,
        ...                 mechanism=tabdp.mechanisms.Gaussian(sigma=1.0),
        ...                 session=tabdp.Session(seed=0))
        >>> list(out.columns), len(out)
        (['county', 'payroll', 'payroll_sd', 'payroll_moe', 'payroll_lower', 'payroll_upper'], 3)
    """

    # the frame's library gives the results' type, also for ``DPAccessor(frame)`` spelled out
    @overload
    def __init__(self: DPAccessor[pd.DataFrame], frame: pd.DataFrame) -> None: ...
    @overload
    def __init__(self: DPAccessor[pl.DataFrame], frame: pl.DataFrame | pl.LazyFrame) -> None: ...
    @overload
    def __init__(self: DPAccessor[Any], frame: Any) -> None: ...
    def __init__(self, frame: Any) -> None:
        """Wrap a pandas, Polars or narwhals-compatible ``frame`` (done by ``frame.dp``)."""
        self._frame = frame

    def sum(self, columns: str | Sequence[str], *, by: str | Sequence[str], keys: KeySet,
            mechanism: Mechanism, session: Session | None = None,
            level: float = DEFAULT_LEVEL, nulls: str = "error", name: str | None = None,
            grid: Any = None, negatives: str = DEFAULT_NEGATIVES, max_cells: int | None = None,
            form: str = "wide", cv: bool = False) -> _Out:
        """Noisy sums of ``columns`` per cell of ``keys``.

        A unit's per-record sensitivity Δ in a cell is the absolute sum of its rows there (each
        row is a unit unless the session sets ``unit=``). Each measure is released with
        independent noise; a unit's loss is the sum over measures and cells of ρ(Δ). Cell
        totals are exact sums (float values on the public ``2**-24`` grid, integers as they
        are; a value beyond ±2**64 is clamped to it), independent of row order. Under a
        session budget, units whose loss would pass their limit are left out of the release
        (an individual filter); nothing is refused.

        Args:
            columns: Measure column(s) to sum.
            by: Group-by column(s): exactly the key set's columns.
            keys: Public [`tabdp.KeySet`][tabdp.KeySet]; every key appears once in the output, empty
                cells included; rows outside it are dropped (counted in the confidential report).
            mechanism: A mechanism from [`tabdp.mechanisms`][tabdp.mechanisms].
            session: Session recording the release. ``None``: a one-off session of its own,
                available afterwards as ``tabdp.last_session()``.
            level: Confidence level of ``_moe`` (default 0.9, the Census standard).
            nulls: Missing values (null / NaN) in measures: ``"error"`` (default; curator mode
                only) refuses them, ``"zero"`` counts them as 0, ``"drop"`` drops the row from
                this release. In author mode ±inf counts as missing too.
            name: Label of the release in the session's report (default ``q<i>_sum``).
            grid: Public rounding grid of the estimates: a step (e.g. ``1.0`` dollar), a dict
                ``{measure: step}``, or ``None`` for each mechanism's documented default (for a
                measure of an integer dtype of at most 64 bits other than UInt64, a step of 1 where
                that default is finer: integer measures stay whole numbers; UInt64, Int128 and
                UInt128 sums, likelier to pass the Int64 range, stay Float64). Estimates are the
                exact noisy values rounded to the grid (docs/exact-rounding.md). A step may be at
                most a tenth of the noise's sd (σ/10 in transformed space for transformation
                mechanisms; a discrete mechanism's exact integers, step 1, are always allowed), as
                for a spec table's ``grid``: coarser, the estimate would be biased and the ``_sd``
                (the noise's) untrue, so it is refused before any data is read. Round for
                publication instead (``publication.round``, ``Publication(round=...)``), which flags
                the cells it moves.
            negatives: Negative values of the measures, with the rules and the default of
                the spec's ``input.negatives`` (`tabdp._defaults.NEGATIVES`): ``"error"``
                (default) refuses them, whatever the mechanism, so that a data error such as
                a negative payroll is never summed silently (curator mode; an author-mode
                call must declare another rule and is refused from its arguments otherwise);
                ``"allow"`` keeps signed values (signed measures, additive mechanisms; a
                mechanism that needs non-negative contributions still refuses negative
                unit-cell sums in curator mode), ``"zero"`` sets them to 0, ``"drop"`` drops
                their rows (both counted in the confidential report).
            max_cells: Public bound on the cells one unit contributes to (with ``unit=``): a
                unit's contributions to further cells are dropped, keeping its largest. Makes
                the public total curve a bound for every unit (``None``: unbounded).
            form: ``"wide"`` (default: one row per cell) or ``"long"`` (one row per cell and
                measure, the columns of the release workflow's public tables).
            cv: Wide form: also return ``{m}_cv`` and ``{m}_flag`` (the long form always has
                ``cv`` and ``flag``).

        Returns:
            A frame of the caller's library (pandas → pandas, Polars eager or lazy → Polars
            DataFrame). Wide: the key columns, then per measure ``{m}`` (estimate), ``{m}_sd``
            (standard deviation; plug-in where it depends on the true value; ``inf`` where it
            does not exist), ``{m}_moe`` (half-width of the exact ``level`` interval) and
            ``{m}_lower``, ``{m}_upper`` (its ends: asymmetric for transformation mechanisms,
            whose symmetric ``estimate ± moe`` would mis-cover; ``{m} ∓ {m}_moe`` for additive
            ones), with ``cv=True`` then ``{m}_cv`` (``sd / |estimate|``, null where the sd is
            not finite) and ``{m}_flag`` (``C``: cv ≥ 0.3, ``N``: negative, ``X``: no finite
            variance, ``L``: an Int64 estimate beyond ±(2**63 − 1024), the largest doubles
            inside the Int64 range, published clamped to that bound). Long:
            keys, ``measure``, ``estimate``, ``sd``, ``moe``, ``lower``, ``upper``, ``cv``,
            ``flag``. Key columns keep the input's dtypes (categorical, Enum, Int32); an
            integer measure's estimate (UInt64 and wider excepted, see ``grid``) is an integer
            (Int64) when its grid step is a whole number, which is the default for additive
            mechanisms (see ``grid``).

        Warns:
            UsabilityWarning: The mechanism cannot publish usable estimates (a transformation
                whose coefficient of variation never falls below 0.3, or noise without a
                finite mean or variance). Decided from the mechanism's parameters only, before
                any data is read (see [`usability_issues`][tabdp.planning.usability_issues]).

        Raises:
            ColumnNotFoundError: A named column is missing.
            ColumnTypeError: A measure is not numeric, or key dtypes cannot be compared (numbers
                against text).
            InvalidParameterError: Invalid arguments (a ``grid`` coarser than a tenth of the
                noise's sd included); in row mode, a frame that is not row for row the
                session's earlier frame.
            DataValidationError: Curator mode only: null/NaN (with ``nulls="error"``), ±inf,
                null unit ids, negative values (with ``negatives="error"``, the default), or
                negative unit-cell contributions for a transformation mechanism (with
                ``negatives="allow"``); the message names columns and rules, the counts are in
                ``err.confidential``.

        Example:
            >>> import polars as pl, tabdp
            >>> df = pl.DataFrame({"c": ["a", "b"], "x": [1.0, 2.0]})
            >>> df.dp.sum("x", by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]),
            ...           mechanism=tabdp.mechanisms.Laplace(scale=1.0)).height
            2
        """
        def release() -> Any:
            names = [columns] if isinstance(columns, str) else list(columns)
            _check_output_names(names, by, form, cv)
            check_api_grid(grid, mechanism, "sum", names)
            grid_used = integer_grid(grid, mechanism,
                                     _integer_columns(self._frame, names, session), names)
            return release_grouped(self._frame, kind="sum", measures=columns, by=by,
                                   keys=keys, mechanism=mechanism, session=session,
                                   level=level, nulls=nulls, name=name, grid=grid_used,
                                   negatives=negatives, max_cells=max_cells, form=form, cv=cv)

        return author_call(session, keys, release)

    def count(self, *, by: str | Sequence[str], keys: KeySet, mechanism: Mechanism | None = None,
              session: Session | None = None, level: float = DEFAULT_LEVEL,
              name: str | None = None, grid: Any = None, max_cells: int | None = None,
              max_rows: int | None = None, form: str = "wide", cv: bool = False) -> _Out:
        """Noisy row counts per cell of ``keys`` (output measure ``count``).

        A unit's Δ in a cell is its number of rows there (1 when each row is a unit).

        Args:
            by: Group-by column(s): exactly the key set's columns.
            keys: Public key set.
            mechanism: A mechanism from [`mechanisms`][tabdp.mechanisms]. Counts are integer
                queries: ``None`` (default) releases them with exact discrete Gaussian noise
                ``DiscreteGaussian(sigma=2.0)`` (ρ = Δ²/8), and ``Gaussian(σ)`` / ``Laplace(b)``
                are released with their exact integer counterparts ``DiscreteGaussian(σ)`` /
                ``DiscreteLaplace(b)`` (same guarantee, integer outputs; the session records the
                discrete mechanism) unless a non-integer ``grid`` is asked for.
            session: Session recording the release (``None``: one-off, see
                ``tabdp.last_session()``).
            level: Confidence level of ``count_moe``.
            name: Label of the release in the session's report.
            grid: Public rounding grid (``None``: the mechanism's default; discrete mechanisms
                release exact integers). At most a tenth of the noise's sd, step 1 of a
                discrete mechanism always allowed (see [`sum`][tabdp.frame.DPAccessor.sum]):
                a coarser grid is refused before any data is read.
            max_cells: Public bound on the cells one unit contributes to (with ``unit=``).
            max_rows: Public bound on the rows one unit counts in one cell (with ``unit=``):
                its count contribution is capped there, so the count's policy is at most
                ρ(max_rows) per cell, and the statistic is then the number of rows counting
                at most ``max_rows`` per unit and cell (``max_rows=1``: distinct units per
                cell). ``None`` (default) counts every row. A spec's count table with
                ``input.unit`` always has this cap, ``plan.count_rows`` (default 1).
            form: ``"wide"`` (default) or ``"long"`` (see [`sum`][tabdp.frame.DPAccessor.sum]).
            cv: Wide form: also return ``count_cv`` and ``count_flag``.

        Returns:
            Key columns, then ``count`` (Int64 on a whole-number grid, the default),
            ``count_sd``, ``count_moe``, ``count_lower``, ``count_upper`` (and ``count_cv``,
            ``count_flag`` with ``cv=True``); ``form="long"``: see
            [`sum`][tabdp.frame.DPAccessor.sum].

        Example:
            >>> import polars as pl, tabdp
            >>> df = pl.DataFrame({"c": ["a", "b", "b"]})
            >>> out = df.dp.count(by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]),
            ...                   mechanism=tabdp.mechanisms.Gaussian(sigma=1.0))
            >>> out.columns
            ['c', 'count', 'count_sd', 'count_moe', 'count_lower', 'count_upper']
        """
        def release() -> Any:
            _check_output_names(["count"], by, form, cv)
            from tabdp.frame._engine import count_mechanism

            check_api_grid(grid, mechanism, "count", ["count"])
            grid_used = integer_grid(grid, count_mechanism(mechanism, grid), ["count"],
                                     ["count"])
            return release_grouped(self._frame, kind="count", measures=None, by=by, keys=keys,
                                   mechanism=mechanism, session=session, level=level,
                                   nulls="error", name=name, grid=grid_used,
                                   max_cells=max_cells, max_rows=max_rows, form=form, cv=cv)

        return author_call(session, keys, release)

    def median(self, column: str, *, by: str | Sequence[str], keys: KeySet,
                bounds: tuple[float, float], epsilon: float, noise: str = "polyplace",
                session: Session | None = None, level: float = DEFAULT_LEVEL,
                gamma: float | None = None, delta: float | None = None, nulls: str = "error",
                name: str | None = None, grid: Any = None,
                uncertainty_share: float | None = None, form: str = "wide",
                cv: bool = False) -> _Out:
        """Private median of ``column`` per cell of ``keys`` (smooth sensitivity, [HT24]).

        The (lower) median of the values clipped to the public ``bounds`` is released with noise
        scaled to its γ-smooth sensitivity: PolyPlace by default (``noise="student_t"``,
        ``"cauchy"`` or ``"laplace"`` for the baselines). The ``_sd`` and ``_moe`` columns come
        from a private estimate of the noise scale (``ln SS`` plus Laplace noise), never from SS
        itself; the moe covers the true median (of the clipped values of the rows it used:
        without the units a budget left out) with probability at least ``level`` on every
        dataset. ε-DP per cell for one row (value and noise scale together); a unit with k rows
        in a cell pays k·ε there. Empty or tiny cells get the mechanism's answer, not an error:
        an empty cell's median is ``low``, a cell of one or two rows has its own (lower)
        median; both get noise scaled to a smooth sensitivity near ``high − low``.

        Args:
            column: Measure column.
            by: Group-by column(s): the key set's columns.
            keys: Public key set.
            bounds: Public ``(low, high)``; values outside are clipped (counted in the
                confidential report).
            epsilon: Total ε of the release (value and noise scale; see ``uncertainty_share``).
            noise: Noise family.
            session: Session recording the release (``None``: one-off, see ``tabdp.last_session``).
            level: Confidence level of the margin of error.
            gamma: Smoothness γ, fixed before seeing data (default: ε₁/3 for PolyPlace, with ε₁
                the value's share of ε; see [`choose_gamma`][tabdp.mechanisms.smooth.choose_gamma]
                to pick it from public guesses).
            delta: δ for ``noise="laplace"`` (default 1e-5).
            nulls: Missing values: ``"error"``, ``"zero"`` or ``"drop"``.
            name: Label of the release in the session.
            grid: Public rounding step of the estimates (``None``: the mechanism's default
                relative grid; see docs/exact-rounding.md).
            uncertainty_share: Fraction of ε spent on the private noise scale behind ``_sd``
                and ``_moe``, in (0, 1) (default: 2γ of ε, i.e. 40% for PolyPlace at the
                default γ; see [`split_epsilon`][tabdp.mechanisms.smooth.split_epsilon]).
            form: ``"wide"`` (default) or ``"long"`` (``measure`` is ``{column}_median``).
            cv: Wide form: also return ``_cv`` and ``_flag`` columns.

        Returns:
            Keys, ``{column}_median``, ``{column}_median_sd`` (``inf`` where it does not exist),
            ``{column}_median_moe``, ``{column}_median_lower``, ``{column}_median_upper``
            (estimate ∓ moe); one row per key.

        Example:
            >>> import polars as pl, tabdp
            >>> df = pl.DataFrame({"c": ["a"] * 5, "pay": [1.0, 2.0, 3.0, 4.0, 5.0]})
            >>> out = df.dp.median("pay", by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]),
            ...                    bounds=(0.0, 10.0), epsilon=1.0, session=tabdp.Session(seed=0))
            >>> out.columns[:4]
            ['c', 'pay_median', 'pay_median_sd', 'pay_median_moe']
        """
        def release() -> Any:
            return release_quantile(self._frame, column=column, q=0.5, median=True, by=by,
                                    keys=keys, bounds=bounds, epsilon=epsilon, noise=noise,
                                    gamma=gamma, delta=delta, session=session, level=level,
                                    nulls=nulls, name=name, grid=grid,
                                    uncertainty_share=uncertainty_share, form=form, cv=cv)

        return author_call(session, keys, release)


    def quantile(self, column: str, q: float, *, by: str | Sequence[str],
                  keys: KeySet, bounds: tuple[float, float], epsilon: float,
                  noise: str = "polyplace", session: Session | None = None,
                  level: float = DEFAULT_LEVEL, gamma: float | None = None,
                  delta: float | None = None, nulls: str = "error", name: str | None = None,
                  grid: Any = None, uncertainty_share: float | None = None,
                  form: str = "wide", cv: bool = False) -> _Out:
        """Private q-quantile of ``column`` per cell of ``keys`` (see `median`).

        The quantile is the order statistic of rank ``max(1, ceil(q·n))`` of the clipped values
        (numpy's ``inverted_cdf``); output columns are ``{column}_q{100q}`` (e.g. ``payroll_q90``)
        with ``_sd``, ``_moe``, ``_lower`` and ``_upper``.

        Args:
            column: Measure column.
            q: Quantile level in [0, 1].
            by: Group-by column(s).
            keys: Public key set.
            bounds: Public ``(low, high)``.
            epsilon: Total ε of the release (value and noise scale).
            noise: ``"polyplace"``, ``"student_t"``, ``"cauchy"`` or ``"laplace"``.
            session: Session recording the release.
            level: Confidence level of the margin of error.
            gamma: Smoothness γ (fixed before seeing data).
            delta: δ for ``noise="laplace"``.
            nulls: Missing values policy.
            name: Label of the release in the session.
            grid: Public rounding step of the estimates (``None``: the mechanism's default
                relative grid; see docs/exact-rounding.md).
            uncertainty_share: Fraction of ε spent on the private noise scale (see
                [`median`][tabdp.frame.DPAccessor.median]).
            form: ``"wide"`` (default) or ``"long"``.
            cv: Wide form: also return ``_cv`` and ``_flag`` columns.

        Returns:
            Keys, ``{column}_q{100q}``, ``_sd``, ``_moe``, ``_lower``, ``_upper``.

        Example:
            >>> import pandas as pd, tabdp
            >>> df = pd.DataFrame({"c": ["a"] * 4, "pay": [1.0, 2.0, 3.0, 4.0]})
            >>> out = df.dp.quantile("pay", 0.9, by="c", keys=tabdp.KeySet.from_dict(c=["a"]),
            ...                      bounds=(0.0, 10.0), epsilon=1.0, noise="student_t",
            ...                      session=tabdp.Session(seed=0))
            >>> list(out.columns)
            ['c', 'pay_q90', 'pay_q90_sd', 'pay_q90_moe', 'pay_q90_lower', 'pay_q90_upper']
        """
        def release() -> Any:
            return release_quantile(self._frame, column=column, q=q, median=False, by=by,
                                    keys=keys, bounds=bounds, epsilon=epsilon, noise=noise,
                                    gamma=gamma, delta=delta, session=session, level=level,
                                    nulls=nulls, name=name, grid=grid,
                                    uncertainty_share=uncertainty_share, form=form, cv=cv)

        return author_call(session, keys, release)


@overload
def dp(frame: pd.DataFrame) -> DPAccessor[pd.DataFrame]: ...
@overload
def dp(frame: pl.DataFrame | pl.LazyFrame) -> DPAccessor[pl.DataFrame]: ...
@overload
def dp(frame: Any) -> DPAccessor[Any]: ...
def dp(frame: Any) -> DPAccessor[Any]:
    """The ``.dp`` accessor of ``frame``, typed: ``tabdp.dp(df).sum(...)`` is ``df.dp.sum(...)``.

    Importing tabdp registers ``.dp`` on pandas and Polars frames at run time, which type
    checkers cannot see (mypy reports ``attr-defined`` on Polars frames, and a misleading
    overload error on pandas ones). This function returns the same accessor with its release
    methods typed by the frame's library: a pandas DataFrame gives pandas DataFrames, a Polars
    DataFrame or LazyFrame gives Polars DataFrames, and a PySpark DataFrame (typed ``Any``)
    gives Spark DataFrames.

    Args:
        frame: A pandas DataFrame, a Polars DataFrame or LazyFrame, or a PySpark DataFrame.

    Returns:
        The accessor: `sum`, `count`, `median` and `quantile` as documented on
        [`DPAccessor`][tabdp.frame.DPAccessor].

    Raises:
        UnsupportedBackendError: ``frame`` is none of these (also a ``TypeError``).

    Example:
        >>> import polars as pl, tabdp
        >>> df = pl.DataFrame({"county": ["a", "a", "b"], "payroll": [10.0, 20.0, 5.0]})
        >>> keys = tabdp.KeySet.from_dict(county=["a", "b"])
        >>> out = tabdp.dp(df).sum("payroll", by="county", keys=keys,
        ...                        mechanism=tabdp.mechanisms.Gaussian(sigma=1.0),
        ...                        session=tabdp.Session(seed=0))
        >>> out.columns[:3], out.height
        (['county', 'payroll', 'payroll_sd'], 2)
        >>> tabdp.dp({"payroll": [1.0]})
        Traceback (most recent call last):
        ...
        tabdp.exceptions.UnsupportedBackendError: tabdp.dp: expected a pandas DataFrame, ...
    """
    if is_frame(frame):
        return DPAccessor(frame)
    from tabdp.exceptions import UnsupportedBackendError

    raise UnsupportedBackendError(
        "tabdp.dp: expected a pandas DataFrame, a Polars DataFrame or LazyFrame, or a PySpark "
        f"DataFrame; got an object of type {type(frame).__module__}.{type(frame).__qualname__}."
        "\nHint: build a frame first, e.g. polars.DataFrame(data) or pandas.DataFrame(data).")


def register() -> None:
    """Register the ``dp`` accessor on pandas and Polars frames (idempotent).

    Example:
        >>> register()
    """
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # re-registration on reload warns in both libraries
        # pandas only once imported (tabdp._accessor_hook registers it on its first import)
        pd = sys.modules.get("pandas")
        if pd is not None and getattr(pd, "api", None) is not None:
            pd.api.extensions.register_dataframe_accessor("dp")(DPAccessor)
        pl.api.register_dataframe_namespace("dp")(DPAccessor)
        pl.api.register_lazyframe_namespace("dp")(DPAccessor)
