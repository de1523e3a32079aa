"""Sessions: the privacy unit, the randomness, the budget and the ledger of releases."""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from tabdp.exceptions import BudgetExceededError, InvalidParameterError
from tabdp.privacy.accounting import COMPONENTS, epsilon_at
from tabdp.privacy.budget import Budget
from tabdp.privacy.conversions import check_dp_delta
from tabdp.privacy.ledger import POLICY_GRID, QueryRecord, UnitLosses, _num
from tabdp.rng import RandomSource

if TYPE_CHECKING:
    from tabdp.mechanisms._base import Mechanism

__all__ = ["Session", "Report", "last_session", "total_policy_curve"]

_LAST = threading.local()


def last_session() -> Session | None:
    """The session of the most recent one-off release (a call made with ``session=None``).

    Each ``df.dp.sum(...)`` / ``df.dp.count(...)`` call without ``session=`` runs in a fresh
    session of its own; this returns it (per thread) until the next one-off call replaces it, so
    ``tabdp.last_session().report()`` gives that release's report.

    Returns:
        The session, or ``None`` if no one-off release was made in this thread.

    Example:
        >>> import polars as pl, tabdp
        >>> df = pl.DataFrame({"c": ["a", "b"], "x": [1.0, 2.0]})
        >>> keys = tabdp.KeySet.from_dict(c=["a", "b"])
        >>> _ = df.dp.count(by=["c"], keys=keys, mechanism=tabdp.mechanisms.Gaussian(1.0))
        >>> tabdp.last_session().report().per_record.height
        2
    """
    return getattr(_LAST, "session", None)


def _set_last(session: Session) -> None:
    _LAST.session = session


