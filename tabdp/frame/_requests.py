"""The arguments of a release as the ``.dp`` accessor passes them to the engine.

Output-name checks for the chosen form, the whole-number default grid of integer measures, and
the arguments of releases planned together (`tabdp.frame._release.planned_releases`), so
that a batch gives the tables the accessor gives one by one. Schema and arguments only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tabdp.exceptions import InvalidParameterError
from tabdp.frame import binding
from tabdp.frame._grid import check_api_grid
from tabdp.frame._output import (
    LONG_COLUMNS,
    STAT_SUFFIXES,
    WIDE_SUFFIXES,
    check_form,
    check_key_names,
    integer_dtype,
    integer_grid,
)
from tabdp.frame.backends import frame_kind
from tabdp.privacy.session import Session

__all__ = ["accessor_request"]


#: The arguments of a planned release (``grouped_release``'s keywords).
_REQUEST_KEYS = frozenset({"kind", "measures", "by", "keys", "mechanism", "level", "nulls",
                           "name", "grid", "negatives", "max_cells", "max_rows", "form", "cv"})


def accessor_request(frame: Any, session: Session | None, req: Mapping[str, Any]
                     ) -> dict[str, Any]:
    """A release's arguments as ``frame.dp.sum`` / ``frame.dp.count`` pass them to the engine.

    The output names are checked for the form (and ``cv``), and integer measures (counts
    included) get the whole-number default grid (`tabdp.frame._output.integer_grid`),
    so releases planned together give the tables the accessor gives one by one. Schema and
    arguments only, no data read.

    Args:
        frame: The input frame.
        session: The releases' session.
        req: The keyword arguments of one release (``kind``, ``measures``, ``by``, ...).

    Returns:
        The arguments with the grid the accessor would use.

    Raises:
        InvalidParameterError: A kind other than ``sum`` or ``count``, an unknown argument, or
            a key column named like an output column.

    Example:
        >>> import polars as pl, tabdp
        >>> req = dict(kind="sum", measures="n", by="c", keys=tabdp.KeySet.from_dict(c=["a"]),
        ...            mechanism=tabdp.mechanisms.Gaussian(3.0))
        >>> accessor_request(pl.DataFrame({"c": ["a"], "n": [1]}), None, req)["grid"]
        {'n': 1.0}
    """
    out = dict(req)
    kind, grid = out.get("kind"), out.get("grid")
    if kind not in ("sum", "count"):
        raise InvalidParameterError(
            f"a planned release's kind must be 'sum' or 'count'; got {kind!r}.\nHint: "
            "release medians and quantiles with frame.dp.median / frame.dp.quantile.")
    unknown = sorted(set(out) - _REQUEST_KEYS)
    if unknown:
        raise InvalidParameterError(
            f"unknown argument(s) {unknown} in a planned {kind}; allowed: "
            f"{sorted(_REQUEST_KEYS)}.\nHint: use the keyword names of frame.dp.{kind}.")
    form, cv, by = out.get("form", "wide"), out.get("cv", False), out.get("by", [])
    if kind == "sum":
        cols = out.get("measures")
        names = [cols] if isinstance(cols, str) else (
            list(cols) if isinstance(cols, Sequence) and all(isinstance(c, str) for c in cols)
            else None)
        if names is None or not isinstance(by, (str, Sequence)):
            return out  # malformed: the engine's argument checks refuse it
        _check_output_names(names, by, form, cv)
        check_api_grid(grid, out.get("mechanism"), "sum", names)
        out["grid"] = integer_grid(grid, out.get("mechanism"),
                                   _integer_columns(frame, names, session), names)
    elif kind == "count":
        if not isinstance(by, (str, Sequence)):
            return out
        from tabdp.frame._engine import count_mechanism

        _check_output_names(["count"], by, form, cv)
        check_api_grid(grid, out.get("mechanism"), "count", ["count"])
        out["grid"] = integer_grid(grid, count_mechanism(out.get("mechanism"), grid),
                                   ["count"], ["count"])
    return out


def _integer_columns(frame: Any, columns: Sequence[str],
                     session: Session | None = None) -> list[str]:
    """The columns among ``columns`` of an integer dtype (schema only; missing ones skipped).

    In author mode only the columns the curator declared integer (`Curator`):
    pandas turns an integer column into float64 as soon as one record holds a missing value
    (and a Parquet file written by pandas keeps that), so a frame's dtype would tell the query
    author whether such a record exists (there the integer grid is used only when asked for,
    ``grid=1``).
    """
    # (a wrong session= argument is refused later, with the other argument checks)
    if isinstance(session, Session) and session.mode == "author":
        # integrality is declared by the curator, never read from the frame (whose dtype can
        # follow its contents)
        return [c for c in columns if binding.of(session).declares_integer(c)]
    kind = frame_kind(frame)
    if kind == "pandas":
        import pandas as pd  # a pandas frame: pandas is imported already

        return [c for c in columns if c in frame.columns
                and pd.api.types.is_integer_dtype(frame[c].dtype)
                and not pd.api.types.is_bool_dtype(frame[c].dtype)
                and str(frame[c].dtype).lower() != "uint64"]
    if kind in ("polars", "lazy"):
        schema = frame.collect_schema()
        return [c for c in columns if c in schema and integer_dtype(schema[c])]
    if kind == "spark":
        from tabdp.frame._spark import polars_schema

        pschema = polars_schema(frame)
        return [c for c in columns if c in pschema and integer_dtype(pschema[c])]
    return []


def _check_output_names(measures: Sequence[str], by: str | Sequence[str], form: str,
                        cv: bool) -> None:
    """Key columns must not carry the name of an output column of the chosen form."""
    form = check_form(form)
    if not isinstance(cv, bool):
        raise InvalidParameterError(
            f"cv must be True or False; got {cv!r}.\nHint: cv=True adds the _cv and _flag "
            "columns to the wide form.")
    keys = [by] if isinstance(by, str) else [b for b in by if isinstance(b, str)]
    if form == "long":
        outputs = list(LONG_COLUMNS)
    else:
        outputs = [f"{m}{s}" for m in measures
                   for s in (*WIDE_SUFFIXES, *(STAT_SUFFIXES if cv else ()))]
    check_key_names(keys, outputs, f"the {form} form ({outputs})")
