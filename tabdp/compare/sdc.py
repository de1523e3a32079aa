"""Traditional disclosure control of a table with the Tau-Argus engine (``pytauargus``).

The options string of ``tabdp compare --sdc`` is parsed by `parse_sdc()`; `protect()`
runs Tau-Argus on one table's microdata (one row per contributor, or per privacy unit and
finest cell) with hierarchical dimensions and returns every cell of the protected table (true
value, number of contributors, largest contribution, status, required protection and what is
published). A unit with rows in several finest cells is Tau-Argus' holding, judged by
holding-level rules: one contributor at every cell. Nothing here is public: the frames hold
the true cells.
"""

from __future__ import annotations

import math
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tabdp.exceptions import DataValidationError, InvalidParameterError, UnsupportedBackendError

TOTAL = "Total"
INSTALL = 'pip install "tabdp[sdc]"'
_METHODS = ("OPT", "MOD", "RND")
_KEYS = ("p", "nk", "freq", "secondary", "base", "time", "linked")
_LINKED = ("auto", "on", "off")


@dataclass(frozen=True)
class SdcOptions:
    """The traditional release: primary rules and the secondary method.

    Attributes:
        p: The p% rule's p (``None``: no p% rule). The intruder is the second largest
            contributor (Tau-Argus ``P(p,1)``).
        nk: The (n,k) dominance rule ``(n, k)``: unsafe when the n largest contributors hold
            more than k% of the cell (``None``: no dominance rule).
        freq: Minimum number of contributors (``None``: no frequency rule). Count tables use
            only this rule (with none, counts are published in full, as CBP does).
        secondary: ``"MOD"`` (modular, HiTaS; the default), ``"OPT"`` (optimal suppression)
            or ``"RND"`` (controlled rounding).
        base: Rounding base for ``RND`` (``None``: the smallest base Tau-Argus allows).
        time: Time limit in minutes given to Tau-Argus' solver.
        linked: Protection of tables that share cells (same measure): ``"auto"`` (the
            default: linked when two tables share a cell), ``"on"`` or ``"off"`` (each table
            on its own). See `tabdp.compare.core` (the linked-tables rounds).
    """

    p: int | None = 10
    nk: tuple[int, int] | None = None
    freq: int | None = None
    secondary: str = "MOD"
    base: int | None = None
    time: int = 10
    linked: str = "auto"

    def rules(self, *, count: bool = False, holding: bool = False) -> str:
        """The Tau-Argus safety-rule string of a magnitude table (or a count table).

        Args:
            count: The rules of a count table (the frequency rule only).
            holding: The rules at holding level (the privacy unit is Tau-Argus' holding
                variable). Tau-Argus reads its rules by position: the first two ``P`` and
                ``NK`` rules and the first ``FREQ`` rule are individual (record) level, the
                next ones holding level. The individual places are filled with rules that
                never apply (``P(0,0)``, ``NK(0,0)``, ``FREQ(0,0)``), so every rule judges
                holdings (a record of the microdata given to Tau-Argus is one unit's part
                of one finest cell, never larger than its unit there).

        Returns:
            The rules joined by ``|`` (empty when there are none).

        Example:
            >>> SdcOptions(p=10, nk=(2, 85), freq=3).rules()
            'P(10,1)|NK(2,85)|FREQ(3,10)'
            >>> SdcOptions(p=10, freq=3).rules(count=True)
            'FREQ(3,10)'
            >>> SdcOptions(p=10, freq=3).rules(holding=True)
            'P(0,0)|P(0,0)|P(10,1)|P(0,0)|FREQ(0,0)|FREQ(3,10)'
        """
        out = []
        if not count and self.p is not None:
            p = f"P({self.p},1)"
            out += ["P(0,0)", "P(0,0)", p, "P(0,0)"] if holding else [p]
        if not count and self.nk is not None:
            nk = f"NK({self.nk[0]},{self.nk[1]})"
            out += ["NK(0,0)", "NK(0,0)", nk, "NK(0,0)"] if holding else [nk]
        if self.freq is not None:
            f = f"FREQ({self.freq},10)"
            out += ["FREQ(0,0)", f] if holding else [f]
        return "|".join(out)

    def suppress(self, base: int | None = None) -> str:
        """The Tau-Argus ``<SUPPRESS>`` command for table 1.

        Args:
            base: The rounding base to use for RND (default: `base`).

        Returns:
            ``OPT(1,t)``, ``MOD(1,t,1,0,0)`` or ``RND(1,base,0,t,0,2)``.

        Example:
            >>> SdcOptions(secondary="MOD").suppress()
            'MOD(1,10,1,0,0)'
        """
        if self.secondary == "OPT":
            return f"OPT(1,{self.time})"
        if self.secondary == "MOD":
            return f"MOD(1,{self.time},1,0,0)"
        b = base if base is not None else self.base
        return f"RND(1,{b},0,{self.time},0,2)"

    def describe(self) -> str:
        """The options in words (for reports).

        Returns:
            A short sentence.

        Example:
            >>> SdcOptions(p=10, nk=(2, 85)).describe()
            'p% rule (p = 10), (2,85) dominance rule; secondary suppression MOD'
        """
        parts = []
        if self.p is not None:
            parts.append(f"p% rule (p = {self.p})")
        if self.nk is not None:
            parts.append(f"({self.nk[0]},{self.nk[1]}) dominance rule")
        if self.freq is not None:
            parts.append(f"at least {self.freq} contributors")
        rules = ", ".join(parts) or "no primary rule"
        if self.secondary == "RND":
            return f"{rules}; controlled rounding (base {self.base or 'automatic'})"
        return f"{rules}; secondary suppression {self.secondary}"

    def as_dict(self) -> dict[str, Any]:
        """The options as JSON-ready values.

        Returns:
            A dict with the attributes.

        Example:
            >>> SdcOptions().as_dict()["secondary"]
            'MOD'
        """
        return {"p": self.p, "nk": list(self.nk) if self.nk else None, "freq": self.freq,
                "secondary": self.secondary, "base": self.base, "time": self.time,
                "linked": self.linked, "rules": self.rules()}


