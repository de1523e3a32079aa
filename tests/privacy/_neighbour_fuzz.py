"""A seeded neighbour fuzzer: what an author sees on two datasets one unit apart.

Used by ``test_neighbour_fuzz.py``. A *case* is a random small dataset (50–300 records, in
one of three layouts: row mode, one id per row, firms of several rows), a random single-unit
edit (add, remove or change one unit, with adversarial values), a random release and an entry
point. Both datasets are released with the same seeds; whatever does not vary with the seed
on the same data (exception type and message, warnings, columns, dtypes, row counts, key
columns, every column and summary field the noise does not move) must be equal on the two.

The split between "noise" and "data" is measured, not assumed: each dataset is released with
two seeds; an output field that differs between the two seeds is noise-driven and is only
compared for its type; every other field must match its neighbour's exactly.
"""

from __future__ import annotations

import io
import json
import math
import unicodedata
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl

import tabdp
from tabdp import mechanisms as mech

I64 = 2**63 - 1
#: Key values of the public key set (text keys include NFC/NFD and case twins, and "").
TEXT_KEYS = ["a", "b", "é", "B", "", " "]
INT_KEYS = [0, 1, 2, -1]
SCHEMA = {"id": "Int64", "k": "String", "j": "Int64", "x": "Float64", "n": "Int64"}
LAYOUTS = ("row", "id", "firm")


def _unit_rows(rng: np.random.Generator, layout: str, uid: int) -> list[dict[str, Any]]:
    rows = 1 if layout in ("row", "id") else int(rng.integers(1, 5))
    return [{"id": uid, "k": TEXT_KEYS[int(rng.integers(0, 4))],
             "j": INT_KEYS[int(rng.integers(0, 3))],
             "x": float(np.round(rng.lognormal(3, 1.5), 2)), "n": int(rng.integers(0, 50))}
            for _ in range(rows)]


def _adversarial(rng: np.random.Generator, layout: str, uid: int) -> tuple[str, list[dict]]:
    """One unit's rows with an adversarial value (its label, its rows)."""
    rows = _unit_rows(rng, layout, uid)
    kind = str(rng.choice([
        "nan", "inf", "-inf", "-0.0", "i64max", "i64min", "huge", "neg", "null_x", "null_n",
        "null_k", "empty_k", "space_k", "nfd_k", "case_k", "out_k", "null_j", "out_j",
        "j_i64", "many_rows", "overflow", "tiny", "null_id", "dup_id", "subnormal"]))
    r = rows[0]
    if kind == "nan":
        r["x"] = math.nan
    elif kind == "inf":
        r["x"] = math.inf
    elif kind == "-inf":
        r["x"] = -math.inf
    elif kind == "-0.0":
        r["x"] = -0.0
    elif kind == "i64max":
        r["n"] = I64
    elif kind == "i64min":
        r["n"] = -I64 - 1
    elif kind == "huge":
        r["x"] = 1.7e308
    elif kind == "neg":
        r["x"], r["n"] = -12345.5, -7
    elif kind == "null_x":
        r["x"] = None
    elif kind == "null_n":
        r["n"] = None
    elif kind == "null_k":
        r["k"] = None
    elif kind == "empty_k":
        r["k"] = ""
    elif kind == "space_k":
        r["k"] = " "
    elif kind == "nfd_k":
        r["k"] = unicodedata.normalize("NFD", "é")
    elif kind == "case_k":
        r["k"] = "A"
    elif kind == "out_k":
        r["k"] = "zzz-not-a-key"
    elif kind == "null_j":
        r["j"] = None
    elif kind == "out_j":
        r["j"] = 99
    elif kind == "j_i64":
        r["j"] = I64
    elif kind == "many_rows":
        rows = [dict(r) for _ in range(int(rng.integers(20, 60)))]
    elif kind == "overflow":
        rows = [dict(r, n=2**62, x=1e300) for _ in range(4)]
    elif kind == "tiny":
        r["x"] = 5e-324
    elif kind == "subnormal":
        r["x"] = 2.2e-308
    elif kind == "null_id":
        for q in rows:
            q["id"] = None
    elif kind == "dup_id":
        pass  # the caller gives this unit an existing id
    return kind, rows


