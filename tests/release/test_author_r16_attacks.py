"""Attack review R16 of issue 27's last changes (author mode as a real boundary).

Reviewed: lenient reads of declared text (invalid UTF-8, non-UTF-8 partition values and
folder names, Polars and the Spark alias folder), the ``formattable`` guard of the key join,
one unit per shared ledger, joint currencies, ``[policy] max_rho`` / ``Curator(max_rho=)``,
and the curator-only CLI tools under ``[policy] author_only``.

Findings (fixed here): R16-1 the Spark alias folder's race (two reads at once named the same
alias, and the copy fallback wrote one dataset file's bytes into the other's inode); R16-2
datasets sharing a ledger compared their unit types only when both were declared (two Polars
frames, an Int64 and a String unit, were accepted and every release of one then failed);
R16-3 ``tabdp demo --out`` ran under an ``author_only`` configuration (it names a server
folder, says whether it exists and replaces it with ``--overwrite``); R16-4 a Date or
Datetime key column against a key set of text failed every release after reading the data
(the key join's check cast text back to a date, which Polars 2 refuses).
"""

from __future__ import annotations

import io
import os
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _curator import write_curator  # noqa: E402

import tabdp  # noqa: E402
from tabdp import cli  # noqa: E402
from tabdp.datasets.synth import generate_establishments  # noqa: E402
from tabdp.exceptions import InvalidParameterError  # noqa: E402
from tabdp.mechanisms import Gaussian, Subbotin, VectorSubbotin  # noqa: E402
from tabdp.release import declared  # noqa: E402
from tabdp.release.declared import scan_declared  # noqa: E402

HIER = Path(tabdp.__file__).resolve().parents[1] / "data" / "hierarchies"


def _not_utf8_text(values: Sequence[bytes | None]) -> Any:
    """A pyarrow string array holding the given bytes unchecked (some not UTF-8)."""
    import pyarrow as pa

    return pa.array(values, pa.binary()).view(pa.string())


