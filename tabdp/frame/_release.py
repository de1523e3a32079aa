"""Sums, counts, medians and quantiles (the ``.dp`` accessor's releases) on Polars engines.

``df.dp.sum`` / ``df.dp.count`` and ``df.dp.median`` / ``df.dp.quantile``.

The sequence is `tabdp.frame.pipeline` (plan, then execute over a backend); the in-memory and
streaming backends are in `tabdp.frame.backends.polars`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tabdp._defaults import NEGATIVES as DEFAULT_NEGATIVES
from tabdp.exceptions import InvalidParameterError
from tabdp.frame._requests import accessor_request
from tabdp.frame._stream import Planned
from tabdp.frame.keys import KeySet
from tabdp.frame.pipeline import (
    execute_all,
    execute_quantile,
    plan,
    plan_quantile,
    quantile_backend,
)
from tabdp.mechanisms import DEFAULT_LEVEL, Mechanism
from tabdp.privacy.session import Session

__all__ = ["grouped_release", "quantile_release", "planned_releases", "execute_planned"]


# -- the release ------------------------------------------------------------------------------
def grouped_release(native: Any, *, kind: str, measures: str | Sequence[str] | None,
                    by: str | Sequence[str] | None, keys: KeySet, mechanism: Mechanism | None,
                    session: Session | None = None, level: float = DEFAULT_LEVEL,
                    nulls: str = "error", name: str | None = None, grid: Any = None,
                    negatives: str = DEFAULT_NEGATIVES, max_cells: int | None = None,
                    max_rows: int | None = None, form: str = "wide", cv: bool = False) -> Any:
    """Release noisy sums or counts of ``native`` grouped by ``by`` over the key set ``keys``.

    This is the implementation behind ``df.dp.sum`` and ``df.dp.count``; see those for the
    user documentation and the module docstring for the data flow.

    Args:
        native: A pandas DataFrame, Polars DataFrame or Polars LazyFrame.
        kind: ``"sum"`` or ``"count"``.
        measures: Columns to sum (ignored for counts).
        by: Group-by columns (exactly the key set's columns).
        keys: The public key set.
        mechanism: The mechanism (``None``: the default count mechanism; sums need one).
        session: Session to record in (default: a fresh one, see
            [`last_session`][tabdp.last_session]).
        level: Confidence level of the margins of error.
        nulls: ``"error"``, ``"zero"`` or ``"drop"``.
        name: Label of the release in the session.
        grid: Public rounding grid: a step, ``{measure: step}``, or ``None`` (defaults).
        negatives: Rule for negative values: ``"error"`` (the default, `tabdp._defaults.NEGATIVES`,
            as in a spec), ``"allow"``, ``"zero"`` or ``"drop"``.
        max_cells: Public bound on the cells one unit contributes to (unit mode): a unit's
            contributions to further cells are dropped, keeping its largest (ties: key-set
            order). ``None``: unbounded. Each row is in one cell in row mode.
        max_rows: Public bound on the rows one unit counts in one cell (counts): a unit's
            count contribution is capped there. ``None``: unbounded (1 in row mode).
        form: ``"wide"`` (default) or ``"long"`` (`tabdp.frame._output`).
        cv: Wide form: add ``_cv`` and ``_flag`` columns (the long form always has them).

    Returns:
        A frame of the caller's library: keys (in the input's dtypes), then per measure the
        estimate (Int64 for counts and integer measures on a whole-number grid), ``_sd``,
        ``_moe``, ``_lower`` and ``_upper`` columns (the interval is the mechanism's exact
        ``level`` interval: asymmetric for transformation mechanisms, estimate ∓ moe for
        additive ones); one row per key. ``form="long"``: keys, ``measure``, ``estimate``,
        ``sd``, ``moe``, ``lower``, ``upper``, ``cv``, ``flag``.

    Example:
        >>> import polars as pl, tabdp
        >>> df = pl.DataFrame({"c": ["a", "b", "b"], "x": [1.0, 2.0, 3.0]})
        >>> out = grouped_release(df, kind="sum", measures=["x"], by=["c"],
        ...                       keys=tabdp.KeySet.from_dict(c=["a", "b", "z"]),
        ...                       mechanism=tabdp.mechanisms.Gaussian(1.0),
        ...                       session=tabdp.Session(seed=0))
        >>> out.columns, out.height
        (['c', 'x', 'x_sd', 'x_moe', 'x_lower', 'x_upper'], 3)
    """
    rel = plan(native, session, None, kind=kind, measures=measures, by=by, keys=keys,
               mechanism=mechanism, level=level, nulls=nulls, name=name, grid=grid,
               negatives=negatives, max_cells=max_cells, max_rows=max_rows, form=form, cv=cv,
               )  # usability warnings point at the first caller outside tabdp
    return execute_all([rel])[0]


def planned_releases(native: Any, session: Session,
                     requests: Sequence[Mapping[str, Any]]) -> list[Planned]:
    """Plan several releases of one input in one session, every check before any data is read.

    Args:
        native: The input (a pandas DataFrame, Polars DataFrame or LazyFrame).
        session: The session all the releases are recorded in.
        requests: One mapping per release, in release order, with the keyword arguments of
            `grouped_release` (``kind``, ``measures``, ``by``, ``keys``, ``mechanism``,
            ``level``, ``nulls``, ``name``, ``grid``, ``negatives``, ``max_cells``,
            ``max_rows``, ``form``, ``cv``).

    Returns:
        The planned releases, for `execute_planned`.

    Raises:
        InvalidParameterError: A release's arguments, or two releases with one name (nothing
            is read and nothing is recorded).

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(seed=1)
        >>> k = tabdp.KeySet.from_dict(c=["a", "b"])
        >>> rels = planned_releases(pl.DataFrame({"c": ["a"], "x": [1.0]}), s, [
        ...     dict(kind="count", by="c", keys=k), dict(kind="count", by="c", keys=k)])
        >>> [r.op.name for r in rels], len(s.records)
        (['q1_count', 'q2_count'], 0)
    """
    if not isinstance(session, Session):
        raise InvalidParameterError(
            f"releases planned together need a session; got {type(session).__name__}.\n"
            "Hint: pass session=tabdp.Session(...).")
    batch: list[Planned] = []
    for req in requests:  # the accessor's output-name checks and integer grids, as one by one
        batch.append(plan(native, session, batch, **accessor_request(native, session, req)))
    return batch


def execute_planned(rels: Sequence[Planned]) -> list[Any]:
    """Execute planned releases in order, each as it would run alone.

    The one pipeline (`tabdp.frame.pipeline.execute_all`) over the session's Polars backend:
    a streaming session (row mode without per-row state) runs each release as one lazy plan
    over the input; other sessions take a snapshot per release (a sum then a count of the same
    frame and key set share one). Every table, noise draw and per-record loss is the one the
    releases give one by one, in this order; names taken since planning are refused before
    anything runs.

    Args:
        rels: Releases from `planned_releases`, in release order.

    Returns:
        The released tables, in order.

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(seed=1, streaming=True)
        >>> k = tabdp.KeySet.from_dict(c=["a", "b"])
        >>> lf = pl.LazyFrame({"c": ["a", "b", "b"], "x": [1.0, 2.0, 3.0]})
        >>> outs = execute_planned(planned_releases(lf, s, [
        ...     dict(kind="count", by="c", keys=k, name="n"),
        ...     dict(kind="sum", measures="x", by="c", keys=k, name="x",
        ...          mechanism=tabdp.mechanisms.Gaussian(2.0))]))
        >>> [o.columns[1] for o in outs], [r.name for r in s.records]
        (['count', 'x'], ['n', 'x'])
    """
    return execute_all(rels)


def quantile_release(native: Any, *, column: str, q: float, median: bool,
                     by: str | Sequence[str] | None, keys: KeySet, bounds: Any, epsilon: float,
                     noise: str = "polyplace", gamma: float | None = None,
                     delta: float | None = None, uncertainty_share: float | None = None,
                     session: Session | None = None,
                     level: float = DEFAULT_LEVEL, nulls: str = "error",
                     name: str | None = None, grid: Any = None, form: str = "wide",
                     cv: bool = False) -> Any:
    """Release a private q-quantile of ``column`` per cell of ``keys`` (Polars engines).

    This is the implementation behind ``df.dp.median`` and ``df.dp.quantile``
    (`tabdp.frame._quantiles` for the method): `tabdp.frame.pipeline.plan_quantile`, then
    `tabdp.frame.pipeline.execute_quantile` over the session's Polars backend.

    Args:
        native: pandas DataFrame, Polars DataFrame or LazyFrame.
        column: Measure column.
        q: Quantile level in [0, 1].
        median: Label the output ``_median`` (``dp.median``) instead of ``_q{100q}``.
        by: Group-by columns (the key set's columns).
        keys: Public key set.
        bounds: Public ``(low, high)``; values are clipped to it.
        epsilon: Total ε of the release (per cell, per row): the value's ε₁ plus the noise
            scale's ε₂ (see [`split_epsilon`][tabdp.mechanisms.smooth.split_epsilon]).
        noise: ``"polyplace"`` (default), ``"student_t"``, ``"cauchy"`` or ``"laplace"``.
        gamma: Smoothness γ (default [`default_gamma`][tabdp.mechanisms.smooth.default_gamma] at
            ε₁).
        delta: δ for ``noise="laplace"``.
        uncertainty_share: Fraction of ε spent on the private noise scale behind ``_sd`` and
            ``_moe``, in (0, 1) (default: 2γ, see
            [`split_epsilon`][tabdp.mechanisms.smooth.split_epsilon]).
        session: Session to record in.
        level: Confidence level of ``_moe``.
        nulls: ``"error"``, ``"zero"`` or ``"drop"``.
        name: Label of the release in the session.
        grid: Public rounding step of the estimates (``None``: the mechanism's default
            relative grid, see docs/exact-rounding.md).
        form: ``"wide"`` (default) or ``"long"`` (`tabdp.frame._output`).
        cv: Wide form: add ``{label}_cv`` and ``{label}_flag``.

    Returns:
        A frame of the caller's library: keys, ``{label}``, ``{label}_sd``, ``{label}_moe``,
        ``{label}_lower``, ``{label}_upper`` (the ``level`` interval, estimate ∓ moe); long
        form: keys, ``measure``, ``estimate``, ``sd``, ``moe``, ``lower``, ``upper``, ``cv``,
        ``flag``.

    Example:
        >>> import polars as pl, tabdp
        >>> df = pl.DataFrame({"c": ["a", "a", "a", "b"], "x": [1.0, 2.0, 3.0, 9.0]})
        >>> out = quantile_release(df, column="x", q=0.5, median=True, by="c",
        ...                        keys=tabdp.KeySet.from_dict(c=["a", "b"]), bounds=(0, 10),
        ...                        epsilon=1.0, session=tabdp.Session(seed=1))
        >>> out.columns
        ['c', 'x_median', 'x_median_sd', 'x_median_moe', 'x_median_lower', 'x_median_upper']
    """
    rel = plan_quantile(native, session, column=column, q=q, median=median, by=by, keys=keys,
                        bounds=bounds, epsilon=epsilon, noise=noise, gamma=gamma, delta=delta,
                        uncertainty_share=uncertainty_share, level=level, nulls=nulls,
                        name=name, grid=grid, form=form, cv=cv)
    return execute_quantile(rel, quantile_backend(rel))
