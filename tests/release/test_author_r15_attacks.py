"""Attack review R15 of author mode as a boundary (issue 27).

Playing a query author who controls only the spec text or the Python release calls: the same
spec (or calls) on two neighbouring servers, D and D' = D plus one record, and everything the
author sees must be equal but the noise (docs/privacy-semantics.md, "The author/curator
boundary" and "The Python boundary"). Each test is one attack: those that held stay as
regression tests; the gap found (R15-1, the curator's pinning of a path dataset) is fixed.
"""

from __future__ import annotations

import io
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import tabdp
from tabdp import cli
from tabdp import mechanisms as mech
from tabdp.datasets.synth import generate_establishments
from tabdp.exceptions import TabdpWarning

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _curator import NOISY, write_curator  # noqa: E402

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

HIER = Path(tabdp.__file__).resolve().parents[1] / "data" / "hierarchies"
KEYS = tabdp.KeySet.from_dict(c=["a", "b"])


def _view(run: Callable[[], Any]) -> tuple[Any, ...]:
    """What the author sees of one call: the table's non-noise part (or the error), warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = run()
            got: Any = ("ok", out if isinstance(out, (dict, str)) else
                        (tuple(out.columns), tuple(map(str, out.dtypes)),
                         out.select(out.columns[0]).rows(), out.height))
        except Exception as err:  # noqa: BLE001 - what the author sees
            got = ("raised", type(err).__name__, str(err), err.__cause__, err.__context__)
    return got, tuple((w.category.__name__, str(w.message)) for w in caught)


# -- R15-1 (fixed): the curator's pinning of a path dataset -----------------------------------
def _folder(root: Path, *, base: bool, extra: dict[str, Any] | None) -> Path:
    """A dataset folder: two records (file a) unless not ``base``, plus one file of one record."""
    root.mkdir(parents=True)
    if base:
        pq.write_table(pa.table({"u": pa.array([1, 2], pa.int64()), "c": ["a", "b"]}),
                       root / "a.parquet")
    if extra is not None:
        pq.write_table(pa.table({"u": pa.array([3], pa.int64()), "c": ["b"], **extra}),
                       root / "b.parquet")
    return root


@pytest.mark.parametrize("case", ["column_in_one_file", "empty_folder"])
def test_r15_1_declared_column_in_one_file_only(tmp_path: Path, case: str) -> None:
    """R15-1 (fixed): a declared column that only D''s one more file holds.

    ``Curator.author_session`` on a Parquet folder refused a declared column found in none
    of the files (``InvalidParameterError``), so on D (no file with ``w``, or an empty folder)
    the author got no session and on D' (one more file, one record, with ``w``) got one:
    whether the server could serve the author at all depended on one record, and the
    Python curator read the dataset unlike ``tabdp run`` (where such a column is nulls). Now
    the column reads as nulls on both, and the curator (only) is warned.
    """
    base = case == "column_in_one_file"
    views = []
    for name, extra in (("D", None), ("Dp", {"w": pa.array([7.0])})):
        cur = tabdp.Curator(seed=1)
        cur.add("d", _folder(tmp_path / name, base=base, extra=extra),
                schema={"u": "Int64", "c": "String", "w": "Float64"}, unit="u")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            author = cur.author_session("d")
        told = [str(w.message) for w in caught if issubclass(w.category, TabdpWarning)]
        assert any("in none of its files" in t for t in told) == (name == "D"), told
        views.append([_view(lambda a=author: a.sum("w", by="c", keys=KEYS, nulls="drop",
                                                   mechanism=mech.Gaussian(3.0),
                                                   negatives="zero")),
                      _view(lambda a=author: a.count(by="c", keys=KEYS)),
                      _view(lambda a=author: repr(a))])
    assert views[0] == views[1]
    assert views[0][0][0][0] == "ok"


# -- held: one record at a value edge, through tabdp.Curator and the release kinds ----------
_BASE = pl.DataFrame({"u": list(range(10)), "c": ["a"] * 5 + ["b"] * 5,
                      "x": [float(i) for i in range(10)], "n": list(range(10))},
                     schema={"u": pl.Int64, "c": pl.String, "x": pl.Float64, "n": pl.Int64})
_EDGES = {"x_1e308": {"x": 1e308}, "x_inf": {"x": float("inf")}, "x_nan": {"x": float("nan")},
          "n_max": {"n": 2**63 - 1}, "n_min": {"n": -2**63}, "u_null": {"u": None},
          "c_null": {"c": None}, "u_dup": {"u": 3}}


def _calls(a: tabdp.AuthorSession) -> list[Callable[[], Any]]:
    g = mech.Gaussian(5.0)
    return [
        lambda: a.sum(["x", "n"], by="c", keys=KEYS, mechanism=g, nulls="drop",
                      negatives="allow", cv=True, form="long"),
        lambda: a.sum("n", by="c", keys=KEYS, mechanism=mech.DiscreteGaussian(5.0),
                      nulls="zero", negatives="zero", max_cells=1),
        lambda: a.sum("x", by="c", keys=KEYS, mechanism=mech.LogTransform(1.0, 1.0),
                      nulls="zero", negatives="zero"),
        lambda: a.sum("x", by="c", keys=KEYS, mechanism=mech.SymmetricStable(1.5, 3.0),
                      nulls="zero", negatives="allow", grid=1.0),
        lambda: a.count(by="c", keys=KEYS, max_rows=1, cv=True),
        lambda: a.median("x", by="c", keys=KEYS, bounds=(0.0, 100.0), epsilon=1.0,
                         nulls="drop", cv=True),
        lambda: a.quantile("n", 1.0, by="c", keys=KEYS, bounds=(-1e19, 1e19), epsilon=1.0,
                           noise="laplace", delta=1e-6, nulls="zero"),
        lambda: a.summary(),
    ]


def _python_views(frame: pl.DataFrame, budget: float | None) -> list[Any]:
    cur = tabdp.Curator(seed=5, budget=budget)
    cur.add("d", frame, schema={"u": "Int64", "c": "String", "x": "Float64", "n": "Int64"},
            unit="u")
    author = cur.author_session("d", name="s")
    return [_view(call) for call in _calls(author)]


@pytest.mark.parametrize("budget", [None, 2.0])
def test_r15_python_value_edges_change_only_the_noise(budget: float | None) -> None:
    """Held: D' = D plus one record at a value edge; every release kind and the summary.

    Sums (Gaussian with ``cv`` and long form, discrete Gaussian with ``max_cells``, a
    transformation mechanism, symmetric stable with a grid), counts with ``max_rows``,
    medians and quantiles (±2**63 with bounds of ±1e19, 1e308, ±inf, NaN, a null unit, a
    null key, a unit id shared with a record of D): the same columns, dtypes, keys, rows,
    warnings, errors and public summary on both (under a budget too).
    """
    d = _python_views(_BASE, budget)
    assert all(v[0][0] == "ok" for v in d), d
    for label, rec in _EDGES.items():
        row = {"u": 100, "c": "b", "x": 5.0, "n": 5, **rec}
        extra = pl.DataFrame([row], schema=_BASE.schema)
        assert _python_views(pl.concat([_BASE, extra]), budget) == d, label


# -- held: an empty dataset folder against one holding one record (the CLI) -----------------
_SPEC = """
[release]
name = "r15"
[input]
dataset = "cbp"
mode = "author"
nulls = "drop"
negatives = "zero"
nonfinite = "drop"
unit_nulls = "drop"
bounds = { v = [0, 100] }
[domains]
state = ["01", "02"]
[[tables]]
name = "t"
measures = ["v"]
by = ["state"]
mechanism = { family = "gaussian", sigma = 3 }
[[tables]]
name = "n"
kind = "count"
by = ["state"]
[randomness]
seed = 7
"""


def _cli(root: Path, monkeypatch: pytest.MonkeyPatch, command: str) -> tuple[int, str, str]:
    monkeypatch.chdir(root)
    out, err = io.StringIO(), io.StringIO()
    args = [command, "s.toml", "--curator", "curator.toml"]
    if command == "run":
        args += ["--overwrite", "--test-seed"]
    code = cli.main(args, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _public(root: Path, name: str) -> dict[str, Any]:
    """The public folder: file names, each table's schema and key columns, summary.json."""
    pub = root / "releases" / name / "public"
    seen: dict[str, Any] = {}
    for f in sorted(pub.rglob("*")):
        rel = f.relative_to(pub).as_posix()
        if f.suffix == ".parquet":
            t = pl.read_parquet(f)
            keys = [c for c, dt in t.schema.items() if dt == pl.String and c != "flag"
                    and not c.endswith("_flag") and c not in NOISY]
            seen[rel] = (t.schema, t.select(keys).rows())
        else:
            seen[rel] = None
    return seen


