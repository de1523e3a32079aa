"""What a release spec may say, and the typed getters that check it.

The keys of every table (`SPEC_KEYS`), the allowed values and mechanism families, and the
getters that check one value and fail with its key path (`SpecError`).
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from tabdp import registry
from tabdp._defaults import NEGATIVE_RULES
from tabdp._reserved import ROW_ID as _ROW_ID
from tabdp._validation import CV_THRESHOLD_LIMIT, bounds_text, cv_threshold_fix, first_fall
from tabdp.exceptions import SpecError

#: Spec family name -> mechanism class name in :mod:`tabdp.mechanisms` (read from
#: :mod:`tabdp.registry`, canonical names; the registry's aliases such as ``"log_transform"`` are
#: accepted too). The other keys of a ``mechanism`` table are that class's constructor arguments.
MECHANISM_FAMILIES: dict[str, str] = {
    f.name: f.cls.__name__ for f in registry.families("mechanism", tag="spec")}

#: Families ``tabdp.calibrate`` accepts (``calibrate.family``).
CALIBRATION_FAMILIES: tuple[str, ...] = registry.names("mechanism", tag="calibrate")


#: Rounding rule: a global ``[publication] round`` applies to a table only where the unit is at
#: most this share of the table's planned margin of error at its typical cell total (else the
#: spec is refused: set ``round`` per table); the ``R`` flag marks published cells whose unit
#: is more than this share of their own margin of error. At 0.1 the rounding error (at most half
#: the unit, standard deviation unit/sqrt(12)) adds less than 0.3% to the standard deviation.
ROUND_MOE_SHARE = 0.1


_SCHEMA = "the full schema is in the docstring of tabdp.release.spec"
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_RELEASE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_TABLE_NAME = re.compile(r"^[A-Za-z0-9_]+$")
_TABLE_REF = re.compile(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+){0,2}$")
_NULLS = ("error", "zero", "drop")
_NEGATIVES = NEGATIVE_RULES  # the Python API's rules and default (tabdp._defaults)
_KINDS = ("sum", "count")
_NEGATIVE_RULES = ("flag", "clamp")
_OBJECTIVES = ("auto", "sd", "moe")
_FRAME_SUFFIXES = (".csv", ".parquet", ".pq")

#: Every key a spec accepts, per table, by key path: ``""`` is the top level, ``tables[]`` each
#: ``[[tables]]`` entry, ``hierarchies.*`` each named hierarchy and ``domains.*`` a domain given as
#: a file. The parser refuses any other key; the docs' spec reference is generated from this table
#: and checked against the schema above (docs/_gen/refgen.py).
SPEC_KEYS: dict[str, tuple[str, ...]] = {
    "": ("release", "input", "domains", "hierarchies", "budget", "ledger", "randomness",
         "output", "publication", "plan", "tables"),
    "release": ("name", "title", "description", "level", "delta"),
    "input": ("path", "table", "dataset", "hive_partitioning", "unit", "mode", "nulls",
              "negatives", "nonfinite", "bounds", "unit_nulls", "max_cells"),
    "domains.*": ("file", "column"),
    "hierarchies.*": ("file", "levels"),
    "budget": ("rho", "max_left_out"),
    "ledger": ("path", "series", "lifetime_budget", "max_left_out"),
    "randomness": ("seed",),
    "output": ("public", "confidential", "plan", "form"),
    "publication": ("cv_flag", "suppress_cv", "negative", "round"),
    "plan": ("cell_totals", "count_totals", "record_sizes", "count_rows"),
    "tables[]": ("name", "kind", "measures", "by", "keys", "mechanism", "calibrate", "grid",
                 "nulls", "publication", "rollups", "consistent", "shares",
                 "nonnegative", "integer"),
    "tables[].keys": ("file",),
    "tables[].calibrate": ("family", "targets", "typical_total", "fixed", "objective"),
    "tables[].rollups[]": ("by", "direct"),
}
_ROOT_KEYS = SPEC_KEYS[""]
_ROOT_REQUIRED = ("release", "input", "output")  # and a non-empty "tables", checked apart
_RELEASE_KEYS = SPEC_KEYS["release"]
_INPUT_KEYS = SPEC_KEYS["input"]
_MODES = ("curator", "author")
_NONFINITE = ("error", "zero", "drop", "clamp")
_UNIT_NULLS = ("error", "drop")
_HIERARCHY_KEYS = SPEC_KEYS["hierarchies.*"]
_DOMAIN_FILE_KEYS = SPEC_KEYS["domains.*"]
_OUTPUT_KEYS = SPEC_KEYS["output"]
_PUBLICATION_KEYS = SPEC_KEYS["publication"]
_PLAN_KEYS = SPEC_KEYS["plan"]
_TABLE_KEYS = SPEC_KEYS["tables[]"]
_ROLLUP_KEYS = SPEC_KEYS["tables[].rollups[]"]
_CALIBRATE_KEYS = SPEC_KEYS["tables[].calibrate"]
_OUTPUT_FOLDERS = ("public", "confidential", "plan")


# -- messages -----------------------------------------------------------------------------------
def _join(path: str, key: Any) -> str:
    """Key path of ``key`` inside ``path`` (keys that are not bare TOML keys are quoted)."""
    key = str(key)
    text = key if _BARE_KEY.match(key) else json.dumps(key)
    return f"{path}.{text}" if path else text


def _tname(value: Any) -> str:
    """TOML-ish type name of a parsed value."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "table"
    return type(value).__name__


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 160 else text[:157] + "..."