#: The integer options: what each must be and what is allowed (review rev66w: every one of
#: them was answered "Allowed: e.g. p=10", and p's and freq's "none" was not mentioned).
_INT_OPTIONS: dict[str, tuple[str, str]] = {
    "p": ("an integer from 1 to 100, or none", "1 to 100 or none, e.g. p=10"),
    "freq": ("a positive integer (the minimum number of contributors), or none",
             "1 or more or none, e.g. freq=3"),
    "base": ("a positive integer (the rounding base of secondary=RND)",
             "1 or more, e.g. base=1000"),
    "time": ("a positive integer (the solver's time limit in minutes)",
             "1 or more, e.g. time=10"),
}


def _bad(text: str, got: str, allowed: str) -> InvalidParameterError:
    return InvalidParameterError(
        f"--sdc: {text}; got {got!r}. Allowed: {allowed}.\nHint: write the options as "
        "'p=10; nk=2,85; freq=3; secondary=OPT' (secondary OPT, MOD or RND; base=N for RND; "
        "time=N solver minutes; linked=auto, on or off).")


def _percent_fix(key: str, val: str) -> str:
    """A fraction where a whole percent is meant (``p=0.1``, ``nk=2,0.85``): the value to write.

    Example:
        >>> _percent_fix("nk", "2,0.85")
        ' (k is a whole percent: write nk=2,85 for 85 %)'
        >>> _percent_fix("p", "ten")
        ''
    """
    head, _, last = val.rpartition(",") if key == "nk" else ("", "", val)
    try:
        x = float(last)
    except ValueError:
        return ""
    if not 0 < x < 1:
        return ""
    pct = f"{x * 100:.10g}"
    if not pct.isdigit():
        return ""
    name = "k" if key == "nk" else "p"
    return (f" ({name} is a whole percent: write {key}={head + ',' if head else ''}{pct} for "
            f"{pct} %)")