@pytest.mark.parametrize("files", ["none", "zero_rows", "empty_partition_folder"])
def test_r15_empty_dataset_against_one_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              files: str) -> None:
    """Held: a dataset without records against one record.

    D holds no record (an empty folder, a file of 0 rows, an empty ``state=02`` folder); D'
    one record in one file. ``validate`` and ``run``: the same exit code (0), stdout and
    stderr, and the same public files, tables' schemas and keys.
    """
    schema = {"estab_id": "Int64", "state": "String", "v": "Int64"}
    rec = pa.table({"estab_id": pa.array([1000], pa.int64()), "state": ["02"],
                    "v": pa.array([5], pa.int64())})
    views = []
    for name in ("D", "Dp"):
        root = tmp_path / name
        (root / "ds").mkdir(parents=True)
        if name == "Dp":
            pq.write_table(rec, root / "ds" / "x.parquet")
        elif files == "zero_rows":
            pq.write_table(rec.slice(0, 0), root / "ds" / "x.parquet")
        elif files == "empty_partition_folder":
            (root / "ds" / "state=02").mkdir()
        write_curator(root, {"cbp": "ds"}, public=[HIER], schemas={"cbp": schema},
                      dataset_extra={"cbp": 'unit = "estab_id"'})
        (root / "s.toml").write_text(_SPEC, encoding="utf-8")
        views.append(([_cli(root, monkeypatch, c) for c in ("validate", "run")],
                      _public(root, "r15")))
    assert views[0] == views[1]
    assert [v[0] for v in views[0][0]] == [0, 0]