def _fail(path: str, message: str, hint: str) -> NoReturn:
    raise SpecError(path, f"{message}\nHint: {hint}")


def _maybe(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def _article(word: str) -> str:
    return "an" if word[:1] in ("a", "e", "i", "o", "u") else "a"


def _names(items: Sequence[Any]) -> str:
    return ", ".join(repr(x) for x in items) if items else "(none)"


# -- typed getters ------------------------------------------------------------------------------
def _table(value: Any, path: str, *, allowed: Sequence[str], required: Sequence[str] = (),
           example: str = "") -> dict[str, Any]:
    """Check that ``value`` is a table with only ``allowed`` keys and every ``required`` one."""
    where = path or "the spec"
    if not isinstance(value, Mapping):
        _fail(path, f"must be a table; got {_show(value)} ({_tname(value)}).",
              f"write it as a TOML table{' such as ' + example if example else ''}; "
              f"allowed keys: {', '.join(allowed)}.")
    for key, item in value.items():
        if key not in allowed:
            _fail(_join(path, str(key)),
                  f"unknown key {key!r} (value {_show(item)}) in {where}."
                  f"{_maybe(str(key), allowed)} Allowed keys: {', '.join(allowed)}.",
                  f"fix the spelling or remove the key; {_SCHEMA}.")
    missing = [k for k in required if k not in value]
    if missing:
        what = "section(s)" if not path else "key(s)"
        _fail(path, f"missing required {what} {_names(missing)} in {where}.",
              f"add {', '.join(missing)}{' (e.g. ' + example + ')' if example else ''}; "
              f"{_SCHEMA}.")
    return dict(value)


def _string(value: Any, path: str, *, what: str, hint: str, pattern: re.Pattern[str] | None = None,
            rule: str = "") -> str:
    if not isinstance(value, str) or not value:
        _fail(path, f"{what} must be a non-empty string; got {_show(value)} ({_tname(value)}).",
              hint)
    if pattern is not None and not pattern.fullmatch(value):
        _fail(path, f"{what} {value!r} is not allowed: {rule}.", hint)
    return value


def _enum(value: Any, path: str, choices: Sequence[str], hint: str) -> str:
    if not isinstance(value, str) or value not in choices:
        maybe = _maybe(value, choices) if isinstance(value, str) else ""
        _fail(path, f"must be one of {_names(choices)}; got {_show(value)} "
                    f"({_tname(value)}).{maybe}", hint)
    return value


def _bool(value: Any, path: str, hint: str) -> bool:
    if not isinstance(value, bool):
        _fail(path, f"must be true or false; got {_show(value)} ({_tname(value)}).", hint)
    return value


def _number(value: Any, path: str, *, what: str, hint: str, gt: float | None = None,
            ge: float | None = None, lt: float | None = None) -> float:
    rng = bounds_text(gt, ge, lt)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(path, f"{what} must be a number{' ' + rng if rng else ''}; got {_show(value)} "
                    f"({_tname(value)}).", hint)
    x = float(value)
    ok = math.isfinite(x) and (gt is None or x > gt) and (ge is None or x >= ge)
    if not ok or (lt is not None and x >= lt):
        _fail(path, f"{what} must be a finite number{' ' + rng if rng else ''}; "
                    f"got {_show(value)}.", hint)
    return x


def _str_list(value: Any, path: str, *, what: str, hint: str, nonempty: bool) -> tuple[str, ...]:
    if not isinstance(value, list):
        _fail(path, f"{what} must be an array of strings; got {_show(value)} ({_tname(value)}).",
              hint)
    for j, item in enumerate(value):
        if not isinstance(item, str) or not item:
            _fail(f"{path}[{j}]", f"{what} must hold non-empty strings; got {_show(item)} "
                                  f"({_tname(item)}).", hint)
    if nonempty and not value:
        _fail(path, f"{what} must not be empty; got [].", hint)
    seen: set[str] = set()
    for item in value:
        if item in seen:
            _fail(path, f"{what} lists {item!r} twice: {_show(value)}.",
                  "remove the duplicate; each name may appear once.")
        seen.add(item)
    return tuple(value)


def _size_key(key: str, path: str, *, what: str, hint: str) -> float:
    """A ``"1e3"``-style table key parsed as a finite float > 0."""
    try:
        x = float(key)
    except ValueError:
        x = math.nan
    if not (math.isfinite(x) and x > 0.0):
        _fail(path, f"{what} {key!r} is not a number > 0 (keys are sizes written as strings).",
              hint)
    return x


def _size_curve(value: Any, path: str, *, what: str, hint: str,
                nondecreasing: bool = False) -> dict[float, float]:
    """A non-empty table ``{"size" = value > 0}`` with distinct sizes.

    With ``nondecreasing`` (a budget curve: `tabdp.Budget` refuses a limit that falls with the
    size), a value below the one at a smaller size is refused here, with its key path, so that
    ``tabdp validate`` does not call such a spec valid.
    """
    if not isinstance(value, Mapping) or not value:
        _fail(path, f"{what} must be a non-empty table {{\"size\" = value}}; got {_show(value)} "
                    f"({_tname(value)}).", hint)
    out: dict[float, float] = {}
    for key, item in value.items():
        kp = _join(path, str(key))
        size = _size_key(str(key), kp, what="size", hint=hint)
        if size in out:
            _fail(kp, f"size {key!r} = {size:g} is given twice in {what}.",
                  "keep one entry per size.")
        out[size] = _number(item, kp, what=f"the value at size {key!r}", gt=0.0, hint=hint)
    if nondecreasing:
        _refuse_fall(value, out, path, lambda k0, r0, k1, r1: (
            f"{what} falls with the size: {r1:g} at size {k1!r} is below {r0:g} at the "
            f"smaller size {k0!r} (a larger unit may not get a smaller budget).",
            'give larger sizes larger (or equal) limits, e.g. { "1e3" = 0.5, "1e7" = 10.0 }.'))
    return out


def _refuse_fall(raw: Mapping[str, Any], curve: Mapping[float, float], path: str,
                 words: Callable[[str, float, str, float], tuple[str, str]]) -> None:
    """Refuse a size curve (read by `_size_curve` from ``raw``) whose value falls with the size.

    ``words(key0, value0, key1, value1)`` gives the message and hint for the first fall
    (`tabdp._validation.first_fall`): ``key1``, the larger size as written, is below ``key0``;
    the error's path is ``key1``'s.
    """
    keys = {float(k): str(k) for k in raw}
    fall = first_fall((s, r, keys[s]) for s, r in curve.items())
    if fall is not None:
        (_, r0, k0), (_, r1, k1) = fall
        _fail(_join(path, k1), *words(k0, r0, k1, r1))


def _per_measure(value: Mapping[Any, Any], path: str, measures: Sequence[str], *, what: str,
                 hint: str) -> dict[str, float]:
    """A non-empty table ``{measure = number > 0}`` over ``measures`` (a grid, a rounding unit)."""
    if not value:
        _fail(path, "must not be an empty table; got {}.", hint)
    out = {}
    for key, v in value.items():
        kp = _join(path, str(key))
        if key not in measures:
            _fail(kp, f"{key!r} is not a measure of this table (measures: {_names(measures)})."
                      f"{_maybe(str(key), measures)}", hint)
        out[key] = _number(v, kp, what=what, gt=0.0, hint=hint)
    return out


def _cv(value: Any, path: str) -> float | None:
    hint = "a coefficient of variation such as 0.3, or false to disable the rule."
    if value is False:
        return None
    if value is True:
        _fail(path, "must be a number > 0 or false; got true.", hint)
    x = _number(value, path, what="the cv threshold", gt=0.0, hint=hint)
    if x >= CV_THRESHOLD_LIMIT:
        # a cv is a fraction: 30 (meant as 30 %) would flag only cells whose sd is 30 times
        # their estimate, that is almost none, silently (review rev67w)
        _fail(path, f"the cv threshold must be > 0 and below {CV_THRESHOLD_LIMIT:g} (a "
                    f"coefficient of variation, sd / |estimate|, written as a fraction); got "
                    f"{_show(value)}.", cv_threshold_fix(x, path.rsplit(".", 1)[-1]))
    return x


#: The constant key column the run adds for a national (``by = []``) table or rollup
#: (`tabdp.release._input.NATIONAL`): no unit, measure or key column may have this name, in any
#: letter case (Spark resolves column names without regard to case).
NATIONAL = "_tabdp_national"
#: The row id the run assigns when each row is a unit (`tabdp.release._input.ROW_ID`).
ROW_ID = _ROW_ID

#: Columns of the public tables: no key column may have these names (nor the run's own columns,
#: the last two).
RESERVED_COLUMNS = ("measure", "estimate", "sd", "moe", "lower", "upper", "cv", "flag", "cells",
                    NATIONAL, ROW_ID)