class Session:
    """A privacy session: unit, randomness, optional per-record budget and ledger.

    Args:
        unit: Column identifying the privacy unit (e.g. ``"estab_id"``: all rows of an
            establishment form one unit). ``None``: each row is a unit, and every call in the
            session must see the same rows in the same order.
        seed: ``None`` (default) for secure OS randomness. An int makes noise reproducible:
            **for tests only**; the report marks the session as not for production.
        budget: Optional public limit on each unit's total PRzCDP ρ: a number, a
            ``{size: rho}`` curve, or :class:`tabdp.Budget`. A query that would take any unit
            past it is refused before noise is drawn.

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(unit=None, seed=1, budget=1.0)
        >>> df = pl.DataFrame({"c": ["a", "a", "b"], "x": [1.0, 2.0, 3.0]})
        >>> keys = tabdp.KeySet.from_dict(c=["a", "b"])
        >>> out = df.dp.count(by=["c"], keys=keys, mechanism=tabdp.mechanisms.Gaussian(2.0),
        ...                   session=s)
        >>> s.report().per_record["rho"].to_list()
        [0.125, 0.125, 0.125]
    """

    def __init__(self, unit: str | None = None, seed: int | None = None,
                 budget: float | dict[float, float] | Budget | None = None) -> None:
        if unit is not None and (not isinstance(unit, str) or not unit):
            raise InvalidParameterError(
                f"Session: unit must be a column name or None; got {unit!r}.\n"
                "Hint: Session(unit='estab_id') groups all rows of an establishment.")
        self.unit = unit
        self.seed = seed
        self.rng = RandomSource(seed)
        self.budget = Budget.coerce(budget)
        #: Keep a CONFIDENTIAL per-cell audit of each release (worst loss of one unit per cell,
        #: in ``QueryRecord.cells``); used by the release workflow's confidential report.
        self.track_cells = False
        self.records: list[QueryRecord] = []
        self.backend = "polars"
        self._n_rows: int | None = None
        # Row mode: component name -> array over rows (rho_z / rho_g / eps_a / delta_a are
        # only materialized once a release needs them; see tabdp.privacy.accounting).
        self._row_totals: dict[str, np.ndarray] | None = None
        self._unit_totals: pl.DataFrame | None = None
        # Aggregation of the last Polars frame released, reused by a later release of the same
        # frame object with the same grouping (e.g. a count after a sum): one pass over records.
        self._agg_cache: dict[Any, dict[str, Any]] = {}

    # -- names --------------------------------------------------------------------------------
    def _name(self, requested: str | None, kind: str) -> str:
        taken = {r.name for r in self.records}
        if requested is not None:
            if not isinstance(requested, str) or not re.fullmatch(r"[A-Za-z0-9_]+", requested):
                raise InvalidParameterError(
                    f"name must be letters, digits and '_'; got {requested!r}.")
            if requested in taken:
                raise InvalidParameterError(
                    f"name {requested!r} is already used in this session; names label the "
                    f"per-record report columns. Used: {sorted(taken)}.")
            return requested
        i = len(self.records) + 1
        name = f"q{i}_{kind}"
        while name in taken:
            i += 1
            name = f"q{i}_{kind}"
        return name

    # -- accounting ---------------------------------------------------------------------------
    def _check_rows(self, n_rows: int) -> None:
        if self.unit is None and self._n_rows is not None and n_rows != self._n_rows:
            raise InvalidParameterError(
                f"This session counts each row as a unit and its earlier releases read "
                f"{self._n_rows} rows; this frame has {n_rows}. Row i of every call must be the "
                "same record.\nHint: create the session with unit='<id column>' to follow units "
                "across different frames.")

    def _prospective(self, losses: UnitLosses) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                        np.ndarray | None]:
        """Totals (rho, size, previously spent rho, ids) for the units of ``losses``."""
        if losses.units is None:
            if self._row_totals is None:
                prev = np.zeros(losses.n)
                size = losses.size
            else:
                prev = self._row_totals["rho"]
                size = np.maximum(self._row_totals["size"], losses.size)
            return prev + losses.rho, size, prev, None
        new = pl.DataFrame({"unit": losses.units, "rho_new": losses.rho, "size_new": losses.size})
        if self._unit_totals is not None:
            new = new.join(self._unit_totals.select("unit", "rho", "size")
                           .rename({"rho": "rho_old", "size": "size_old"}),
                           on="unit", how="left", maintain_order="left")
        else:
            new = new.with_columns(rho_old=pl.lit(None, pl.Float64), size_old=pl.lit(None, pl.Float64))
        prev = new["rho_old"].fill_null(0.0).to_numpy()
        size = np.maximum(new["size_old"].fill_null(0.0).to_numpy(), losses.size)
        return prev + losses.rho, size, prev, losses.units

    def check_budget(self, losses: UnitLosses) -> None:
        """Refuse (before any noise is drawn) a query that takes a unit past the budget.

        The check uses the units' actual losses, which are confidential: the error message is
        for the analyst running the release, not for publication.

        Args:
            losses: The per-unit losses the query would add.

        Raises:
            BudgetExceededError: With requested / remaining for the worst unit.

        Example:
            >>> s = Session(budget=1.0)
            >>> s.check_budget(UnitLosses(None, np.array([0.5]), np.array([np.inf]), np.ones(1)))
        """
        if self.budget is None or losses.n == 0:
            return
        total, size, prev, ids = self._prospective(losses)
        limit = self.budget.limit(size)
        over = ~(total <= limit * (1.0 + 1e-12))  # a NaN loss counts as over, never as within
        if not np.any(over):
            return
        excess = np.where(over, np.nan_to_num(total - limit, nan=np.inf), -np.inf)
        i = int(np.argmax(excess))
        who = f"unit {ids[i]!r}" if ids is not None else f"row {i}"
        raise BudgetExceededError(
            f"Privacy budget exceeded: this query would take {int(over.sum())} unit(s) past "
            f"the per-record budget {self.budget!r}. Worst: {who} (size {size[i]:.6g}): "
            f"requested rho={losses.rho[i]:.6g}, already spent {prev[i]:.6g}, remaining "
            f"{max(limit[i] - prev[i], 0.0):.6g} (limit {limit[i]:.6g}; difference "
            f"{total[i] - limit[i]:.6g}). Nothing was released or recorded.\n"
            "Hint: use more noise (larger sigma / smaller d) or a slower-scaling mechanism; "
            "these figures come from confidential data: do not publish this message.")

    def _record(self, record: QueryRecord, backend: str) -> None:
        losses = record.losses
        self.backend = backend
        if losses is not None:
            if losses.units is None:
                self._row_totals = _add_rows(self._row_totals, losses)
                self._n_rows = losses.n
            else:
                new = pl.DataFrame({c: v for c, v in _components(losses).items()}
                                   | {"unit": losses.units}).select("unit", *COMPONENTS)
                if self._unit_totals is not None:
                    new = pl.concat([self._unit_totals, new], how="vertical_relaxed")
                self._unit_totals = (
                    new.group_by("unit", maintain_order=True)
                    .agg(*[pl.col(c).sum() for c in COMPONENTS if c != "size"],
                         pl.col("size").max())
                    .select("unit", *COMPONENTS))
        self.records.append(record)

    # -- reporting ----------------------------------------------------------------------------
    def report(self, delta: float | None = None) -> Report:
        """The session's report: public part (``to_dict``) and confidential ``per_record``.

        Args:
            delta: Optional δ in (0, 1) at which the report also states each record's
                (ε, δ)-DP loss (column ``epsilon_delta`` of :attr:`Report.per_record`, and
                the ``epsilon_delta`` entries of the public policy curve).

        Returns:
            A :class:`Report`.

        Example:
            >>> Session().report().to_dict()["queries"]
            []
        """
        return Report(self, delta)

    def __repr__(self) -> str:
        seed = "secure" if self.seed is None else f"seed={self.seed} (NOT FOR PRODUCTION)"
        return (f"Session(unit={self.unit!r}, {seed}, budget={self.budget!r}, "
                f"releases={len(self.records)})")