# -- held: a spec using every release feature, on neighbouring servers ----------------------
_FULL = """
[release]
name = "full"
title = "<script>alert(1)</script>"
[input]
dataset = "cbp"
mode = "author"
nulls = "drop"
negatives = "zero"
nonfinite = "drop"
unit_nulls = "drop"
bounds = { payroll = [0, 1e8], employment = [0, 1e4] }
[hierarchies.geo]
file = "geography.csv"
levels = ["state", "county"]
[hierarchies.industry]
file = "naics.csv"
levels = ["naics2", "naics3", "naics4", "naics6"]
[budget.rho]
"1" = 0.2
"1e4" = 2.0
"1e8" = 5.0
[publication]
cv_flag = 0.3
suppress_cv = 2.0
negative = "flag"
[[tables]]
name = "pay"
measures = ["payroll"]
by = ["county", "naics2"]
mechanism = { family = "gaussian", sigma = 1e5 }
consistent = true
shares = { county_naics2 = 0.8, state_naics2 = 0.2 }
nonnegative = true
[[tables.rollups]]
by = ["state", "naics2"]
direct = true
[[tables.rollups]]
by = []
[[tables]]
name = "emp"
measures = ["employment"]
by = ["state", "naics6"]
calibrate = { family = "exp_polylog", targets = { "5" = 0.5, "2.5e5" = 5.0 }, \
typical_total = 100.0, fixed = { p = 1 } }
publication = { round = 1.0 }
[[tables.rollups]]
by = ["state", "naics2"]
[[tables]]
name = "n"
kind = "count"
by = ["county"]
mechanism = { family = "discrete_gaussian", sigma = 2.0 }
consistent = true
integer = true
[[tables.rollups]]
by = ["state"]
direct = true
[randomness]
seed = 11
"""


def _full_extra(base: pl.DataFrame, kind: str) -> pl.DataFrame:
    one = base.filter(pl.col("state") == "02").head(1).with_columns(
        pl.lit(10**6).alias("estab_id"))
    if kind == "huge":  # far above the bounds: clipped, then left out by the budget
        return one.with_columns(pl.lit(1e15).alias("payroll"))
    if kind == "unit_in_every_county":  # one unit, many cells of every table
        counties = base.filter(pl.col("state") == "02")["county"].unique().sort().to_list()
        return pl.concat([one.with_columns(pl.lit(c).alias("county")) for c in counties])
    assert kind == "codes_outside_the_hierarchies"
    return one.with_columns(pl.lit("02999").alias("county"), pl.lit("999999").alias("naics6"))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["huge", "unit_in_every_county",
                                  "codes_outside_the_hierarchies"])
