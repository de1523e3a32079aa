"""Review R3 (2026-11-26): attacks on streaming sessions, the streaming runner and key sets.

Each test states a claim and tries to break it. Tests marked ``xfail(strict=True)`` are attacks
that still succeed (the fix is described in the reason); the others are fixed regressions.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import polars as pl
import pytest

import tabdp
from tabdp import cli
from tabdp import mechanisms as mech
from tabdp.exceptions import ColumnTypeError

# Two distinct public Int64 keys that are one Float64 (2**53 + 1 rounds to 2**53).
KEYS_53 = tabdp.KeySet.from_dict(k=[2**53, 2**53 + 1])
KEYS_1 = tabdp.KeySet.from_dict(k=[1.0])


def _frame(first_key: float) -> pl.DataFrame:
    return pl.DataFrame({"k": [first_key, 1.0], "x": [1.0, 2.0]})


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("mode", ["curator", "author"])
def test_key_set_colliding_after_conversion_is_refused_without_data(streaming: bool,
                                                                    mode: str) -> None:
    """A key set whose distinct keys collide in the comparison dtype cannot place a row twice.

    Float data against Int64 keys is compared in Float64, where 2**53 and 2**53 + 1 are one
    value: the left join with the key set doubled every row whose key is 2**53. Without the fix
    the in-memory ledger charged such a row once (0.5) while it was counted in two cells (true
    loss 1.0: an under-report, a budget of 0.6 admitted it), and the streaming session counted
    the row twice in its rows read, so the *next* release was refused exactly when some record
    had key 2**53 (a noiseless membership oracle in author mode). The key set alone decides now:
    it is refused, on every dataset, before any data is read.
    """
    for first in (2.0**53, 5.0):  # neighbouring datasets: with and without the probed key
        df = _frame(first)
        s = tabdp.Session(seed=1, streaming=streaming, mode=mode,
                          data=df if mode == "author" else None)
        with pytest.raises(ColumnTypeError, match="two keys") as err:
            df.dp.count(by="k", keys=KEYS_53, mechanism=mech.Gaussian(1.0),
                        session=s)
        assert "9007199254740992" not in str(err.value)
        assert s.records == []
        # the session stays usable, and the next release does not depend on the probed key
        out = df.dp.count(by="k", keys=KEYS_1, mechanism=mech.Gaussian(1.0), session=s)
        assert out.columns[0] == "k" and out.height == 1


@pytest.mark.spark
def test_spark_key_set_colliding_after_conversion_is_refused(spark: object) -> None:
    """The Spark engine refuses the same key set (its cast to Float64 merges two keys too)."""
    for first in (2.0**53, 5.0):
        sdf = spark.createDataFrame(_frame(first).to_pandas())  # type: ignore[attr-defined]
        s = tabdp.Session(seed=1)
        with pytest.raises(ColumnTypeError, match="two keys"):
            sdf.dp.count(by="k", keys=KEYS_53, mechanism=mech.Gaussian(1.0), session=s)
        assert s.records == []


# -- tabdp run in row mode: streaming and in-memory, on neighbouring inputs ----------------------
_ROW_SPEC = """
[release]
name = "nb"
delta = 1e-9
[input]
dataset = "d"
mode = "author"
nulls = "zero"
negatives = "zero"
nonfinite = "zero"
bounds = {{ payroll = [0, 1e16] }}
[hierarchies.geo]
file = "geography.csv"
levels = ["state", "county"]
[budget]
rho = 0.6
[randomness]
seed = 3
[[tables]]
name = "pay"
measures = ["payroll"]
by = ["county"]
mechanism = {{ family = "gaussian", sigma = 1e6 }}
[[tables.rollups]]
by = ["state"]
direct = true
[[tables]]
name = "n"
kind = "count"
by = ["county"]
mechanism = {{ family = "gaussian", sigma = 1.0 }}
"""


def _row_run(folder: Path, df: pl.DataFrame, streaming: bool,
             monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    from tabdp.release import _tables  # where the run creates its Session

    folder.mkdir()
    df.write_parquet(folder / "d.parquet")
    hier = Path(tabdp.__file__).resolve().parents[1] / "data" / "hierarchies"
    (folder / "s.toml").write_text(_ROW_SPEC.format(), encoding="utf-8")
    # author mode: the curator declares the dataset, the public folder and the output root
    (folder / "curator.toml").write_text(
        f'[datasets.d]\npath = "d.parquet"\n[public]\nfolders = ["{hier.as_posix()}"]\n'
        '[output]\nroot = "out"\n', encoding="utf-8")
    with monkeypatch.context() as mp:
        seen: list[bool] = []
        real = _tables.Session

        def session(*a: object, **kw: object) -> object:
            seen.append(bool(kw["streaming"]))  # the runner's own (public) decision
            return real(*a, **(kw | {"streaming": streaming}))  # type: ignore[arg-type]
        mp.setattr(_tables, "Session", session)
        code = cli.main(["run", str(folder / "s.toml"), "--quiet", "--test-seed",
                         "--curator", str(folder / "curator.toml")],
                        stdout=io.StringIO(), stderr=io.StringIO())
        assert seen == [True]
    pub, conf = folder / "out" / "nb" / "public", folder / "out" / "nb" / "confidential"
    manifest = json.loads((pub / "manifest.json").read_text())
    manifest.pop("created")
    return {
        "code": code,
        "files": sorted(p.name for p in pub.iterdir()),
        "conf_files": sorted(p.name for p in conf.iterdir()),
        "summary": json.loads((pub / "summary.json").read_text()),
        "manifest": manifest,
        "tables": {p.name: pl.read_parquet(p) for p in sorted(pub.glob("*.parquet"))},
        "per_record": pl.read_parquet(conf / "per_record_losses.parquet"),
        "confidential": json.loads((conf / "confidential.json").read_text()),
    }


def test_row_mode_run_streams_like_in_memory_on_neighbouring_inputs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row-mode `tabdp run`: the streaming and the in-memory ledger write the same folders.

    Neighbouring inputs (with and without one record whose payroll is 1e15, so the budget
    leaves it out of the sums) give the same exit code, file names, summary, manifest (but its
    timestamp) and table schemas; for one input and seed both ledgers write identical tables,
    per-record losses and confidential counts.
    """
    from tabdp.datasets.synth import generate_establishments

    full = generate_establishments(300, seed=5).drop("state").with_columns(
        pl.when(pl.int_range(pl.len()) == 7).then(1e15).otherwise(pl.col("payroll"))
        .alias("payroll"))
    inputs = {"full": full, "minus": full.filter(pl.int_range(pl.len()) != 7)}
    runs = {(k, st): _row_run(tmp_path / f"{k}-{st}", df, st, monkeypatch)
            for k, df in inputs.items() for st in (True, False)}
    for k in inputs:
        a, b = runs[(k, True)], runs[(k, False)]
        assert a["code"] == b["code"] == 0
        for part in ("files", "conf_files", "summary", "manifest", "confidential"):
            assert a[part] == b[part], part
        for name, t in a["tables"].items():  # type: ignore[attr-defined]
            assert t.equals(b["tables"][name]), name  # type: ignore[index]
        assert a["per_record"].equals(b["per_record"])  # type: ignore[attr-defined]
    for st in (True, False):
        a, b = runs[("full", st)], runs[("minus", st)]
        for part in ("code", "files", "conf_files", "summary", "manifest"):
            assert a[part] == b[part], part
        assert {n: t.schema for n, t in a["tables"].items()} == {  # type: ignore[attr-defined]
            n: t.schema for n, t in b["tables"].items()}  # type: ignore[attr-defined]
    # the probed record was left out of the sums by the budget (the test exercises the filter)
    per = runs[("full", True)]["per_record"].sort("row")  # type: ignore[attr-defined]
    assert per["rho_pay"][7] == 0.0 and per["rho_pay"].max() > 0.0
    assert per["rho"].max() <= 0.6