def parse_sdc(text: str | None) -> SdcOptions:
    """Parse ``tabdp compare --sdc`` options.

    ``key=value`` pairs separated by ``;``: ``p`` (integer percent, or ``none``), ``nk``
    (``n,k``), ``freq`` (minimum contributors), ``secondary`` (``OPT``, ``MOD`` or ``RND``),
    ``base`` (rounding base), ``time`` (solver minutes) and ``linked`` (``auto``, ``on`` or
    ``off``: protect tables that share cells as linked tables). Unset keys keep their defaults
    (``p=10; secondary=MOD; time=10; linked=auto``).

    Args:
        text: The options (``None`` or empty: the defaults).

    Returns:
        The parsed options.

    Raises:
        InvalidParameterError: An unknown key, a malformed value, or no primary rule at all.

    Example:
        >>> o = parse_sdc("p=15; nk=3,75; secondary=mod")
        >>> (o.p, o.nk, o.secondary)
        (15, (3, 75), 'MOD')
        >>> parse_sdc("p=none; freq=3").rules()
        'FREQ(3,10)'
        >>> parse_sdc("linked=OFF").linked
        'off'
    """
    values: dict[str, Any] = {}
    for part in (text or "").split(";"):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise _bad("each option is key=value", part, "keys " + ", ".join(_KEYS))
        key, _, val = (s.strip() for s in part.partition("="))
        key = key.lower()
        if key not in _KEYS:
            raise _bad(f"unknown option {key!r}", part, "keys " + ", ".join(_KEYS))
        if key == "secondary":
            v = val.upper()
            if v not in _METHODS:
                raise _bad("secondary must be a Tau-Argus method tabdp drives", val,
                           ", ".join(_METHODS))
            values[key] = v
        elif key == "linked":
            v = val.lower()
            if v not in _LINKED:
                raise _bad("linked must be auto, on or off", val, ", ".join(_LINKED))
            values[key] = v
        elif key == "nk":
            m = re.fullmatch(r"\s*(\d+)\s*,\s*(\d+)\s*", val)
            if not m or not (1 <= int(m.group(1)) and 0 < int(m.group(2)) <= 100):
                raise _bad("nk must be n,k with n >= 1 and 0 < k <= 100 (k a whole percent)",
                           val, "e.g. nk=2,85" + _percent_fix("nk", val))
            values[key] = (int(m.group(1)), int(m.group(2)))
        elif val.lower() == "none" and key in ("p", "freq"):
            values[key] = None
        else:
            what, allowed = _INT_OPTIONS[key]
            try:
                n = int(val)
            except ValueError:
                fix = _percent_fix(key, val) if key == "p" else ""
                raise _bad(f"{key} must be {what}", val, allowed + fix) from None
            if n < 1 or (key == "p" and n > 100):
                raise _bad(f"{key} must be {what}", val, allowed)
            values[key] = n
    opts = SdcOptions(**values)
    if opts.p is None and opts.nk is None and opts.freq is None:
        raise _bad("no primary rule", text or "", "at least one of p, nk, freq")
    return opts


def require_pytauargus() -> Any:
    """Import ``pytauargus`` (the optional extra) or say how to install it.

    Returns:
        The ``pytauargus`` module.

    Raises:
        UnsupportedBackendError: It is not installed.

    Example:
        >>> callable(require_pytauargus)
        True
    """
    try:
        import pytauargus
    except ImportError:
        raise UnsupportedBackendError(
            "tabdp compare needs the Tau-Argus engine (the pytauargus package), which is not "
            f"installed.\nHint: {INSTALL}  (Linux x86_64/aarch64, macOS arm64 and Windows x64 "
            "wheels bundle the engine and the HiGHS solver).") from None
    return pytauargus


@dataclass(frozen=True)
class Dim:
    """One dimension of a protected table: its codes, levels and parent-child links.

    Attributes:
        column: The key column (its finest level in this table).
        hierarchy: The spec hierarchy it belongs to (``None``: a flat key).
        codes: Every code of the dimension, ``Total`` first.
        level: The level of each code (``"total"`` for ``Total``).
        children: Parent code → its child codes (``Total`` → the top level).
    """

    column: str
    hierarchy: str | None
    codes: tuple[str, ...]
    level: Mapping[str, str]
    children: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def build_dim(column: str, domain: Sequence[Any], hierarchies: Mapping[str, Any]) -> Dim:
    """The dimension of key ``column``: flat, or the levels of its hierarchy down to it.

    Args:
        column: The key column.
        domain: Its public codes (used when the column is in no hierarchy).
        hierarchies: The spec's hierarchies (``name`` → object with ``levels`` and
            ``mapping``).

    Returns:
        The dimension.

    Example:
        >>> d = build_dim("k", ["a", "b"], {})
        >>> d.codes, dict(d.children)
        (('Total', 'a', 'b'), {'Total': ('a', 'b')})
    """
    for name, h in hierarchies.items():
        if column in h.levels:
            lv = list(h.levels[: list(h.levels).index(column) + 1])
            m = (h.mapping.select([pl.col(c).cast(pl.String) for c in lv]).unique()
                 .sort(lv))
            codes = [TOTAL]
            level = {TOTAL: "total"}
            children: dict[str, list[str]] = {TOTAL: []}
            for i, c in enumerate(lv):
                parent = None if i == 0 else lv[i - 1]
                pairs = m.select(([parent] if parent else []) + [c]).unique().sort(
                    ([parent] if parent else []) + [c])
                for row in pairs.iter_rows():
                    code = row[-1]
                    if code in level:
                        continue
                    level[code] = c
                    codes.append(code)
                    children.setdefault(TOTAL if parent is None else row[0], []).append(code)
            return Dim(column, name, tuple(codes), level,
                       {k: tuple(v) for k, v in children.items()})
    vals = sorted({str(v) for v in domain})
    return Dim(column, None, (TOTAL, *vals), {TOTAL: "total", **dict.fromkeys(vals, column)},
               {TOTAL: tuple(vals)})


