"""The releases of a spec's table: its measured levels, their mechanisms and measures (public).

Shared by the plan, the tables stage and consistent tables (no data is read here).
"""

from __future__ import annotations

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
