"""The releases of a spec's table: its measured levels, their mechanisms and measures (public).

Shared by the plan, the tables stage and consistent tables (no data is read here).
"""

from __future__ import annotations

from typing import Any

from tabdp.mechanisms import Mechanism
from tabdp.release.spec import TableSpec

__all__: list[str] = []


def _released_measures(t: TableSpec) -> list[str]:
    return list(t.measures) if t.kind == "sum" else ["count"]


def _table_mechanism(t: TableSpec, label: str | None = None) -> Mechanism:
    """The mechanism actually used (counts: exact integer counterparts, see count_mechanism).

    ``label``: a measured level of a consistent table with ``shares`` (the level's own
    mechanism for its share of the targets); ``None`` or no shares: the table's.
    """
    from tabdp.frame import count_mechanism

    mech = t.level_mechanisms.get(label, t.mechanism) if label is not None else t.mechanism
    if t.kind == "count":
        return count_mechanism(mech, t.grid)
    return mech


def _measured_labels(t: TableSpec) -> list[str]:
    """Labels of the releases of a table in run order: the table, then its direct rollups."""
    return ["_".join(t.by) if t.by else "national", *[r.label for r in t.rollups if r.direct]]


def total_curve_description(spec: Any) -> str:
    """Public: what a plan's ``total_policy_curve`` adds up, in words (from the spec alone).

    The total adds every table's loss at the same number Δ, whatever its currency (dollars of
    payroll, employees; count tables at ``plan.count_rows`` rows per cell): with several
    currencies it is a pessimistic bound, for a unit whose contribution is Δ in every one.

    Args:
        spec: A validated `ReleaseSpec`.

    Returns:
        The description (``total_policy_curve_description`` of plan.json and summary.json).

    Example:
        >>> from tabdp.release.spec import load_spec
        >>> import tabdp, pathlib
        >>> root = pathlib.Path(tabdp.__file__).parents[1]
        >>> total_curve_description(load_spec(root / "examples" / "cbp_release.toml"))[:53]
        "pessimistic total: every currency's loss at the same "
    """
    from tabdp.privacy.budget import ROWS_CURRENCY, joint_currency

    cur: dict[str, None] = {}
    for t in spec.tables:
        if t.kind == "count":
            cur[ROWS_CURRENCY] = None
        elif getattr(t.mechanism, "joint", False):
            cur[joint_currency(t.measures)] = None
        else:
            cur.update(dict.fromkeys(_released_measures(t)))
    rows = (f"; count tables at {spec.plan.count_rows} row(s) per cell"
            if ROWS_CURRENCY in cur else "")
    if len(cur) <= 1:
        return f"the losses of every table added at the same record size Δ{rows}"
    named = ", ".join(c for c in cur if c != ROWS_CURRENCY)
    return ("pessimistic total: every currency's loss at the same number Δ, added up "
            f"({named} each at Δ{rows}): a bound for a unit whose contribution is Δ in every "
            "currency. A unit's actual total adds each currency's loss at its own size there "
            "(the guarantee in words), so the budget check against this total is "
            "conservative")