def hrc_text(dim: Dim) -> str:
    """A Tau-Argus ``.hrc`` file for a hierarchical dimension (``@`` marks depth).

    Args:
        dim: The dimension.

    Returns:
        The file's text.

    Example:
        >>> d = Dim("c", "g", ("Total", "1", "11", "12"),
        ...         {"Total": "total", "1": "s", "11": "c", "12": "c"},
        ...         {"Total": ("1",), "1": ("11", "12")})
        >>> print(hrc_text(d), end="")
        1
        @11
        @12
    """
    lines: list[str] = []

    def walk(code: str, depth: int) -> None:
        for ch in dim.children.get(code, ()):
            lines.append("@" * depth + ch)
            walk(ch, depth + 1)

    walk(TOTAL, 0)
    return "\n".join(lines) + "\n"


@dataclass
class SdcTable:
    """One table protected by Tau-Argus.

    Attributes:
        dims: Its dimensions, in Tau-Argus' order.
        cells: One row per cell (``Total`` codes for margins): the dimension columns,
            ``value`` (true), ``freq``, ``x1`` (largest contribution), ``x2``, ``status``
            (``S`` safe, ``U`` primary, ``M`` secondary, ``E`` empty, ``P`` protected),
            ``lpl``/``upl`` (the protection the rule requires below and above the value),
            ``published`` (bool) and ``released`` (what is published: the value, its rounded
            value, or null).
        method: ``OPT``, ``MOD``, ``RND`` or ``none`` (nothing to protect).
        base: The rounding base (RND only).
        tau_audit: Tau-Argus' own audit rows (``cell``, ``min``, ``max``...), when asked; the
            last entry is ``{"apriori_all": [[cell, lower, upper], ...]}``, the a-priori
            bounds of every cell in that audit.
        seconds: Time Tau-Argus took.
        steps: Wall seconds of its steps (cell statistics; the child process, and its CPU
            seconds, and inside it writing Tau-Argus' input files, the batch without the
            suppression, the suppression itself, reading the result).
        holding: Tau-Argus was given the privacy unit as its holding variable, with
            holding-level rules (a unit had rows in several finest cells).
    """

    dims: list[Dim]
    cells: pl.DataFrame
    method: str
    base: int | None = None
    tau_audit: list[dict[str, Any]] | None = None
    seconds: float = 0.0
    steps: dict[str, float] = field(default_factory=dict)
    holding: bool = False


def _cell_stats(micro: pl.DataFrame, cols: list[str], response: str, dims: list[Dim],
                unit: str | None = None) -> pl.DataFrame:
    """Every non-empty cell of the hierarchical table, margins included.

    Columns: the key columns, ``value`` (sum), ``freq`` (contributors), ``x1`` and ``x2``
    (largest and second largest contribution). Without ``unit`` each row is a contributor:
    the microdata are aggregated once to the finest cells, and each margin is then a roll-up
    of those (sums add, and the two largest contributions of a margin are the two largest of
    its children's two largest). With ``unit`` (a column of ``micro``) a contributor is a
    unit at every cell: its rows are summed per cell, margins included, before counting and
    ranking (a unit in two finest cells is one contributor of their margin, with the sum of
    its parts).
    """
    base = micro.select([*cols, response]).group_by(cols).agg(
        pl.col(response).sum().cast(pl.Float64).alias("value"),
        pl.len().cast(pl.Int64).alias("freq"),
        pl.col(response).max().cast(pl.Float64).alias("x1"),
        pl.col(response).top_k(2).min().cast(pl.Float64).alias("x2_"))
    # no second contribution: null while rolling up, 0 in the result
    base = base.with_columns(
        pl.when(pl.col("freq") >= 2).then(pl.col("x2_")).alias("x2")).drop("x2_")
    ups = [_ancestors(d, c) for d, c in zip(dims, cols, strict=True)]
    frames = []
    for combo in _level_combos(cols, dims):
        if all(lvl == c for c, lvl in combo):
            frames.append(base.select([*cols, "value", "freq", "x1",
                                       pl.col("x2").fill_null(0.0)]))
            continue
        g = base.with_columns(_to_level(combo, ups)).group_by(cols).agg(
            pl.col("value").sum(), pl.col("freq").sum(), pl.col("x1").max(),
            pl.concat_list("x1", "x2").list.explode(keep_nulls=False, empty_as_null=False)
            .top_k(2).min().alias("x2_"))
        frames.append(g.with_columns(
            pl.when(pl.col("freq") >= 2).then(pl.col("x2_")).otherwise(0.0).alias("x2"))
            .select([*cols, "value", "freq", "x1", "x2"]))
    out = pl.concat(frames)
    if unit is None:
        return out
    # the values as above (the same sums, in the same order), the contributors per unit
    per_unit = _unit_cell_stats(micro, cols, response, dims, unit)
    return out.drop("freq", "x1", "x2").join(per_unit, on=cols, how="left")


