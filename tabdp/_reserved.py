"""Column names tabdp reserves for its own columns, on every engine.

Every column an engine adds next to the input's (row ids, keep flags, cells, charges, running
totals...) starts with `RESERVED`, and a measure, key or unit column whose name starts with it,
in any letter case, is refused before anything is read (docs/privacy-semantics.md).
"""

from __future__ import annotations

__all__ = ["RESERVED", "is_reserved"]

#: The prefix of every column tabdp adds next to the input's.
RESERVED = "__tabdp"


def is_reserved(name: str) -> bool:
    """Whether a column name starts with tabdp's reserved prefix, in any letter case.

    In any case because Spark resolves column names without regard to case by default
    (``spark.sql.caseSensitive=false``): ``__TABDP_ACC0`` would be replaced by, or read as, an
    added ``__tabdp_acc0`` (review r28).

    Args:
        name: A column name.

    Returns:
        ``True`` when the name is reserved.

    Example:
        >>> is_reserved("__tabdp_row"), is_reserved("__TABDP_x"), is_reserved("__acc0")
        (True, True, False)
    """
    return name.lower().startswith(RESERVED)