@dataclass
class Pair:
    """Two neighbouring datasets and how they differ."""

    layout: str
    edit: str
    value: str
    base: pl.DataFrame
    other: pl.DataFrame
    notes: list[str] = field(default_factory=list)

    @property
    def schema(self) -> dict[str, str]:
        """The declared schema (the id's dtype is the frame's)."""
        out = dict(SCHEMA, id="String" if self.base.schema["id"] == pl.String else "Int64")
        return out if self.layout != "row" else {c: t for c, t in out.items() if c != "id"}


#: Text unit ids of one unit: an existing id's twins (case, NFD, spaces), empty and long ids.
TEXT_IDS = ("", " ", "U1", "u1 ", "\u00e91", "e\u03011", "x" * 5000, "\x00")


def _text_ids(pair: Pair, rng: np.random.Generator) -> Pair:
    """The pair with text unit ids ``u<n>``; the edited unit may get an adversarial text id."""
    # the existing ids u<n> include "u1" and "é1" (NFC): the adversarial unit's twins
    def conv(df: pl.DataFrame, adv: str | None) -> pl.DataFrame:
        ids = (pl.when(pl.col("id") == 1).then(pl.lit("\u00e91"))
               .otherwise(pl.lit("u") + pl.col("id").cast(pl.String)))
        if adv is not None:
            ids = pl.when(pl.col("id") == ADV_ID).then(pl.lit(adv)).otherwise(ids)
        return df.with_columns(ids.alias("id"))

    adv = str(rng.choice(TEXT_IDS)) if rng.random() < 0.6 else None
    out = Pair(pair.layout, pair.edit, pair.value + (f"+id={adv[:8]!r}" if adv else "+text_ids"),
               conv(pair.base, adv), conv(pair.other, adv))
    return out


#: The id of the adversarial unit when it is added or removed.
ADV_ID = 100_000


def make_pair(seed: int) -> Pair:
    """A random dataset and a neighbour one unit apart (add, remove or change)."""
    pair = _make_pair(seed)
    rng = np.random.default_rng([seed, 3])
    if pair.layout != "row" and rng.random() < 0.35:
        pair = _text_ids(pair, rng)
    return pair


def _make_pair(seed: int) -> Pair:
    rng = np.random.default_rng(seed)
    layout = LAYOUTS[int(rng.integers(0, len(LAYOUTS)))]
    units = int(rng.integers(50, 300)) if layout != "firm" else int(rng.integers(20, 100))
    rows: list[dict[str, Any]] = []
    for u in range(units):
        rows += _unit_rows(rng, layout, u)
    edit = str(rng.choice(["add", "remove", "change"]))
    value, extra = _adversarial(rng, layout, ADV_ID)
    if value == "dup_id" and layout != "row":
        # the unit re-uses an existing id: that unit gains rows (a change of one unit)
        uid = int(rng.integers(0, units))
        for r in extra:
            r["id"] = uid
        return Pair(layout, "change", value, _frame(rows), _frame(rows + extra))
    if edit == "add":
        base_rows, neigh_rows = rows, rows + extra
    else:
        uid = int(rng.integers(0, units))
        kept = [r for r in rows if r["id"] != uid]
        if edit == "remove":
            # the adversarial unit is in the base and removed in its neighbour
            base_rows, neigh_rows = kept + extra, kept
        else:
            for r in extra:
                r["id"] = r["id"] if r["id"] is None else uid
            pos = next(i for i, r in enumerate(rows) if r["id"] == uid)
            neigh_rows = kept[:pos] + extra + kept[pos:]
            base_rows = rows
    return Pair(layout, edit, value, _frame(base_rows), _frame(neigh_rows))


def _frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={"id": pl.Int64, "k": pl.String, "j": pl.Int64,
                                      "x": pl.Float64, "n": pl.Int64}, strict=False)