def _to_level(combo: list[tuple[str, str]], ups: list[dict[str, dict[str, str]]]
              ) -> list[pl.Expr]:
    """Each key column of the finest cells mapped to its code at ``combo``'s level."""
    exprs = []
    for (c, lvl), up in zip(combo, ups, strict=True):
        if lvl == "total":
            exprs.append(pl.lit(TOTAL).alias(c))
        elif lvl != c:
            exprs.append(pl.col(c).replace_strict(up[lvl], return_dtype=pl.String).alias(c))
    return exprs


def _level_combos(cols: list[str], dims: list[Dim]) -> list[list[tuple[str, str]]]:
    """Every combination of one level per dimension (a level, or ``"total"``)."""
    combos: list[list[tuple[str, str]]] = [[]]
    for d, c in zip(dims, cols, strict=True):
        combos = [x + [(c, lvl)] for x in combos for lvl in dict.fromkeys(d.level.values())]
    return combos


def _unit_cell_stats(micro: pl.DataFrame, cols: list[str], response: str, dims: list[Dim],
                     unit: str) -> pl.DataFrame:
    """``freq``, ``x1`` and ``x2`` of every non-empty cell, one contributor per unit."""
    base = micro.select([unit, *cols, response]).group_by([unit, *cols]).agg(
        pl.col(response).sum().cast(pl.Float64))
    ups = [_ancestors(d, c) for d, c in zip(dims, cols, strict=True)]
    frames = []
    for combo in _level_combos(cols, dims):
        exprs = _to_level(combo, ups)
        per_unit = (base.with_columns(exprs).group_by([unit, *cols])
                    .agg(pl.col(response).sum()) if exprs else base)
        g = per_unit.group_by(cols).agg(
            pl.len().cast(pl.Int64).alias("freq"),
            pl.col(response).max().alias("x1"),
            pl.col(response).top_k(2).min().alias("x2_"))
        frames.append(g.with_columns(
            pl.when(pl.col("freq") >= 2).then(pl.col("x2_")).otherwise(0.0).alias("x2"))
            .select([*cols, "freq", "x1", "x2"]))
    return pl.concat(frames)


def _ancestors(d: Dim, column: str) -> dict[str, dict[str, str]]:
    """For each level of ``d``: the ancestor at that level of every code at ``column``."""
    parent = {ch: p for p, chs in d.children.items() for ch in chs}
    out: dict[str, dict[str, str]] = {}
    for code, lv in d.level.items():
        if lv != column:
            continue
        cur = code
        while cur in parent:
            out.setdefault(d.level[cur], {})[code] = cur
            cur = parent[cur]
    return out


