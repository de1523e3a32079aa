"""Python author sessions charged to the curator's lifetime ledger, on the curator's unit.

``tabdp.Curator.add(..., unit=..., ledger=...)``: every author session on the dataset is
charged to the ledger (repeated sessions cannot average the noise away), and the unit is the
curator's (docs/privacy-semantics.md, "Lifetime budgets across author runs").
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp.exceptions import InvalidParameterError, LedgerError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _curator import R15_SPEC, run_cli, warn_from_another_thread, write_curator  # noqa: E402

pytest.importorskip("deltalake")

COUNTIES = ["c1", "c2", "c3"]
KEYS = tabdp.KeySet.from_dict(county=COUNTIES)


def _firms(extra: bool = False) -> pl.DataFrame:
    """30 firms with 1 to 3 rows each (unit = firm), one county each."""
    ids = np.repeat(np.arange(30, dtype=np.int64), 1 + np.arange(30) % 3)
    df = pl.DataFrame({"firm": ids, "county": np.array(COUNTIES)[ids % 3],
                       "payroll": np.linspace(1.0, 50.0, len(ids))})
    if extra:
        df = pl.concat([df, pl.DataFrame({"firm": [10**6], "county": ["c2"],
                                          "payroll": [7.0]})])
    return df


def _curator(tmp_path, *, extra: bool = False, seed: int = 1, **kw) -> tabdp.Curator:
    led = tmp_path / "ledger"
    if not led.exists():
        tabdp.Ledger.create(led, series="firms", lifetime_budget=1.0).close()
    cur = tabdp.Curator(seed=seed, **kw)
    cur.add("firms", _firms(extra), unit="firm", ledger=led)
    return cur


def _count(author: tabdp.AuthorSession) -> pl.DataFrame:
    return author.count(by="county", keys=KEYS, mechanism=tabdp.mechanisms.Gaussian(1.0),
                        max_rows=1)


def test_repeated_author_sessions_are_charged_across_sessions(tmp_path):
    firms = _firms()
    n_firms = firms["firm"].n_unique()
    rho = []
    outs = []
    for i in range(3):
        cur = _curator(tmp_path, seed=i + 1)   # a fresh curator process each time
        author = cur.author_session("firms", name=f"a{i}")
        outs.append(_count(author))
        per = cur.report(author.name).per_record
        rho.append(per)
        assert author.summary()["session"]["lifetime"]["releases_before"] == i
        cur.close(author.name)
    # unit = firm: one row per firm; 0.5 a session (a count, sigma 1)
    assert rho[0].height == n_firms and rho[0]["rho"].to_list() == [0.5] * n_firms
    assert rho[1]["rho_lifetime"].to_list() == [1.0] * n_firms
    # the third session: every firm at its lifetime budget, left out
    assert float(rho[2]["rho"].sum()) == 0.0
    assert outs[0]["count"].min() > 4 and outs[2]["count"].abs().max() < 6
    with tabdp.Ledger.open(tmp_path / "ledger") as led:
        assert led.releases == 3  # the third release admitted no unit, recorded all the same
        assert led.state()["rho"].to_list() == pytest.approx([1.0] * n_firms, rel=1e-12)


def test_two_sessions_at_once_the_second_refused_before_reading(tmp_path):
    cur = _curator(tmp_path)
    first = cur.author_session("firms", name="first")
    with pytest.raises(LedgerError) as info:
        cur.author_session("firms", name="second")
    assert info.value.busy
    assert str(tmp_path) not in str(info.value) and "'firms'" in str(info.value)
    assert "second" not in cur.sessions
    _count(first)
    cur.close("first")
    with pytest.raises(InvalidParameterError, match="closed by the curator"):
        _count(first)
    second = cur.author_session("firms", name="second")  # the lock is free again
    assert second.summary()["session"]["lifetime"]["releases_before"] == 1
    cur.close("second")


def test_neighbouring_datasets_look_alike_across_sessions(tmp_path):
    seen = []
    for extra in (False, True):
        folder = tmp_path / str(extra)
        folder.mkdir()
        runs = []
        for i in range(3):
            cur = _curator(folder, extra=extra, seed=10 + i)
            author = cur.author_session("firms", name=f"a{i}")
            out = _count(author)
            runs.append((out.drop("count", "count_lower", "count_upper").to_dicts(), out.columns,
                         author.summary()["session"]["lifetime"], repr(author)))
            cur.close(author.name)
        seen.append(runs)
    assert seen[0] == seen[1]


def test_require_ledger_and_ledger_needs_a_unit(tmp_path):
    cur = tabdp.Curator(require_ledger=True)
    cur.add("plain", _firms(), unit="firm")
    with pytest.raises(InvalidParameterError, match="has no lifetime ledger"):
        cur.author_session("plain")
    assert cur.sessions == []
    with pytest.raises(InvalidParameterError, match="no unit"):
        tabdp.Curator().add("x", _firms(), ledger=tmp_path / "ledger")
    with pytest.raises(InvalidParameterError, match="require_ledger"):
        tabdp.Curator(require_ledger="yes")  # type: ignore[arg-type]


def test_a_missing_ledger_is_refused_without_its_path(tmp_path):
    cur = tabdp.Curator()
    cur.add("firms", _firms(), unit="firm", ledger=tmp_path / "nowhere")
    with pytest.raises(LedgerError, match="cannot be used") as info:
        cur.author_session("firms")
    assert str(tmp_path) not in str(info.value)
    assert str(tmp_path) in str(info.value.__cause__)  # the curator's details, chained


def test_the_unit_is_the_curators(tmp_path):
    cur = tabdp.Curator(seed=1)
    cur.add("firms", _firms(), unit="firm")
    author = cur.author_session("firms")
    _count(author)
    per = cur.report(author.name).per_record
    assert "firm" in per.columns and per.height == 30 < _firms().height


def test_from_file_carries_unit_ledger_and_policy(tmp_path):
    _firms().write_parquet(tmp_path / "firms.parquet")
    tabdp.Ledger.create(tmp_path / "ledger", series="firms", lifetime_budget=1.0).close()
    (tmp_path / "curator.toml").write_text(
        '[datasets.firms]\npath = "firms.parquet"\nunit = "firm"\nledger = "ledger"\n'
        'schema = { firm = "Int64", county = "String", payroll = "Float64" }\n'
        '[policy]\nrequire_ledger = true\n')
    cur = tabdp.Curator.from_file(tmp_path / "curator.toml")
    assert cur.require_ledger
    author = cur.author_session("firms", seed=1)
    _count(author)
    assert cur.report(author.name).per_record["rho_lifetime"].to_list() == [0.5] * 30
    cur.close(author.name)
    with tabdp.Ledger.open(tmp_path / "ledger") as led:
        assert led.releases == 1


def test_a_coarser_unit_does_not_bound_each_rows_loss_for_signed_measures():
    """docs/privacy-semantics.md: rows of a signed measure cancel inside their unit.

    Why the curator must fix the unit when the dataset has one (and why the docs do not say
    that an author's coarser grouping strengthens the per-row guarantee).
    """
    df = pl.DataFrame({"firm": [1, 1, 2], "c": ["a", "a", "a"], "x": [100.0, -100.0, 5.0]})
    keys = tabdp.KeySet.from_dict(c=["a"])
    losses = {}
    for unit in ("firm", None):
        s = tabdp.Session(unit=unit, seed=1)
        df.dp.sum("x", by="c", keys=keys, session=s, mechanism=tabdp.mechanisms.Gaussian(10.0),
                  negatives="allow", nulls="zero")
        losses[unit] = s.report().per_record["rho"].to_list()
    assert losses["firm"] == [0.0, 0.125]          # firm 1: +100 and -100 cancel
    assert losses[None] == [50.0, 50.0, 0.125]     # each of its rows: 100^2 / (2 * 10^2)


HIER = Path(tabdp.__file__).resolve().parents[1] / "data" / "hierarchies"


_SPEC = R15_SPEC


def _cli(root: Path, monkeypatch: pytest.MonkeyPatch, command: str) -> tuple[int, str, str]:
    monkeypatch.chdir(root)
    return run_cli(root, command)


# origin: review R15
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


# origin: review R16
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


ANCHOR_TEXT = ("the lifetime ledger of dataset 'firms': its anchor (the record of its last "
               "release kept next to it) was missing or replaced, and was brought up to date; "
               "the details are the curator's.\nHint: the curator checks the dataset's ledger "
               "(tabdp ledger verify).")


def _author_warnings(cur: tabdp.Curator, name: str) -> list[str]:
    import warnings

    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        cur.author_session("firms", name=name)
        cur.close(name)
    return [str(w.message) for w in got]


# origin: stop 64 (the author's anchor warning was made of every PrivacyWarning recorded while
# the ledger opened, process-wide: another thread's, perhaps about its data, became one)
def test_another_threads_privacy_warning_never_becomes_the_authors_anchor_warning(
        tmp_path, monkeypatch):
    cur = _curator(tmp_path)
    warn_from_another_thread(monkeypatch, "elsewhere")  # while the ledger opens
    got = _author_warnings(cur, "a")  # an intact ledger with its anchor: no anchor warning
    assert not any("anchor" in m for m in got) and "elsewhere" in got
    monkeypatch.undo()
    (tmp_path / ".ledger.head.json").unlink()  # the true case: warned as before
    got = _author_warnings(cur, "b")
    assert got.count(ANCHOR_TEXT) == 1 and str(tmp_path) not in "".join(got)
    assert (tmp_path / ".ledger.head.json").exists()


# origin: stop 65 (an author's open that failed after the ledger's anchor was written lost the
# anchor notice: the author's warning and the curator's details alike)
def test_the_anchor_notice_is_kept_when_the_open_then_fails(tmp_path, monkeypatch):
    import warnings

    from tabdp.privacy import lifetime

    cur = _curator(tmp_path)
    (tmp_path / ".ledger.head.json").unlink()  # a series without releases: written at open

    def rollback(cls, root, entries):  # the open fails after the anchor was written
        raise LedgerError(f"the ledger {root} could not be rolled back")

    monkeypatch.setattr(lifetime.Ledger, "_rollback", classmethod(rollback))
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        with pytest.raises(LedgerError, match="dataset 'firms'") as info:
            cur.author_session("firms", name="a")
    said = [str(w.message) for w in got]
    assert said.count(ANCHOR_TEXT) == 1, said  # the author's: the dataset named only
    assert str(tmp_path) not in "".join(said) + str(info.value)
    assert (tmp_path / ".ledger.head.json").exists()
    # the curator's: the ledger's own notice, with its path, on the chained cause
    notes = getattr(info.value.__cause__, "__notes__", [])
    assert any("had no anchor" in n and str(tmp_path) in n for n in notes), notes
