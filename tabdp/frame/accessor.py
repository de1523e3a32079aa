"""The ``.dp`` accessor on pandas DataFrames and Polars DataFrames / LazyFrames.

The accessor holds no state: pandas rebuilds it on every attribute access and Polars caches it
per frame, so sessions are passed explicitly (``session=``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import polars as pl

from tabdp.frame._engine import grouped_release
from tabdp.frame.keys import KeySet
from tabdp.mechanisms._base import DEFAULT_LEVEL, Mechanism
from tabdp.privacy.session import Session

__all__ = ["DPAccessor"]


class DPAccessor:
    """Differentially private grouped releases: ``df.dp.sum(...)``, ``df.dp.count(...)``.

    Registered on ``pandas.DataFrame`` and on ``polars.DataFrame`` / ``polars.LazyFrame`` when
    tabdp is imported.

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
        (['county', 'payroll', 'payroll_sd', 'payroll_moe'], 3)
    """

    def __init__(self, frame: Any) -> None:
        self._frame = frame

    def sum(self, columns: str | Sequence[str], *, by: str | Sequence[str], keys: KeySet,
            mechanism: Mechanism, session: Session | None = None,
            level: float = DEFAULT_LEVEL, nulls: str = "error", name: str | None = None) -> Any:
        """Noisy sums of ``columns`` per cell of ``keys``.

        A unit's per-record sensitivity Δ in a cell is the absolute sum of its rows there (each
        row is a unit unless the session sets ``unit=``). Each measure is released with
        independent noise; a unit's loss is the sum over measures and cells of ρ(Δ).

        Args:
            columns: Measure column(s) to sum.
            by: Group-by column(s): exactly the key set's columns.
            keys: Public :class:`tabdp.KeySet`; every key appears once in the output, empty
                cells included; rows outside it are dropped (counted in the confidential report).
            mechanism: A mechanism from :mod:`tabdp.mechanisms`.
            session: Session recording the release. ``None``: a one-off session of its own,
                available afterwards as ``tabdp.last_session()``.
            level: Confidence level of ``_moe`` (default 0.9, the Census standard).
            nulls: Missing values (null / NaN) in measures: ``"error"`` (default) refuses them,
                ``"zero"`` counts them as 0, ``"drop"`` drops the row from this release.
            name: Label of the release in the session's report (default ``q<i>_sum``).

        Returns:
            A frame of the caller's library (pandas → pandas, Polars eager or lazy → Polars
            DataFrame): the key columns, then per measure ``{m}`` (estimate), ``{m}_sd``
            (standard deviation; plug-in where it depends on the true value; ``inf`` where it
            does not exist) and ``{m}_moe`` (half-width of the exact ``level`` interval).

        Raises:
            ColumnNotFoundError: A named column is missing.
            ColumnTypeError: A measure is not numeric, or key dtypes do not match.
            DataValidationError: Null/NaN (with ``nulls="error"``), ±inf, null unit ids, or
                negative cell totals for a transformation mechanism.
            BudgetExceededError: Some unit would pass the session's budget.

        Example:
            >>> import polars as pl, tabdp
            >>> df = pl.DataFrame({"c": ["a", "b"], "x": [1.0, 2.0]})
            >>> df.dp.sum("x", by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]),
            ...           mechanism=tabdp.mechanisms.Laplace(scale=1.0)).height
            2
        """
        return grouped_release(self._frame, kind="sum", measures=columns, by=by, keys=keys,
                               mechanism=mechanism, session=session, level=level, nulls=nulls,
                               name=name)

    def count(self, *, by: str | Sequence[str], keys: KeySet, mechanism: Mechanism,
              session: Session | None = None, level: float = DEFAULT_LEVEL,
              name: str | None = None) -> Any:
        """Noisy row counts per cell of ``keys`` (output measure ``count``).

        A unit's Δ in a cell is its number of rows there (1 when each row is a unit).

        Args:
            by: Group-by column(s): exactly the key set's columns.
            keys: Public key set.
            mechanism: A mechanism from :mod:`tabdp.mechanisms`.
            session: Session recording the release (``None``: one-off, see
                ``tabdp.last_session()``).
            level: Confidence level of ``count_moe``.
            name: Label of the release in the session's report.

        Returns:
            Key columns, then ``count``, ``count_sd``, ``count_moe``.

        Example:
            >>> import polars as pl, tabdp
            >>> df = pl.DataFrame({"c": ["a", "b", "b"]})
            >>> out = df.dp.count(by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]),
            ...                   mechanism=tabdp.mechanisms.Gaussian(sigma=1.0))
            >>> out.columns
            ['c', 'count', 'count_sd', 'count_moe']
        """
        return grouped_release(self._frame, kind="count", measures=None, by=by, keys=keys,
                               mechanism=mechanism, session=session, level=level,
                               nulls="error", name=name)


def register() -> None:
    """Register the ``dp`` accessor on pandas and Polars frames (idempotent).

    Example:
        >>> register()
    """
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # re-registration on reload warns in both libraries
        pd.api.extensions.register_dataframe_accessor("dp")(DPAccessor)
        pl.api.register_dataframe_namespace("dp")(DPAccessor)
        pl.api.register_lazyframe_namespace("dp")(DPAccessor)