def _components(losses: UnitLosses) -> dict[str, np.ndarray]:
    """The loss components (``COMPONENTS``) one query adds to its units."""
    n = losses.n
    zero = np.broadcast_to(0.0, (n,))
    approx = losses.guarantee == "approx"
    return {
        "rho": losses.rho, "epsilon": losses.epsilon, "size": losses.size,
        "rho_z": zero if approx else losses.rho,
        "rho_g": losses.rho if losses.guarantee == "gaussian" else zero,
        "eps_a": losses.eps_a if approx else zero,  # type: ignore[dict-item]
        "delta_a": losses.delta_a if approx else zero,  # type: ignore[dict-item]
    }


def _add_rows(totals: dict[str, np.ndarray] | None, losses: UnitLosses
              ) -> dict[str, np.ndarray]:
    """Row-mode totals after one more query; optional components are created when needed."""
    parts = _components(losses)
    if totals is None:
        out = {c: parts[c] for c in ("rho", "epsilon", "size")}
        if losses.guarantee == "approx":
            out |= {c: parts[c] for c in ("rho_z", "eps_a", "delta_a")}
        if losses.guarantee == "gaussian":
            out["rho_g"] = parts["rho_g"]
        return out
    out = dict(totals)
    if losses.guarantee == "approx" and "rho_z" not in out:
        out["rho_z"] = out["rho"]  # everything so far had a zCDP guarantee
        out["eps_a"] = np.zeros(losses.n)
        out["delta_a"] = np.zeros(losses.n)
    out["rho"] = totals["rho"] + losses.rho
    out["epsilon"] = totals["epsilon"] + losses.epsilon
    out["size"] = np.maximum(totals["size"], losses.size)
    if "rho_z" in out:
        out["rho_z"] = out["rho_z"] + parts["rho_z"]
        out["eps_a"] = out["eps_a"] + parts["eps_a"]
        out["delta_a"] = out["delta_a"] + parts["delta_a"]
    if losses.guarantee == "gaussian":
        out["rho_g"] = out["rho_g"] + parts["rho_g"] if "rho_g" in out else parts["rho_g"]
    return out


def _row_component(totals: dict[str, np.ndarray], name: str) -> np.ndarray:
    """A row-mode component, with its implicit value when it was never materialized."""
    if name in totals:
        return totals[name]
    if name == "rho_z":
        return totals["rho"]
    return np.broadcast_to(0.0, totals["rho"].shape)


def _column(name: str, values: np.ndarray) -> pl.Series:
    """A Float64 column; constant (broadcast) arrays are built natively instead of copied."""
    if values.ndim == 1 and values.size > 1 and values.strides == (0,):
        return pl.repeat(float(values[0]), values.size, dtype=pl.Float64, eager=True).alias(name)
    return pl.Series(name, values, dtype=pl.Float64)