# -- releases ---------------------------------------------------------------------------------
TKEYS = tabdp.KeySet.from_dict(k=["a", "b", "é", "B", ""])
JKEYS = tabdp.KeySet.from_dict(j=[0, 1, 2, -1])
#: A key set holding a null key (a null in the data is outside every key set).
NKEYS = tabdp.KeySet.from_dict(k=["a", None, "e\u0301"])


def releases(rng: np.random.Generator) -> list[tuple[str, dict[str, Any]]]:
    """A random sequence of one to three releases (method, kwargs)."""
    pool: list[tuple[str, dict[str, Any]]] = [
        ("sum", dict(columns="x", by="k", keys=TKEYS, mechanism=mech.Gaussian(50.0),
                     nulls="zero", negatives="allow")),
        ("sum", dict(columns="x", by="k", keys=TKEYS, mechanism=mech.Gaussian(50.0),
                     nulls="drop", negatives="zero", form="long")),
        ("sum", dict(columns="n", by=["k", "j"], keys=TKEYS * JKEYS,
                     mechanism=mech.Gaussian(5.0), nulls="zero", negatives="allow", cv=True)),
        ("sum", dict(columns="n", by="j", keys=JKEYS, mechanism=mech.Laplace(5.0),
                     nulls="drop", negatives="drop")),
        ("sum", dict(columns=["x", "n"], by="k", keys=TKEYS,
                     mechanism=mech.LogTransform(sigma=0.3, offset=100.0), nulls="zero",
                     negatives="zero")),
        ("sum", dict(columns="x", by="k", keys=TKEYS, mechanism=mech.Gaussian(50.0),
                     nulls="zero", negatives="allow", max_cells=1)),
        ("count", dict(by="k", keys=TKEYS)),
        ("count", dict(by=["k", "j"], keys=TKEYS * JKEYS, max_rows=2, cv=True)),
        ("count", dict(by="j", keys=JKEYS, max_cells=1, form="long")),
        ("median", dict(column="x", by="k", keys=TKEYS, bounds=(0.0, 1000.0), epsilon=1.0,
                        nulls="drop")),
        ("quantile", dict(column="n", q=0.9, by="j", keys=JKEYS, bounds=(0, 100),
                          epsilon=1.0, nulls="zero")),
        ("quantile", dict(column="x", q=0.25, by="k", keys=TKEYS, bounds=(-50.0, 500.0),
                          epsilon=2.0, noise="laplace", delta=1e-6, nulls="zero", form="long",
                          cv=False)),
        ("sum", dict(columns="n", by="k", keys=TKEYS, mechanism=mech.DiscreteGaussian(4.0),
                     nulls="zero", negatives="allow", level=0.95, name="dg")),
        ("sum", dict(columns="x", by="j", keys=JKEYS,
                     mechanism=mech.ExpPolyLog(sigma=20.0, a=1.0, d=4.0), nulls="drop",
                     negatives="drop", cv=True)),
        ("sum", dict(columns="x", by="k", keys=TKEYS, mechanism=mech.UnitSplitting(1000.0, 30.0),
                     nulls="zero", negatives="zero")),
        ("sum", dict(columns="x", by="k", keys=TKEYS,
                     mechanism=mech.RootTransform(k=2.0, sigma=1.0, offset=1.0),
                     nulls="zero", negatives="zero", grid=0.01)),
        ("sum", dict(columns=["x", "n"], by="j", keys=JKEYS,
                     mechanism=mech.VectorSubbotin(r=1.0, scale=40.0),
                     nulls="zero", negatives="allow")),
        ("sum", dict(columns="x", by="k", keys=TKEYS, mechanism=mech.SymmetricStable(1.5, 20.0),
                     nulls="zero", negatives="allow")),
        ("count", dict(by="k", keys=TKEYS, mechanism=mech.DiscreteLaplace(2.0), grid=1)),
        ("sum", dict(columns="x", by="k", keys=NKEYS, mechanism=mech.Gaussian(50.0),
                     nulls="zero", negatives="allow", form="long")),
    ]
    n = int(rng.integers(1, 4))
    return [pool[int(i)] for i in rng.integers(0, len(pool), size=n)]