def test_r15_every_feature_on_neighbouring_servers(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   kind: str) -> None:
    """Held: a spec using every release feature, on servers one record apart.

    Hierarchies, direct and derived rollups, consistent tables with shares,
    ``nonnegative`` and ``integer``, a calibrated table rounded for publication, a curve
    budget, ``cv_flag`` / ``suppress_cv`` / negative flags, an HTML-like title. D' holds one
    more establishment (huge; in every county of its state; with codes outside both
    hierarchies). ``validate``, ``plan`` and ``run``: the same exit codes, stdout and stderr;
    the same public files, table schemas and keys. (Flags, suppressed cells, ``sd`` of
    consistent tables and the public summary's shares of flagged cells follow the noisy
    estimates, so they differ: post-processing of the noise.)
    """
    base = generate_establishments(400, seed=3).filter(pl.col("state").is_in(["01", "02"]))
    schema = {c: str(t) for c, t in base.schema.items()}
    views = []
    for name in ("D", "Dp"):
        root = tmp_path / name
        (root / "ds").mkdir(parents=True)
        base.write_parquet(root / "ds" / "a.parquet")
        if name == "Dp":
            _full_extra(base, kind).write_parquet(root / "ds" / "b.parquet")
        write_curator(root, {"cbp": "ds"}, public=[HIER], schemas={"cbp": schema},
                      dataset_extra={"cbp": 'unit = "estab_id"'})
        (root / "s.toml").write_text(_FULL, encoding="utf-8")
        views.append(([_cli(root, monkeypatch, c) for c in ("validate", "plan", "run")],
                      _public(root, "full")))
        html = (root / "releases" / "full" / "public" / "summary.html").read_text("utf-8")
        assert "<script>alert" not in html
    assert views[0] == views[1]
    assert [v[0] for v in views[0][0]] == [0, 0, 0]


# -- R15-2 (fixed): a ledger dataset whose declared unit the ledger cannot key --------------
@pytest.mark.parametrize("dtype", ["Float64", "UInt64", "Boolean", "Date"])
def test_r15_2_ledger_unit_dtype_is_refused_from_the_configuration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: str) -> None:
    """R15-2 (fixed): a ledger dataset's unit declared of a type the ledger cannot key.

    ``[datasets.x] unit`` declared Float64 (UInt64, Boolean, Date) with a
    ``ledger``: every author run read the data and then failed (the generic failure, exit 4,
    "ask the curator"), and every release of a Python author session was a `DataFailure`;
    ``validate`` said the spec was fine. The ledger keys units by Int64 or text ids, so it is
    now a configuration error from the text (exit 2, before anything is read), and
    ``Curator.add`` refuses it.
    """
    (tmp_path / "ds").mkdir()
    schema = {"estab_id": dtype, "state": "String", "v": "Int64"}
    write_curator(tmp_path, {"cbp": "ds"}, public=[HIER], schemas={"cbp": schema},
                  dataset_extra={"cbp": 'unit = "estab_id"\nledger = "ledgers/cbp"'})
    (tmp_path / "s.toml").write_text(_SPEC, encoding="utf-8")
    for command in ("validate", "run"):
        code, out, err = _cli(tmp_path, monkeypatch, command)
        assert code == 2, (code, err)
        assert "datasets.cbp.schema.estab_id" in err and str(tmp_path) not in out + err
    cur = tabdp.Curator()
    with pytest.raises(tabdp.exceptions.InvalidParameterError, match="keys units by"):
        cur.add("d", pl.DataFrame({"u": [1], "c": ["a"]}), unit="u", ledger=tmp_path / "l",
                schema={"u": dtype, "c": "String"})
    cur.add("ok", pl.DataFrame({"u": [1], "c": ["a"]}), unit="u", ledger=tmp_path / "l",
            schema={"u": "Int32", "c": "String"})