def protect(micro: pl.DataFrame, cols: Sequence[str], response: str, dims: Sequence[Dim],
            opts: SdcOptions, *, count: bool = False, workdir: Path | None = None,
            audit: bool = False, forced: Mapping[tuple[str, ...], tuple[float, float]]
            | None = None, unit: str | None = None) -> SdcTable:
    """Protect one table with Tau-Argus.

    Every rule counts contributors: the rows of ``micro``, or with ``unit`` the units. A
    unit's rows in one finest cell are summed into one contribution. When some unit still has
    rows in several finest cells (a firm with establishments in two counties), the unit is
    Tau-Argus' holding variable and every rule is a holding-level rule
    (`SdcOptions.rules()`): at each cell, finest or margin, the unit's parts are one
    contributor with their sum, and ``freq``, ``x1`` and ``x2`` of the result are per unit
    too. When no unit spans finest cells, each unit is one row and Tau-Argus runs as without
    ``unit``.

    Args:
        micro: One row per contributor (or per unit and finest cell, with ``unit``): the key
            columns (as strings) and ``response``.
        cols: The table's key columns (Tau-Argus' dimensions, in order).
        response: The response column (ones for a count table).
        dims: The dimension of each column (`build_dim()`).
        opts: The rules and the method.
        count: A count table (frequency rule only).
        workdir: Folder for Tau-Argus' files (default: a temporary folder, removed).
        audit: Also run Tau-Argus' own audit (kept in `tau_audit`).
        forced: Cells to suppress whatever the rules say (the codes of each dimension, in
            ``cols`` order) → the protection (below, above) they need: given to Tau-Argus as
            a-priori manual-unsafe cells (``U`` and ``PL`` lines of an ``<APRIORY>`` file),
            which its secondary suppression then protects like primary cells. In the output
            they have status ``M`` (secondary) and no required protection of their own, and
            ``forced`` is true.
        unit: The column of ``micro`` naming each row's privacy unit (``None``: each row is
            a contributor of its own).

    Returns:
        The protected table, every cell (`SdcTable.holding` says whether Tau-Argus judged
        units as holdings).

    Raises:
        UnsupportedBackendError: ``pytauargus`` is not installed.

    Example:
        >>> import polars as pl
        >>> m = pl.DataFrame({"k": ["a", "a", "b", "b", "b"], "v": [9.0, 1.0, 3.0, 3.0, 3.0]})
        >>> t = protect(m, ["k"], "v", [build_dim("k", ["a", "b"], {})],
        ...             SdcOptions(p=10, freq=None, secondary="OPT"))  # doctest: +SKIP
    """
    import time

    require_pytauargus()
    cols = list(cols)
    dims = list(dims)
    holding: str | None = None
    if unit is not None:
        micro, holding = _holdings(micro, cols, response, unit)
    rules = opts.rules(count=count, holding=holding is not None)
    t0 = time.perf_counter()
    own = workdir is None
    wd = Path(tempfile.mkdtemp(prefix="tabdp-tau-")) if own else Path(workdir)  # type: ignore[arg-type]
    wd.mkdir(parents=True, exist_ok=True)
    hrc: dict[str, str] = {}
    for d, c in zip(dims, cols, strict=True):
        if d.hierarchy is not None and any(v not in ("total", c) for v in d.level.values()):
            p = wd / f"{c}.hrc"
            p.write_text(hrc_text(d), encoding="utf-8")
            hrc[c] = str(p)
    steps: dict[str, float] = {}
    t1 = time.perf_counter()
    stats = _cell_stats(micro, cols, response, dims, holding)
    steps["cell_statistics"] = time.perf_counter() - t1
    top = stats.select([*cols, "x1", "x2"])
    if not rules:
        cells = _untouched(stats, cols, dims)
        method, base, tau_audit = "none", None, None
    else:
        base = None
        method = opts.secondary
        if method == "RND":
            base = opts.base or _auto_base(micro, cols, response)
        apriori = [[*k, lo, hi] for k, (lo, hi) in (forced or {}).items()]
        raw, tau_audit = _run_worker(micro.select([*([holding] if holding else []), *cols,
                                                   response]), cols, response, rules,
                                     opts.suppress(base), hrc, wd, audit and method != "RND",
                                     steps, apriori, holding)
        cells = raw.select(
            # Tau-Argus pads the codes of a flat dimension to one length ("0" -> "   0")
            [pl.col(c).cast(pl.String).str.strip_chars(" ") for c in cols]
            + [pl.col(response).cast(pl.Float64).alias("tau_value"),
               pl.col("freq").cast(pl.Int64), pl.col("status"),
               pl.col("lower").cast(pl.Float64).alias("lpl"),
               pl.col("upper").cast(pl.Float64).alias("upl")]).with_row_index("tau_cell")
        # the true values: Tau-Argus writes the rounded value after RND
        truth = stats.select([*cols, "value"])
        cells = cells.join(truth, on=cols, how="left").with_columns(pl.col("value").fill_null(0.0))
        if method == "RND":
            cells = cells.with_columns(pl.lit(True).alias("published"),
                                       pl.col("tau_value").alias("released"))
            off = (cells["released"] - cells["value"]).abs().max()
            if base is None or not isinstance(off, (int, float)) or off >= base:
                raise DataValidationError(
                    f"Tau-Argus found no controlled rounding of the table by {cols} "
                    f"({response}) with base {base} (its log in {str(wd / 'job')!r}, inside "
                    "the confidential folder, says why; typically NO OUTPUT PATTERN EXISTS)."
                    "\nHint: try a larger base (base=N, at least the one Tau-Argus requires: "
                    "10^(digits-1) of 1.5 x the table's largest cell), fewer hierarchy levels "
                    "(a controlled rounding always exists for a two-way table without "
                    "sub-totals, not for every hierarchical one), or secondary=MOD.")
        else:
            pub = ~pl.col("status").is_in(["U", "M"])
            cells = cells.with_columns(pub.alias("published"),
                                       pl.when(pub).then(pl.col("value")).alias("released"))
        cells = cells.drop("tau_value")
        if holding is not None:
            # Tau-Argus writes the number of records; its rules counted the holdings
            cells = cells.drop("freq").join(stats.select([*cols, "freq"]), on=cols,
                                            how="left").with_columns(
                pl.col("freq").fill_null(0)).select(cells.columns)
    cells = cells.join(top, on=cols, how="left").with_columns(
        pl.col("x1").fill_null(0.0), pl.col("x2").fill_null(0.0))
    cells = _mark_forced(cells, cols, forced)
    if own:
        import shutil

        shutil.rmtree(wd, ignore_errors=True)
    return SdcTable(dims, cells, method, base, tau_audit, time.perf_counter() - t0, steps,
                    holding is not None)