def test_streaming_confidential_counts_with_max_cells_equal_in_memory() -> None:
    """The confidential counts of a streaming release are the in-memory ledger's, key for key.

    With ``max_cells=`` in row mode the in-memory release reports
    ``unit_cells_dropped_by_max_cells: 0``; the streaming release left the key out.
    """
    df = pl.DataFrame({"c": ["a", "b", "z"], "x": [1.0, 2.0, 3.0]})
    keys = tabdp.KeySet.from_dict(c=["a", "b"])
    got = []
    for streaming in (True, False):
        s = tabdp.Session(seed=2, streaming=streaming, budget=3.0)
        df.lazy().dp.sum("x", by="c", keys=keys, mechanism=mech.Gaussian(2.0), max_cells=2,
                         session=s)
        got.append(s.report().confidential_summary()["queries"])
    assert got[0] == got[1]
    assert got[0][0]["unit_cells_dropped_by_max_cells"] == 0


@pytest.mark.parametrize("streaming", [False, True])
def test_a_column_named_like_the_row_ids_is_refused_in_row_mode(streaming: bool) -> None:
    """Row ids are tabdp's own: a frame's ``__tabdp_row`` column is never taken as the ids.

    Without the fix a streaming session used the column as its row ids (the per-record report
    listed row 5 twice, with two different losses) and the in-memory ledger raised a raw Polars
    ``DuplicateError``. Both refuse it now from the schema alone, before any data is read.
    """
    df = pl.DataFrame({"__tabdp_row": [5, 5, 9], "c": ["a", "a", "b"], "x": [1.0, 2.0, 3.0]})
    s = tabdp.Session(seed=1, streaming=streaming)
    with pytest.raises(tabdp.exceptions.InvalidParameterError, match="reserved"):
        df.lazy().dp.sum("x", by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]),
                         mechanism=mech.Gaussian(1.0), session=s)
    assert s.records == []