# -- R15-3 (fixed): tabdp compare on a server for authors -----------------------------------
def test_r15_3_compare_honours_author_only(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """R15-3 (fixed): ``tabdp compare`` ignored ``[policy] author_only``.

    ``[policy] author_only = true`` refused curator-mode specs in
    ``validate``, ``plan`` and ``run``, but ``tabdp compare`` never read the configuration
    (``TABDP_CURATOR``): a curator-mode spec naming any server path was read, and its
    unprotected comparison (cell suppression, audit counts on stdout) written to a folder
    of the caller's choice. Now it is refused like the others (exit 2, nothing read).
    """
    monkeypatch.chdir(tmp_path)
    generate_establishments(50, seed=1).write_parquet("d.parquet")
    Path("c.toml").write_text('[datasets.cbp]\npath = "d.parquet"\nschema = { estab_id = '
                              '"Int64", state = "String" }\n[output]\nroot = "releases"\n'
                              '[policy]\nauthor_only = true\n', encoding="utf-8")
    monkeypatch.setenv("TABDP_CURATOR", str(tmp_path / "c.toml"))
    Path("s.toml").write_text(
        '[release]\nname = "x"\n[input]\npath = "d.parquet"\nunit = "estab_id"\n'
        '[domains]\nstate = ["01", "02"]\n[output]\npublic = "o/public"\n'
        'confidential = "o/confidential"\n[[tables]]\nname = "n"\nkind = "count"\n'
        'by = ["state"]\nmechanism = { family = "gaussian", sigma = 1.0 }\n', encoding="utf-8")
    for args in (["run", "s.toml"], ["compare", "s.toml", "--out", "cmp"],
                 ["ledger", "init", "led", "--series", "s", "--lifetime-budget", "1.0"],
                 ["ledger", "verify", "led"],
                 ["ledger", "show", "led"]):
        out, err = io.StringIO(), io.StringIO()
        code = cli.main(args, stdout=out, stderr=err)
        assert code == 2 and out.getvalue() == "", (args, err.getvalue())
        assert "author_only" in err.getvalue()
    assert not Path("cmp").exists() and not Path("o").exists() and not Path("led").exists()


# -- held: Spark reads folder and file names with URI and glob characters as Polars does ----
_ODD_NAMES = ["state=a:b/x.parquet", "state=%3A/x.parquet", "state=a b/x.parquet",
              "state=a#b/x.parquet", "state=a{b/x.parquet", "state=a?b/x.parquet",
              "state=a]b/x.parquet", "state=a\\b/x.parquet", "state=a%/x.parquet",
              "state=a%2Fb/x.parquet", "state=02/x:y.parquet", "state=02/x%20y.parquet",
              "_temporary/0/part-0.parquet", ".hidden/x.parquet", "state=02/x.parquet "]


@pytest.mark.spark
def test_r15_spark_reads_odd_names_as_polars(spark: Any, tmp_path: Path) -> None:
    """Held: Spark reads odd folder and file names as Polars does.

    One record alone in a file whose folder or name holds ``:``, ``%``, ``#``,
    glob characters, a backslash, or hidden / bookkeeping folders (a hive writer names a
    folder after a record's value): Spark's rows equal Polars' (Hadoop's path parsing and
    globbing neither fail nor read another file).
    """
    from tabdp.release.declared import read_declared_spark, scan_declared

    schema = {"estab_id": pl.Int64, "state": pl.String, "v": pl.Int64}
    for i, rel in enumerate(_ODD_NAMES):
        d = tmp_path / f"d{i}"
        d.mkdir()
        pq.write_table(pa.table({"estab_id": pa.array([1], pa.int64()), "state": ["01"],
                                 "v": pa.array([1], pa.int64())}), d / "base.parquet")
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"estab_id": pa.array([1000], pa.int64()), "state": ["02"],
                                 "v": pa.array([5], pa.int64())}), d / rel)
        want = scan_declared(d, schema).sort("estab_id").collect().rows()
        got = sorted(tuple(r) for r in read_declared_spark(spark, d, schema).collect())
        assert got == want, rel
        assert len(want) == (1 if rel.endswith(" ") else 2), rel


# -- R15-4 (fixed): a joint release's currency was the order of its measures -------------
def test_r15_4_joint_currency_does_not_depend_on_the_measures_order() -> None:
    """R15-4: the same measures released jointly in the other order get a fresh budget.

    Under a curve budget each currency has its own limit. A flat curve of ρ = 1 per
    currency; unit 1 contributes (100, 100), charged ρ ≈ 0.6 by a joint Gaussian release of
    (x, y). After ``["x", "y"]`` the unit has 0.6 of its 1.0 in
    currency ``x+y``, so a second joint release of the same measures must leave it out,
    whatever their order; ``["y", "x"]`` was currency ``y+x`` and admitted it again (its
    total over the session: 1.2 for one pair of measures; with k measures, k! orders).
    """
    df = pl.DataFrame({"u": [1, 2, 3], "c": ["a"] * 3, "x": [100.0, 1.0, 1.0],
                       "y": [100.0, 1.0, 1.0]})
    keys = tabdp.KeySet.from_dict(c=["a"])
    cur = tabdp.Curator(seed=1, budget={1.0: 1.0, 1e6: 1.0})
    cur.add("d", df, schema={"u": "Int64", "c": "String", "x": "Float64", "y": "Float64"},
            unit="u")
    author = cur.author_session("d", name="s")
    joint = mech.VectorSubbotin(2, 129.0)
    for order in (["x", "y"], ["y", "x"]):
        author.sum(order, by="c", keys=keys, mechanism=joint, nulls="zero", negatives="zero")
    left_out = [q["units_left_out_by_budget"]
                for q in cur.report("s").confidential_summary()["queries"]]
    assert left_out == [0, 1]