# -- R16-1 (fixed): the Spark alias folder under concurrent reads ------------------------------
def test_r16_1_two_aliases_at_once_never_write_into_a_dataset_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """R16-1 (fixed, medium): two reads at once took the same alias name.

    `_utf8_alias` (Spark reads a file under a folder whose name is not UTF-8 through a hard
    link in a private folder) named the link after ``len(_ALIASES)``, which grows only once
    the link exists: two threads (two author sessions pinning Spark datasets at once) took the
    same name, the second ``os.link`` failed (the name existed) and fell back to
    ``shutil.copyfile`` onto the first link, writing the second dataset's file into the
    first one's inode: the curator's file on disk was overwritten, and the first session
    read the other dataset. Now one lock, a counter, and a copy never opens an existing path.
    """
    odd = tmp_path / os.fsdecode(b"caf\xe9")
    odd.mkdir()
    a, b = odd / "a.parquet", odd / "b.parquet"
    a.write_bytes(b"A" * 1000)
    b.write_bytes(b"B" * 1000)
    real_link = os.link

    def slow_link(src: object, dst: object, **kw: object) -> None:
        real_link(src, dst, **kw)  # type: ignore[arg-type]
        time.sleep(0.3)  # the first link exists; its name is not yet taken in _ALIASES

    monkeypatch.setattr(os, "link", slow_link)
    gate = threading.Barrier(2)
    got: dict[str, Path] = {}

    def alias(f: Path) -> None:
        gate.wait()
        got[f.name] = declared._utf8_alias(f)

    threads = [threading.Thread(target=alias, args=(f,)) for f in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert a.read_bytes() == b"A" * 1000 and b.read_bytes() == b"B" * 1000
    assert got["a.parquet"] != got["b.parquet"]
    assert got["a.parquet"].read_bytes() == b"A" * 1000
    assert got["b.parquet"].read_bytes() == b"B" * 1000
    assert oct(got["a.parquet"].parent.stat().st_mode & 0o777) == "0o700"


# -- R16-2 (fixed): a shared ledger, units of two types, no declared schema --------------------
def test_r16_2_shared_ledger_unit_types_compared_without_a_schema(tmp_path: Path) -> None:
    """R16-2 (fixed, low): the unit types were compared only when both schemas were declared.

    Two Polars frames without ``schema=`` sharing one ledger, unit ``u`` Int64 in one and
    String in the other, were accepted; every release of the second then failed (the ledger
    refused the other key type after the data was read: the generic `DataFailure`, the same
    on every server, so no leak, but an unusable dataset that `Curator.add` should refuse
    from the frames' schemas, as it does for declared ones).
    """
    from tabdp.privacy.lifetime import Ledger

    Ledger.create(tmp_path / "led", series="s", lifetime_budget=1.0).close()
    cur = tabdp.Curator(seed=1, budget=1.0)
    cur.add("a", pl.DataFrame({"u": [7, 8], "c": ["x", "x"]}), unit="u",
            ledger=tmp_path / "led")
    with pytest.raises(InvalidParameterError, match="share one lifetime ledger"):
        cur.add("b", pl.DataFrame({"u": ["7", "8"], "c": ["x", "x"]}), unit="u",
                ledger=tmp_path / "led")
    # the same type in a frame and in a declared schema: one account per unit, accepted
    cur.add("c", pl.DataFrame({"u": [9], "c": ["x"]}).lazy(), unit="u",
            ledger=tmp_path / "led")
    cur.add("d", pl.DataFrame({"u": [1], "c": ["y"]}), unit="u", ledger=tmp_path / "led",
            schema={"u": "Int64", "c": "String"})


# -- R16-3 (fixed): tabdp demo under author_only --------------------------------------------
def test_r16_3_demo_refuses_under_author_only(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """R16-3 (fixed, low): ``tabdp demo --out FOLDER`` ran under an author_only server.

    ``tabdp demo`` ignores the curator configuration (its spec is the bundled curator-mode
    example), so on a server for authors ``--out`` named any server folder: it said whether
    ``FOLDER/public`` existed (exit 2, "already exists") and with ``--overwrite`` replaced
    ``public``, ``confidential`` and ``plan`` there (a published release, say) with the
    demo's. Like ``compare`` and ``ledger``, it now refuses under ``author_only``.
    """
    victim = tmp_path / "victim"
    (victim / "public").mkdir(parents=True)
    (victim / "public" / "t.parquet").write_bytes(b"published")
    cfg = tmp_path / "cur.toml"
    cfg.write_text('[datasets.d]\npath = "/nonexistent"\nschema = { a = "Int64" }\n'
                   f'[output]\nroot = "{(tmp_path / "rel").as_posix()}"\n'
                   "[policy]\nauthor_only = true\n", encoding="utf-8")
    monkeypatch.setenv("TABDP_CURATOR", str(cfg))
    for extra in ([], ["--overwrite"]):
        out, err = io.StringIO(), io.StringIO()
        code = cli.main(["demo", "--out", str(victim), "--quiet", *extra], stdout=out,
                        stderr=err)
        assert code == 2 and "author_only" in err.getvalue(), (code, err.getvalue())
        assert str(victim) not in err.getvalue() and "exists" not in err.getvalue()
        assert (victim / "public" / "t.parquet").read_bytes() == b"published"
    monkeypatch.delenv("TABDP_CURATOR")  # the curator's own shell: the demo runs
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["demo", "--out", str(victim), "--quiet"], stdout=out, stderr=err)
    assert code == 2 and "already exists" in err.getvalue()  # its ordinary refusal


# -- held: max_rho is what a unit spends, checked on real runs --------------------------------
_CAPPED = """
[release]
name = "capped"
[input]
dataset = "cbp"
mode = "author"
nulls = "drop"
negatives = "zero"
nonfinite = "drop"
unit_nulls = "drop"
bounds = {{ payroll = [0, 1e8], employment = [0, 1e4], revenue = [0, 1e9] }}
[hierarchies.geo]
file = "geography.csv"
levels = ["state", "county"]
[hierarchies.industry]
file = "naics.csv"
levels = ["naics2", "naics3", "naics4", "naics6"]
{budget}
[[tables]]
name = "pay"
measures = ["payroll"]
by = ["county", "naics2"]
mechanism = {{ family = "gaussian", sigma = 1e6 }}
consistent = true
shares = {{ county_naics2 = 0.8, state_naics2 = 0.2 }}
nonnegative = true
[[tables.rollups]]
by = ["state", "naics2"]
direct = true
[[tables.rollups]]
by = []
[[tables]]
name = "pay2"
measures = ["payroll"]
by = ["state"]
mechanism = {{ family = "gaussian", sigma = 1e6 }}
[[tables.rollups]]
by = []
direct = true
[[tables]]
name = "emp"
measures = ["employment"]
by = ["state", "naics6"]
calibrate = {{ family = "exp_polylog", targets = {{ "5" = 0.5, "2.5e5" = 5.0 }}, \
typical_total = 100.0, fixed = {{ p = 1 }} }}
[[tables.rollups]]
by = ["state", "naics2"]
direct = true
[[tables]]
name = "joint"
measures = ["payroll", "revenue"]
by = ["state"]
mechanism = {{ family = "vector_subbotin", r = 2, scale = 1.0, \
weights = {{ payroll = 1e6, revenue = 1e7 }} }}
[[tables.rollups]]
by = []
direct = true
[[tables]]
name = "joint2"
measures = ["revenue", "payroll"]
by = ["county"]
mechanism = {{ family = "vector_subbotin", r = 2, scale = 1.0, \
weights = {{ payroll = 1e6, revenue = 1e7 }} }}
[[tables]]
name = "n"
kind = "count"
by = ["county"]
mechanism = {{ family = "discrete_gaussian", sigma = 3.0 }}
consistent = true
integer = true
[[tables.rollups]]
by = ["state"]
direct = true
[[tables]]
name = "n2"
kind = "count"
by = ["naics6"]
mechanism = {{ family = "laplace", scale = 3.0 }}
[[tables.rollups]]
by = []
direct = true
"""


@pytest.mark.slow
@pytest.mark.parametrize(("budget", "cap", "most"), [
    # a constant budget at the cap: every table, rollup and joint release counts in it
    ("[budget]\nrho = 1.0", 1.0, 1.0),
    # a curve: currencies payroll, employment, payroll+revenue, rows (the text bound says up
    # to 3 measures + 2 tables of two measures + rows = 6), each at most the curve's top 1.0
    ('[budget.rho]\n"1" = 0.3\n"1e9" = 1.0', 6.0, 4.0),
])
def test_max_rho_holds_on_a_run_of_every_release_feature(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: str, cap: float,
        most: float) -> None:
    """Held: no unit's per-record ρ in ``per_record_losses.parquet`` passes ``max_rho``.

    Consistent tables with shares and direct rollups (extra releases), a calibrated table,
    joint (vector) releases in both measure orders, counts (a consistent one), and units of
    many rows in many cells; noise small enough that most units would pass the cap without
    the filter. Under a curve, each currency stays within the curve's top as well.
    """
    base = generate_establishments(600, seed=3)
    many = pl.concat([base.head(40).with_columns(
        pl.lit(10**6 + (i % 5), dtype=pl.Int64).alias("estab_id")) for i in range(4)])
    (tmp_path / "ds").mkdir()
    pl.concat([base, many]).write_parquet(tmp_path / "ds" / "a.parquet")
    write_curator(tmp_path, {"cbp": "ds"}, public=[HIER],
                  schemas={"cbp": {c: str(t) for c, t in base.schema.items()}},
                  dataset_extra={"cbp": 'unit = "estab_id"'},
                  extra=f"[policy]\nmax_rho = {cap}\n")
    (tmp_path / "s.toml").write_text(_CAPPED.format(budget=budget), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for command in ("validate", "run"):
        out, err = io.StringIO(), io.StringIO()
        args = [command, "s.toml", "--curator", "curator.toml"]
        code = cli.main(args + (["--overwrite", "--quiet"] if command == "run" else []),
                        stdout=out, stderr=err)
        assert code == 0, err.getvalue()
    losses = pl.read_parquet(tmp_path / "releases" / "capped" / "confidential"
                             / "per_record_losses.parquet")
    per_release = [c for c in losses.columns if c.startswith("rho_")]
    assert len(per_release) == 13  # 7 tables + 6 direct or consistent rollup releases
    assert losses["rho"].max() <= cap
    assert losses["rho"].max() <= most * (1 + 1e-12)
    assert float(losses["rho"].max()) > 0.4 * most  # the filter was needed
    summed = losses.select(pl.sum_horizontal(per_release))[:, 0]
    assert np.allclose(summed, losses["rho"])


@pytest.mark.slow
def test_max_rho_holds_in_a_python_author_session() -> None:
    """Held: ``Curator(max_rho=1, budget=1)``: no unit passes 1.0 in a Python session.

    Approximate-DP releases, medians, quantiles, a joint sum, ``max_cells`` and repeated sums
    and counts.

    Approximate-DP mechanisms (Subbotin r = 3, Laplace smooth-sensitivity medians with δ)
    have an infinite per-record ρ: the filter leaves every unit out of them (0 charged).
    """
    rng = np.random.default_rng(0)
    n = 300
    df = pl.DataFrame({"u": np.repeat(np.arange(100), 3), "c": rng.choice(["a", "b"], n),
                       "pay": rng.uniform(0, 100, n), "pay2": rng.uniform(0, 100, n)})
    cur = tabdp.Curator(seed=1, max_rho=1.0, budget=1.0)
    cur.add("d", df, unit="u", schema={"u": "Int64", "c": "String", "pay": "Float64",
                                       "pay2": "Float64"})
    s = cur.author_session("d")
    keys = tabdp.KeySet.from_dict(c=["a", "b"])
    rules = {"nulls": "drop", "negatives": "zero"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s.sum("pay", by="c", keys=keys, mechanism=Subbotin(r=3.0, scale=10.0, delta=1e-6),
              **rules)
        s.median("pay", by="c", keys=keys, bounds=(0.0, 100.0), epsilon=0.3, nulls="drop")
        s.median("pay", by="c", keys=keys, bounds=(0.0, 100.0), epsilon=1.0,
                 noise="laplace", delta=1e-6, nulls="drop")
        s.quantile("pay", 0.3, by="c", keys=keys, bounds=(0.0, 100.0), epsilon=0.1,
                   nulls="drop")
        s.sum(["pay", "pay2"], by="c", keys=keys, mechanism=VectorSubbotin(r=2.0, scale=80.0),
              **rules)
        s.sum("pay", by="c", keys=keys, mechanism=Gaussian(sigma=80.0), max_cells=1, **rules)
        for _ in range(5):
            s.sum("pay", by="c", keys=keys, mechanism=Gaussian(sigma=60.0), **rules)
            s.count(by="c", keys=keys, mechanism=Gaussian(sigma=2.0))
    per = cur.report(s.name).per_record
    assert per["rho"].max() <= 1.0
    assert per["rho"].max() > 0.9
    assert per["rho_q1_sum"].max() == 0.0 and per["rho_q3_median"].max() == 0.0


# -- held: lenient reads of text that is not UTF-8 ------------------------------------------
@pytest.mark.parametrize("encoding", ["plain", "dictionary", "no_statistics", "arrow_dict"])
def test_one_value_not_utf8_changes_no_other_record(tmp_path: Path, encoding: str) -> None:
    """Held: one value that is not UTF-8 in a file changes no other value of the file.

    Plain or dictionary pages, no statistics, an Arrow dictionary column: every other value
    reads as in the file without it.

    The probe (``null_count``) decodes every value under each encoding, so the file is read
    by pyarrow; only the bad value is null, and the file's other columns are Polars' own.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    good = [b"a", b"b", b"b", b"a", b"c"]
    for name, values in (("D", good), ("Dp", [*good[:1], b"\xff", *good[1:]])):
        n = len(values)
        text = _not_utf8_text(values)
        if encoding == "arrow_dict":
            text = text.dictionary_encode()
        table = pa.table({"u": pa.array(range(n), pa.int64()), "c": text,
                          "v": pa.array([1.5] * n), "d": pa.array([2] * n, pa.int32())})
        kw = {"plain": {"use_dictionary": False}, "no_statistics": {"write_statistics": False}
              }.get(encoding, {})
        (tmp_path / name).mkdir()
        pq.write_table(table, tmp_path / name / "a.parquet", **kw)
    schema = {"u": pl.Int64, "c": pl.String, "v": pl.Float64, "d": pl.Int64}
    d = scan_declared(tmp_path / "D", schema, flag_lost=True).collect()
    dp = scan_declared(tmp_path / "Dp", schema, flag_lost=True).collect()
    assert dp.schema == d.schema
    extra = dp.filter(pl.col("c").is_null())
    assert extra.height == 1 and extra["__tabdp_lost_c"].to_list() == [True]
    assert dp.filter(pl.col("c").is_not_null()).drop("u").equals(d.drop("u"))


def test_a_nested_text_column_null_in_its_file_leaves_the_release_columns(
        tmp_path: Path) -> None:
    """Held: a nested text column with one bad element is null in its file, nothing else.

    A list of text with one element that is not UTF-8 makes that column null in its file
    (counted for the curator); the file's key and measure values are unchanged.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    lt = pa.array([[b"a"], [b"\xff"], [b"c"]], pa.list_(pa.binary()))
    tags = pa.ListArray.from_arrays(lt.offsets, lt.values.view(pa.string()))
    (tmp_path / "state=01").mkdir()
    pq.write_table(pa.table({"tags": tags, "c": _not_utf8_text([b"x", b"y", b"x"]),
                             "v": pa.array([1.0, 2.0, 3.0])}),
                   tmp_path / "state=01" / "a.parquet")
    out = scan_declared(tmp_path, {"state": pl.String, "tags": pl.String, "c": pl.String,
                                   "v": pl.Float64}, flag_lost=True).collect()
    assert out.select("state", "c", "v").rows() == [("01", "x", 1.0), ("01", "y", 2.0),
                                                    ("01", "x", 3.0)]
    assert out["tags"].null_count() == 3 and out["__tabdp_lost_tags"].all()


# -- R16-4 (fixed): a date key column against a key set of text ----------------------------
def test_r16_4_date_keys_against_text_keys_release_on_neighbours() -> None:
    """R16-4 (fixed, low): a Date (or Datetime) key column and a key set of text never released.

    The key join casts the column to text (`formattable` first: review R14) and checked the
    cast by casting the text back to the date type, which Polars 2 no longer does: every
    such release failed after reading the data (the generic `DataFailure`, alike on both
    servers, so no leak; the R14 test took it for a type refusal). A date or time as text is
    exact wherever it can be formatted, so that is now the check. Held: a neighbour with one
    date Polars cannot format (and a zoned millisecond Datetime) gives the same table.
    """
    import datetime as dt

    keys = tabdp.KeySet.from_dict(d=["2020-01-02", "2021-03-04"])
    for far, dtype in ((2**31 - 1, pl.Date), (2**62, pl.Datetime("ms", "Europe/Paris"))):
        near = (pl.Series([dt.date(2020, 1, 2)]).cast(dtype) if dtype == pl.Date else
                pl.Series([dt.datetime(2020, 1, 2)]).cast(pl.Datetime("ms"))
                .dt.replace_time_zone("Europe/Paris"))
        seen = []
        for extra in ([], [far]):
            col = pl.concat([near, pl.Series(extra, dtype=pl.Int64).cast(
                pl.Int32 if dtype == pl.Date else pl.Int64).cast(dtype)]).alias("d")
            frame = pl.DataFrame({"u": range(len(col)), "d": col, "v": [1.0] * len(col)})
            cur = tabdp.Curator(seed=1, budget=10.0)
            cur.add("x", frame, unit="u")
            s = cur.author_session("x")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t = s.sum("v", by="d", keys=keys, mechanism=Gaussian(sigma=1.0), nulls="drop",
                          negatives="zero")
            seen.append((t.columns, t.dtypes, t["d"].to_list(), t["v"].to_list()))
        assert seen[0] == seen[1]  # the same seed: the far record is outside, as on D
    assert seen[0][2] == ["2020-01-02", "2021-03-04"]


def test_spark_alias_folder_is_private_and_named_by_number(tmp_path: Path) -> None:
    """Held: a Spark alias is a hard link named by a number in a 0700 folder of its own.

    No part of the server's path is in its name.
    """
    odd = tmp_path / os.fsdecode(b"st\xe9=1")
    odd.mkdir()
    (odd / "secret-name.parquet").write_bytes(b"x")
    alias = declared._utf8_alias(odd / "secret-name.parquet")
    assert alias.name.split(".")[0].isdigit() and "secret" not in str(alias)
    assert (alias.parent.stat().st_mode & 0o777) == 0o700
    assert alias.stat().st_ino == (odd / "secret-name.parquet").stat().st_ino