def total_policy_curve(entries: Sequence[tuple[Mechanism, int]], sizes: Sequence[float],
                       delta: float | None = None) -> list[dict[str, float | None]]:
    """Public worst-case curve of several releases: the loss of a unit contributing Δ to one
    cell of every released measure (``k`` charges per release: its number of measures, or 1 for
    a joint mechanism).

    Args:
        entries: ``(mechanism, k)`` per release.
        sizes: Record sizes Δ (≥ 0).
        delta: Optional δ: rows then also hold ``epsilon_delta`` (ε at that δ; exact Gaussian-DP
            for Gaussian-shift mechanisms, zCDP conversion for the others, basic composition for
            approximate-DP-only ones).

    Returns:
        Rows ``{"delta", "rho", "epsilon"[, "epsilon_delta"]}`` (``None`` for infinite values).

    Example:
        >>> from tabdp.mechanisms import Gaussian
        >>> total_policy_curve([(Gaussian(1.0), 2)], [0.0, 1.0])[1]
        {'delta': 1.0, 'rho': 1.0, 'epsilon': None}
    """
    d = np.asarray(sizes, dtype=np.float64)
    comps = {c: np.zeros_like(d) for c in COMPONENTS}
    for mechanism, k in entries:
        rho = mechanism.rho(d)
        comps["rho"] += k * rho
        comps["epsilon"] += k * mechanism.epsilon(d)
        guarantee = UnitLosses.guarantee_of(mechanism)
        if guarantee == "approx":
            ea, da = mechanism.approx_policy(d)
            comps["eps_a"] += k * ea
            comps["delta_a"] += k * da
        else:
            comps["rho_z"] += k * rho
            if guarantee == "gaussian":
                comps["rho_g"] += k * rho
    rows: list[dict[str, float | None]] = [
        {"delta": float(x), "rho": _num(a), "epsilon": _num(b)}
        for x, a, b in zip(d, comps["rho"], comps["epsilon"], strict=True)]
    if delta is not None:
        eps = epsilon_at(delta, comps["rho_z"], comps["rho_g"], comps["eps_a"],
                         comps["delta_a"], comps["epsilon"])
        for row, v in zip(rows, eps, strict=True):
            row["epsilon_delta"] = _num(v)
    return rows