HOLDING = "tabdp_unit"


def _holdings(micro: pl.DataFrame, cols: list[str], response: str, unit: str
              ) -> tuple[pl.DataFrame, str | None]:
    """One row per unit and finest cell; the holding column when a unit spans finest cells.

    Returns the rows (the key columns, ``response`` and, with a holding, its column: a dense
    integer code per unit, rows sorted by it, as Tau-Argus reads a holding's records
    consecutively) and the holding column's name (``None``: every unit is in one finest
    cell, so each row is one unit and no holding is needed).
    """
    name = HOLDING
    while name in (*cols, response):
        name += "_"
    # the unit under a name of its own (it may also be a key column)
    rows = micro.select([pl.col(unit).alias(name), *cols, response])
    if rows.height == 0 or rows.group_by(name).len()["len"].max() == 1:
        return rows.drop(name), None
    data = rows.group_by([name, *cols], maintain_order=True).agg(pl.col(response).sum())
    if data.group_by(name).len()["len"].max() == 1:
        return data.drop(name), None
    data = data.with_columns(pl.col(name).rank("dense").fill_null(0).cast(pl.Int64))
    return data.select([name, *cols, response]).sort([name, *cols]), name


def _run_worker(micro: pl.DataFrame, cols: list[str], response: str, rules: str,
                suppress: str, hrc: Mapping[str, str], wd: Path, audit: bool,
                steps: dict[str, float], apriori: list[list[Any]] | None = None,
                holding: str | None = None
                ) -> tuple[pl.DataFrame, list[dict[str, Any]] | None]:
    """Run Tau-Argus in a child process (the engine is not safe to reuse in-process)."""
    import json
    import os
    import subprocess
    import sys
    import time

    import tabdp

    job = wd / "job"
    job.mkdir(parents=True, exist_ok=True)
    micro.write_parquet(job / "micro.parquet")
    (job / "job.json").write_text(json.dumps(
        {"cols": cols, "response": response, "rules": rules, "suppress": suppress,
         "hrc": dict(hrc), "audit": audit, "apriori": apriori or [], "holding": holding}),
        encoding="utf-8")
    env = dict(os.environ)
    root = str(Path(tabdp.__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                else "")
    for step in (["protect"] + (["audit"] if audit else [])):
        t_step = time.perf_counter()
        cpu0 = _children_cpu()
        with open(job / f"{step}.log", "wb") as log:
            # run inside the job folder with a relative path: the engine's MOD step has been
            # seen to crash on some longer working paths (pytauargus 0.6.0)
            rc = subprocess.run([sys.executable, "-m", "tabdp.compare._tau_worker", "."]
                                + ([] if step == "protect" else ["audit"]), stdout=log,
                                stderr=subprocess.STDOUT, env=env, cwd=job,
                                check=False).returncode
        if rc != 0:
            raise DataValidationError(
                f"Tau-Argus failed ({step}) on the table by {cols} ({response}) with exit code "
                f"{rc} (suppression {suppress}). Its output is in "
                f"{str(job / (step + '.log'))!r} (inside the confidential folder).\nHint: "
                "OPT can exhaust its time on large tables: try secondary=MOD; or check the log "
                "for the engine's message.")
        steps[f"child_process_{step}"] = time.perf_counter() - t_step
        steps[f"child_process_{step}_cpu"] = _children_cpu() - cpu0
    cells = pl.read_parquet(job / "cells.parquet")
    if (job / "timings.json").exists():
        steps.update(json.loads((job / "timings.json").read_text(encoding="utf-8")))
    rows = (json.loads((job / "audit.json").read_text(encoding="utf-8"))
            if audit else None)
    if rows and "apriori_all" in rows[-1]:
        # the last entry: every cell's a-priori bounds in Tau-Argus' audit
        rows = rows[:-1] + [{"apriori_all": [[int(k), lo, hi]
                                              for k, (lo, hi) in rows[-1]["apriori_all"]]}]
    return cells, rows


def _mark_forced(cells: pl.DataFrame, cols: list[str],
                 forced: Mapping[tuple[str, ...], tuple[float, float]] | None) -> pl.DataFrame:
    """Flag the cells suppressed a-priori (``forced``): secondary, no protection of their own."""
    keys = list(forced or {})
    if not keys:
        return cells.with_columns(pl.lit(False).alias("forced"))
    f = pl.DataFrame({c: [k[i] for k in keys] for i, c in enumerate(cols)},
                     schema=dict.fromkeys(cols, pl.String)).with_columns(
        pl.lit(True).alias("forced"))
    out = cells.join(f, on=cols, how="left").with_columns(pl.col("forced").fill_null(False))
    hit = pl.col("forced") & (pl.col("status") == "U")
    return out.with_columns(pl.when(hit).then(pl.lit("M")).otherwise(pl.col("status"))
                            .alias("status"),
                            pl.when(hit).then(0.0).otherwise(pl.col("lpl")).alias("lpl"),
                            pl.when(hit).then(0.0).otherwise(pl.col("upl")).alias("upl"))


def _children_cpu() -> float:
    """CPU seconds of this process' finished child processes (0 where not available)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return 0.0
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return float(c.ru_utime + c.ru_stime)


def _untouched(stats: pl.DataFrame, cols: list[str], dims: list[Dim]) -> pl.DataFrame:
    """Every cell of the hierarchical table with its true value, all published (no rule)."""
    grids = [pl.DataFrame({c: list(d.codes)}) for d, c in zip(dims, cols, strict=True)]
    full = grids[0]
    for g in grids[1:]:
        full = full.join(g, how="cross")
    out = full.join(stats.select([*cols, "value", "freq"]), on=cols, how="left").with_columns(
        pl.col("value").fill_null(0.0), pl.col("freq").fill_null(0))
    return out.with_columns(
        pl.when(pl.col("freq") == 0).then(pl.lit("E")).otherwise(pl.lit("S")).alias("status"),
        pl.lit(0.0).alias("lpl"), pl.lit(0.0).alias("upl"), pl.lit(True).alias("published"),
        pl.col("value").alias("released")).with_row_index("tau_cell")


def _auto_base(micro: pl.DataFrame, cols: list[str], response: str) -> int:
    """Tau-Argus' smallest rounding base: 10^(digits - 1) of its upper a-priori bound.

    That bound is 1.5 × the largest cell (the total of a non-negative table), as τ-ARGUS sets
    it (see ``_tau_worker._java_apriori_bounds``).
    """
    total = 1.5 * float(micro[response].sum())
    d = 0
    t = total
    while t > 1:
        t /= 10.0
        d += 1
    return int(10 ** max(d - 1, 0)) if math.isfinite(total) else 1


def level_label(levels: Sequence[str]) -> str:
    """The label of a level combination: the non-total levels joined, or ``national``.

    Args:
        levels: One level per dimension (``"total"`` for a margin).

    Returns:
        E.g. ``"county × naics2"``, ``"state"`` or ``"national"``.

    Example:
        >>> level_label(["state", "total"]), level_label(["total", "total"])
        ('state', 'national')
    """
    parts = [lv for lv in levels if lv != "total"]
    return " × ".join(parts) if parts else "national"


def add_levels(cells: pl.DataFrame, cols: Sequence[str], dims: Sequence[Dim]) -> pl.DataFrame:
    """Add a ``level`` column (`level_label()`) to a table's cells.

    Args:
        cells: The cells (string code columns).
        cols: The key columns.
        dims: Their dimensions.

    Returns:
        ``cells`` with ``level``.

    Example:
        >>> d = build_dim("k", ["a"], {})
        >>> add_levels(pl.DataFrame({"k": ["Total", "a"]}), ["k"], [d])["level"].to_list()
        ['national', 'k']
    """
    lv = [pl.col(c).replace_strict(dict(d.level), return_dtype=pl.String).alias(f"_lv{i}")
          for i, (c, d) in enumerate(zip(cols, dims, strict=True))]
    out = cells.with_columns(lv)
    names = [f"_lv{i}" for i in range(len(cols))]
    labels = [level_label(r) for r in out.select(names).iter_rows()]
    return out.drop(names).with_columns(pl.Series("level", labels, dtype=pl.String))