# -- observing --------------------------------------------------------------------------------
def _flat(prefix: str, obj: Any, out: dict[str, Any]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flat(f"{prefix}.{k}", v, out)
    elif isinstance(obj, list):
        out[f"{prefix}#len"] = len(obj)
        for i, v in enumerate(obj):
            _flat(f"{prefix}[{i}]", v, out)
    else:
        out[prefix] = obj


def _polars(table: Any) -> pl.DataFrame:
    return pl.from_pandas(table) if isinstance(table, pd.DataFrame) else table


def observe_table(label: str, table: Any, out: dict[str, Any]) -> None:
    """Flatten what a returned table shows: type, columns, dtypes, height, every value."""
    out[f"{label}.type"] = type(table).__name__
    if isinstance(table, pd.DataFrame):
        out[f"{label}.pandas_dtypes"] = [str(t) for t in table.dtypes]
    t = _polars(table)
    out[f"{label}.columns"] = t.columns
    out[f"{label}.dtypes"] = [str(d) for d in t.dtypes]
    out[f"{label}.height"] = t.height
    for c in t.columns:
        vals = t[c].to_list()
        out[f"{label}.col.{c}"] = [repr(v) for v in vals]


def observe(run: Callable[[], list[tuple[str, Any]]]) -> dict[str, Any]:
    """Run a case's releases and flatten everything the author sees."""
    out: dict[str, Any] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            results = run()
        except Exception as err:  # noqa: BLE001 - what the author sees
            out["error"] = f"{type(err).__name__}: {err}"
            out["error.cause"] = repr(err.__cause__)
            out["error.context"] = None if err.__suppress_context__ else repr(err.__context__)
            results = []
    out["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    for label, value in results:
        if label == "summary":
            _flat("summary", value, out)
        else:
            observe_table(label, value, out)
    return out


#: Columns that are functions of a cell's noisy estimate (post-processing: exact-rounding.md §6):
#: the margin of error and interval include the rounding, ``|estimate|·2⁻⁴⁰`` beyond 2⁴⁰ steps,
#: and a transformation's sd is its plug-in value at the estimate. Not compared but for nulls.
DERIVED = ("moe", "lower", "upper", "cv", "flag", "sd")


#: Summary fields the noise decides (release-workflow.md, "Seeds are never public").
NOISY_SUMMARY = ("published_usability", "publishable_in_words")


def _derived(key: str) -> bool:
    if any(f".{n}" in key for n in NOISY_SUMMARY):
        return True
    col = key.rsplit(".col.", 1)[-1]
    return ".col." in key and (col in DERIVED or col.rsplit("_", 1)[-1] in DERIVED)


def differences(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[str]:
    """Fields of two neighbours' observations that differ beyond the noise.

    ``a`` and ``b``: each dataset's observations under two seeds. A field whose value moves
    with the seed on either dataset is noise-driven: only its presence is compared.
    """
    diffs = []
    for key in sorted(set(a[0]) | set(a[1]) | set(b[0]) | set(b[1])):
        va = [o.get(key, "<absent>") for o in a]
        vb = [o.get(key, "<absent>") for o in b]
        if va[0] != va[1] or vb[0] != vb[1]:
            if key.endswith(".col." + key.rsplit(".col.", 1)[-1]) and ".col." in key:
                # a noisy column: its nulls may still leak (a null estimate in one only)
                na = [[v == "None" for v in x] for x in va if isinstance(x, list)]
                nb = [[v == "None" for v in x] for x in vb if isinstance(x, list)]
                if na and nb and na[0] == na[1] and nb[0] == nb[1] and na[0] != nb[0]:
                    diffs.append(f"{key}: nulls {na[0]} vs {nb[0]}")
            if ("<absent>" in va) != ("<absent>" in vb):
                diffs.append(f"{key}: present {va} vs {vb}")
            continue
        if va[0] != vb[0] and _derived(key):
            na = [v == "None" for v in va[0]] if isinstance(va[0], list) else None
            nb = [v == "None" for v in vb[0]] if isinstance(vb[0], list) else None
            if na != nb:
                diffs.append(f"{key}: nulls {na} vs {nb}")
            continue
        if va[0] != vb[0]:
            diffs.append(f"{key}: {str(va[0])[:300]} != {str(vb[0])[:300]}")
    return diffs


# -- entry points -----------------------------------------------------------------------------
def _as(kind: str, df: pl.DataFrame, tmp: Path) -> Any:
    if kind == "pandas":
        return df.to_pandas(use_pyarrow_extension_array=False)
    if kind == "lazy":
        return df.lazy()
    if kind == "scan":
        path = tmp / f"d{abs(hash((df.height, df.hash_rows().sum()))) % 10**9}.parquet"
        df.write_parquet(path)
        return pl.scan_parquet(path)
    if kind == "path":
        path = tmp / f"p{abs(hash((df.height, df.hash_rows().sum()))) % 10**9}.parquet"
        df.write_parquet(path)
        return path
    return df


def schema_of(df: pl.DataFrame, unit: str | None) -> dict[str, str]:
    """The declared schema of a case's frame (the id's dtype is the frame's)."""
    out = dict(SCHEMA, id="String" if df.schema["id"] == pl.String else "Int64")
    return out if unit else {c: t for c, t in out.items() if c != "id"}


def api_run(entry: str, df: pl.DataFrame, layout: str, plan: list[tuple[str, dict[str, Any]]],
            seed: int, budget: float | None, tmp: Path) -> Callable[[], list[tuple[str, Any]]]:
    """A closure running ``plan`` through ``entry`` on ``df`` (author mode)."""
    unit = None if layout == "row" else "id"
    frame_kind, _, how = entry.partition(":")

    def run() -> list[tuple[str, Any]]:
        results: list[tuple[str, Any]] = []
        if how == "curator":
            cur = tabdp.Curator(seed=seed, budget=budget)
            data = _as(frame_kind, df, tmp)
            schema = schema_of(df, unit)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the curator's own call: curator-only
                cur.add("d", data, schema=schema, unit=unit)
                author = cur.author_session("d")
            for i, (method, kw) in enumerate(plan):
                kw = dict(kw)
                if method == "sum":
                    results.append((f"t{i}", author.sum(kw.pop("columns"), **kw)))
                else:
                    results.append((f"t{i}", getattr(author, method)(**kw)))
            results.append(("summary", author.summary()))
            return results
        # a bare author-mode session bound to the curator's frame, through the accessor
        data = _as(frame_kind, df if unit else df.drop("id"), tmp)
        mode = "curator" if how == "curmode" else "author"
        session = tabdp.Session(unit=unit, mode=mode, seed=seed, budget=budget,
                                data=data if mode == "author" else None,
                                streaming=True if how == "stream" and unit is None else None)
        for i, (method, kw) in enumerate(plan):
            kw = dict(kw)
            if method == "sum":
                results.append((f"t{i}", data.dp.sum(kw.pop("columns"), session=session, **kw)))
            else:
                results.append((f"t{i}", getattr(data.dp, method)(session=session, **kw)))
        results.append(("summary", session.report().to_dict()))
        return results

    return run


API_ENTRIES = ("polars:curator", "lazy:curator", "pandas:curator", "path:curator",
               "polars:session", "lazy:session", "scan:stream")
#: Curator mode: data errors and warnings are the curator's; a table or public summary that
#: both neighbours give is what may be published, so only those are compared.
CURATOR_ENTRIES = ("polars:curmode", "lazy:curmode", "scan:curmode")


@dataclass
class Finding:
    """One case whose neighbours differ beyond the noise."""

    seed: int
    entry: str
    layout: str
    edit: str
    value: str
    plan: list[str]
    diffs: list[str]

    def __str__(self) -> str:
        return (f"seed={self.seed} entry={self.entry} layout={self.layout} edit={self.edit} "
                f"value={self.value} plan={self.plan}\n    " + "\n    ".join(self.diffs[:8]))


def api_case(seed: int, tmp: Path, entry: str | None = None) -> Finding | None:
    """Run one random case through one API entry point; a `Finding` if the neighbours differ."""
    pair = make_pair(seed)
    rng = np.random.default_rng([seed, 1])
    plan = releases(rng)
    entry = entry or API_ENTRIES[int(rng.integers(0, len(API_ENTRIES)))]
    budget = None if rng.random() < 0.5 else float(rng.choice([0.5, 5.0, 50.0]))
    obs = [[observe(api_run(entry, df, pair.layout, plan, s, budget, tmp)) for s in (11, 12)]
           for df in (pair.base, pair.other)]
    if entry.endswith(":curmode"):
        if any("error" in o for side in obs for o in side):
            return None  # a data error in curator mode is the curator's (documented)
        for side in obs:
            for o in side:
                o.pop("warnings")
    diffs = differences(obs[0], obs[1])
    if not diffs:
        return None
    return Finding(seed, entry, pair.layout, pair.edit, pair.value,
                   [f"{m}:{kw.get('columns', kw.get('column', ''))}/{kw['by']}" for m, kw in plan]
                   + [f"budget={budget}"], diffs)


# -- the command line (author mode) ------------------------------------------------------------
#: (validate, run) exit codes of every CLI run (so a sweep can show how many succeeded).
CLI_CODES: list[tuple[int, int]] = []


def cli_case(seed: int, tmp: Path, mode: str = "author") -> Finding | None:
    """One random case through ``tabdp run``.

    ``mode="author"``: a curator configuration declares the dataset, the author's spec names
    it; exit codes, stdout, stderr, warnings and the public folder are compared.
    ``mode="curator"``: the spec reads the file itself; a run that stops is the curator's
    (exit 4 may depend on the data: release-workflow.md), so only the public folders of two
    successful runs are compared.
    """
    import os
    import shutil

    from tabdp import cli

    pair = make_pair(seed)
    rng = np.random.default_rng([seed, 2])
    unit_line = 'unit = "id"\nunit_nulls = "drop"\n' if pair.layout != "row" else ""
    neg = str(rng.choice(["zero", "drop", "allow"]))
    nonfinite = str(rng.choice(["zero", "drop", "clamp"]))
    nulls = str(rng.choice(["zero", "drop"]))
    mech_line = str(rng.choice([
        '{ family = "gaussian", sigma = 50 }',
        '{ family = "laplace", scale = 50 }',
        '{ family = "log", sigma = 0.5, offset = 100 }',
    ]))
    if "log" in mech_line and neg == "allow":
        neg = "zero"
    rollup = str(rng.choice(["", "[[tables.rollups]]\nby = []",
                             "[[tables.rollups]]\nby = []\ndirect = true"]))
    publication = str(rng.choice([
        "", '[publication]\nsuppress_cv = 1.0\nnegative = "clamp"\n',
        '[publication]\ncv_flag = 0.3\nnegative = "flag"\n']))
    form = str(rng.choice(["long", "wide"]))
    budget = "" if rng.random() < 0.5 else f"[budget]\nrho = {rng.choice([0.5, 5.0])}\n"
    spec = f"""[release]
name = "fz"

[input]
INPUT
{unit_line}nulls = "{nulls}"
negatives = "{neg}"
nonfinite = "{nonfinite}"
bounds = {{ x = [0, 1000], n = [-10, 100] }}

[domains]
k = ["a", "b", "é", "B", ""]
j = [0, 1, 2, -1]

[[tables]]
name = "t"
measures = ["x", "n"]
by = ["k"]
mechanism = {mech_line}
{rollup}

[[tables]]
name = "c"
kind = "count"
by = ["k", "j"]
{rollup}

{budget}
{publication}
[output]
form = "{form}"

[randomness]
seed = SEED
"""
    if mode == "author":
        spec = spec.replace("INPUT", 'dataset = "d"\nmode = "author"')
    else:
        spec = spec.replace("INPUT", 'path = "data/d.parquet"').replace(
            '[output]\n', '[output]\npublic = "releases/fz/public"\n'
            'confidential = "releases/fz/confidential"\n')
    obs: list[list[dict[str, Any]]] = []
    cwd = os.getcwd()
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    for i, df in enumerate((pair.base, pair.other)):
        per = []
        for s in (11, 12):
            root = tmp / f"cli{seed}-{i}-{s}"
            if root.exists():
                shutil.rmtree(root)
            (root / "data").mkdir(parents=True)
            (root / "pub").mkdir()
            data = df if pair.layout != "row" else df.drop("id")
            data.write_parquet(root / "data" / "d.parquet")
            schema = schema_of(df, "id" if pair.layout != "row" else None)
            decl = ", ".join(f'"{c}" = "{t}"' for c, t in schema.items())
            unit_decl = 'unit = "id"\n' if pair.layout != "row" else ""
            (root / "curator.toml").write_text(
                f'[datasets.d]\npath = "data/d.parquet"\nschema = {{ {decl} }}\n{unit_decl}\n'
                f'[public]\nfolders = ["pub"]\n\n[output]\nroot = "releases"\n\n'
                f"[testing]\nseeded_author_runs = true\n", encoding="utf-8")
            (root / "s.toml").write_text(spec.replace("SEED", str(s)), encoding="utf-8")
            o: dict[str, Any] = {}
            try:
                os.chdir(root)
                os.environ["SOURCE_DATE_EPOCH"] = "1700000000"  # one timestamp on both servers
                for cmd in ("validate", "run"):
                    out, err = io.StringIO(), io.StringIO()
                    args = [cmd, "s.toml"] + (["--curator", "curator.toml"]
                                              if mode == "author" else [])
                    if cmd == "run":
                        args += ["--test-seed"]
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        code = cli.main(args, stdout=out, stderr=err)
                    o[f"{cmd}.code"] = code
                    o[f"{cmd}.stdout"] = out.getvalue()
                    o[f"{cmd}.stderr"] = err.getvalue()
                    o[f"{cmd}.warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
            finally:
                os.chdir(cwd)
                if epoch is None:
                    os.environ.pop("SOURCE_DATE_EPOCH", None)
                else:
                    os.environ["SOURCE_DATE_EPOCH"] = epoch
            CLI_CODES.append((o["validate.code"], o["run.code"]))
            pub = root / "releases" / "fz" / "public"
            files = sorted(p.relative_to(pub).as_posix() for p in pub.rglob("*")) \
                if pub.exists() else []
            o["public.files"] = files
            for name in files:
                p = pub / name
                if p.is_dir():
                    continue
                o[f"public.{name}.mode"] = oct(p.stat().st_mode)
                if name.endswith(".parquet"):
                    observe_table(f"public.{name}", pl.read_parquet(p), o)
                elif name.endswith(".json"):
                    _flat(f"public.{name}", json.loads(p.read_text(encoding="utf-8")), o)
                else:
                    o[f"public.{name}.bytes"] = p.read_bytes()
            per.append(o)
        obs.append(per)
    if mode == "curator":
        if any(o["run.code"] != 0 for side in obs for o in side):
            return None
        for side in obs:
            for o in side:
                for key in [k for k in o if not k.startswith("public.")]:
                    del o[key]
    diffs = differences(obs[0], obs[1])
    if not diffs:
        return None
    return Finding(seed, f"cli:{mode}", pair.layout, pair.edit, pair.value,
                   [f"neg={neg} nonfinite={nonfinite} nulls={nulls} {mech_line} {budget!r} "
                    f"{rollup!r} {publication!r} {form}"],
                   diffs)