class Report:
    """Report of a session: a public summary and a CONFIDENTIAL per-record table.

    * :meth:`to_dict` holds only data-independent content: mechanisms, parameters, policy
      curves, key-set sizes, the seed policy and budget. It may be published.
    * :attr:`per_record` holds each unit's actual losses, which reveal its values: it must
      stay inside the agency.
    * :meth:`confidential_summary` holds record-derived counts (rows dropped outside the key
      set, largest loss, quantiles): confidential too.

    Args:
        session: The session to report on.
        delta: Optional δ in (0, 1): the report then also states each record's (ε, δ)-DP
            loss (``epsilon_delta``), composing approximate-DP releases (their ε and per-cell δ
            add up) with the exact Gaussian-DP or zCDP conversion of the other releases' ρ.

    Example:
        >>> Report(Session(seed=3)).to_dict()["session"]["randomness"]
        'seeded: NOT FOR PRODUCTION (the seed is in the confidential summary)'
    """

    def __init__(self, session: Session, delta: float | None = None) -> None:
        self.session = session
        self.delta = None if delta is None else check_dp_delta(delta, "Report")

    @property
    def per_record(self) -> Any:
        """CONFIDENTIAL: one row per unit with total ``rho``, ``epsilon``, ``size`` and per-query
        ``rho_<name>``.

        The frame is of the library the session's releases used (pandas or Polars). Units are
        identified by the unit column (or ``row``, the row position, when each row is a unit).
        ``epsilon`` is ``inf`` if any release touching the unit was not pure. ``size`` is the
        unit's largest absolute contribution to a released cell. When the report has a δ,
        ``epsilon_delta`` is the unit's (ε, δ)-DP loss at that δ (see :class:`Report`).

        Example:
            >>> Session().report().per_record.columns
            ['row', 'rho', 'epsilon', 'size']
            >>> Session().report(delta=1e-9).per_record.columns
            ['row', 'rho', 'epsilon', 'size', 'epsilon_delta']
        """
        s = self.session
        unit_col = s.unit or "row"
        recs = [r for r in s.records if r.losses is not None]
        shown = ("rho", "epsilon", "size")
        if s.unit is None:
            n = s._n_rows or 0
            cols = [pl.int_range(n, dtype=pl.Int64, eager=True).alias("row")]
            if s._row_totals is None:
                cols += [pl.Series(c, [], dtype=pl.Float64) for c in shown]
                comps = None
            else:
                comps = {c: _row_component(s._row_totals, c) for c in COMPONENTS}
                cols += [_column(c, comps[c]) for c in shown]
            if self.delta is not None:
                cols.append(_column("epsilon_delta", np.zeros(0) if comps is None else
                                    self._eps_delta(comps)))
            cols += [_column(f"rho_{r.name}", r.losses.rho)  # type: ignore[union-attr]
                     for r in recs]
            out = pl.DataFrame(cols)
        else:
            if s._unit_totals is None:
                out = pl.DataFrame({unit_col: [], **{c: [] for c in shown}},
                                   schema={unit_col: pl.Int64, **{c: pl.Float64 for c in shown}})
                if self.delta is not None:
                    out = out.with_columns(epsilon_delta=pl.lit(None, pl.Float64))
            else:
                out = s._unit_totals.rename({"unit": unit_col}).select(unit_col, *shown)
                if self.delta is not None:
                    comps = {c: s._unit_totals[c].to_numpy() for c in COMPONENTS}
                    out = out.with_columns(epsilon_delta=pl.Series(self._eps_delta(comps)))
                for r in recs:
                    part = pl.DataFrame({unit_col: r.losses.units,  # type: ignore[union-attr]
                                         f"rho_{r.name}": r.losses.rho})  # type: ignore[union-attr]
                    out = out.join(part, on=unit_col, how="left", maintain_order="left")
                out = out.with_columns(pl.col(f"rho_{r.name}").fill_null(0.0) for r in recs)
        if s.backend == "pandas":
            return out.to_pandas()
        return out

    def _eps_delta(self, comps: dict[str, np.ndarray]) -> np.ndarray:
        assert self.delta is not None
        return epsilon_at(self.delta, comps["rho_z"], comps["rho_g"], comps["eps_a"],
                          comps["delta_a"], comps["epsilon"])

    def total_policy_curve(self) -> list[dict[str, float | None]]:
        """Public worst-case curve: ρ and ε of a unit contributing Δ to every released cell
        kind (each measure of each query; once per cell for a joint mechanism, Δ being then
        the norm of its weighted contribution vector), at Δ = 0, 1, 10, ..., 1e8.

        Returns:
            Rows ``{"delta", "rho", "epsilon"}`` (``None`` for infinite values), plus
            ``"epsilon_delta"`` (ε at the report's δ) when the report has a δ.

        Example:
            >>> Report(Session()).total_policy_curve()[1]
            {'delta': 1.0, 'rho': 0.0, 'epsilon': 0.0}
        """
        entries = [(r.mechanism, 1 if getattr(r.mechanism, "joint", False) else len(r.measures))
                   for r in self.session.records]
        return total_policy_curve(entries, POLICY_GRID, self.delta)

    def to_dict(self) -> dict[str, Any]:
        """PUBLIC summary: data-independent content only.

        Returns:
            A JSON-serializable dict: tabdp version, session settings, one entry per release
            (mechanism, parameters, policy curve, key set size and source) and the total curve.

        Example:
            >>> sorted(Report(Session()).to_dict())
            ['queries', 'session', 'tabdp_version', 'total_policy_curve']
        """
        from tabdp import __version__

        s = self.session
        return {
            "tabdp_version": __version__,
            "session": {
                "unit": s.unit or "row",
                # never the seed itself: with it anyone could regenerate the noise and
                # subtract it from the published tables
                "randomness": "secure (OS CSPRNG)" if s.seed is None else
                              "seeded: NOT FOR PRODUCTION (the seed is in the confidential "
                              "summary)",
                "budget": None if s.budget is None else s.budget.to_dict(),
                "delta": self.delta,
            },
            "queries": [r.public() for r in s.records],
            "total_policy_curve": self.total_policy_curve(),
        }

    def confidential_summary(self) -> dict[str, Any]:
        """CONFIDENTIAL counts and loss statistics computed from the records.

        Returns:
            The seed of a seeded session (it reproduces the noise), per-query counts (rows
            read, rows outside the key set, null handling) and overall loss statistics (units,
            max and quantiles of ρ).

        Example:
            >>> Report(Session()).confidential_summary()["units"]
            0
        """
        s = self.session
        if s.unit is None:
            rho = s._row_totals["rho"] if s._row_totals is not None else np.zeros(0)
        else:
            rho = (s._unit_totals["rho"].to_numpy() if s._unit_totals is not None
                   else np.zeros(0))
        qs = [0.5, 0.9, 0.99, 0.999]
        stats = {}
        if rho.size:
            # Losses may be inf (approximate-DP releases); interpolating between two infs gives
            # NaN (and a RuntimeWarning) where the quantile is inf.
            with np.errstate(invalid="ignore"):
                vals = np.quantile(rho, qs)
            vals = np.where(np.isnan(vals) & np.any(np.isinf(rho)), np.inf, vals)
            stats = {f"rho_q{q}": float(v) for q, v in zip(qs, vals, strict=True)}
        return {
            "seed": s.seed,
            "units": int(rho.size),
            "rho_max": float(rho.max()) if rho.size else None,
            **stats,
            "queries": [{"name": r.name, **r.confidential,
                         "exact_rounding_fallbacks": dict(r.fallbacks)} for r in s.records],
        }
