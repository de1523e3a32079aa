"""R13: a query author with an ``AuthorSession`` attacks the dataset's lifetime ledger.

``tabdp.Curator.add(..., unit=..., ledger=...)`` charges every author session to the ledger
(docs/privacy-semantics.md, "Repeated runs and the privacy unit: what the curator fixes").
Each test is one attack; the gaps found are fixed (or marked ``xfail(strict=True)``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp.exceptions import InvalidParameterError, LedgerError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_curator_ledger import KEYS, _count, _firms  # noqa: E402

pytest.importorskip("deltalake")

SCHEMA = {"firm": "Int64", "county": "String", "payroll": "Float64"}


def _new_ledger(path: Path) -> Path:
    tabdp.Ledger.create(path, series="firms", lifetime_budget=1.0).close()
    return path


def _state(path: Path) -> tuple[int, float]:
    with tabdp.Ledger.open(path) as led:
        st = led.state()
        return led.releases, float(st["rho"].max()) if st.height else 0.0


# -- two names over the same data --------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["same", "slash", "dots", "symlink", "file_in_folder"])
@pytest.mark.parametrize("second", ["no ledger", "other ledger", "other unit"])
def test_the_same_path_twice_needs_the_same_unit_and_ledger(tmp_path, spelling, second):
    """Two names over one path, another unit or ledger: refused by ``Curator.add``.

    The configuration file refused it; ``Curator.add`` did not, so the server could hand the
    author a session on the name with the weaker accounting.
    """
    folder = tmp_path / "data" / "firms"
    folder.mkdir(parents=True)
    _firms().write_parquet(folder / "p.parquet")
    (tmp_path / "alias").symlink_to(folder)
    other = {"same": folder, "slash": f"{folder}/", "dots": folder / ".." / "firms",
             "symlink": tmp_path / "alias", "file_in_folder": folder / "p.parquet"}[spelling]
    led = _new_ledger(tmp_path / "ledger")
    cur = tabdp.Curator(seed=1)
    cur.add("firms", folder, schema=SCHEMA, unit="firm", ledger=led)
    kw: dict[str, object] = {
        "no ledger": {"unit": "firm"},
        "other ledger": {"unit": "firm", "ledger": _new_ledger(tmp_path / "ledger2")},
        "other unit": {"unit": "county", "ledger": led}}[second]
    with pytest.raises(InvalidParameterError, match="the same data as dataset 'firms'") as err:
        cur.add("firms2", other, schema=SCHEMA, **kw)   # type: ignore[arg-type]
    assert "firms2" not in cur.datasets
    assert str(err.value).count("\n") == 1   # message and hint


def test_the_same_frame_twice_needs_the_same_unit_and_ledger(tmp_path):
    df = _firms()
    cur = tabdp.Curator(seed=1)
    cur.add("firms", df, unit="firm", ledger=_new_ledger(tmp_path / "ledger"))
    with pytest.raises(InvalidParameterError, match="the same data as dataset 'firms'"):
        cur.add("firms_raw", df)
    # the same unit and ledger: allowed (a second name is then harmless)
    cur.add("firms_again", df, unit="firm", ledger=tmp_path / "ledger")


@pytest.mark.parametrize("where", ["inside", "is", "contains"])
def test_a_ledger_overlapping_a_dataset_folder_is_refused(tmp_path, where):
    """A ledger inside a dataset folder (or around it) is refused by ``Curator.add``.

    A folder dataset is read whole: a ledger inside it would be read as data (its per-unit
    losses), and a dataset inside the ledger likewise; the configuration file refuses both.
    """
    folder = tmp_path / "data"
    folder.mkdir()
    _firms().write_parquet(folder / "p.parquet")
    led = {"inside": folder / "ledger", "is": folder, "contains": tmp_path}[where]
    cur = tabdp.Curator(seed=1)
    with pytest.raises(InvalidParameterError, match="overlaps dataset"):
        cur.add("firms", folder, schema=SCHEMA, unit="firm", ledger=led)
    assert cur.datasets == []


# -- repeated sessions, errors, closing --------------------------------------------------------


def test_a_session_that_keeps_releasing_after_errors_is_charged_for_each_release(tmp_path):
    led = _new_ledger(tmp_path / "ledger")
    cur = tabdp.Curator(seed=3)
    cur.add("firms", _firms(), unit="firm", ledger=led)
    author = cur.author_session("firms", name="a")
    _count(author)
    for bad in ({"by": "nope"}, {"max_rows": 0}):
        with pytest.raises(InvalidParameterError):
            author.count(**{"by": "county", "keys": KEYS,   # type: ignore[arg-type]
                            "mechanism": tabdp.mechanisms.Gaussian(1.0), "max_rows": 1, **bad})
    _count(author)
    _count(author)   # the third: every unit is at its lifetime budget, left out
    cur.close("a")
    assert _state(led) == (3, 1.0)
    # a new session (a new server process) sees the spent units: noise only
    cur2 = tabdp.Curator(seed=4)
    cur2.add("firms", _firms(), unit="firm", ledger=led)
    out = _count(cur2.author_session("firms", name="b"))
    assert out["count"].abs().max() < 6
    assert (cur2.report("b").per_record["rho"] == 0).all()


def test_a_closed_session_releases_nothing_and_frees_the_ledger(tmp_path):
    led = _new_ledger(tmp_path / "ledger")
    cur = tabdp.Curator(seed=1)
    cur.add("firms", _firms(), unit="firm", ledger=led)
    author = cur.author_session("firms", name="a")
    with pytest.raises(LedgerError, match="in use by another run"):
        cur.author_session("firms", name="a2")    # same process, same curator: refused
    other = tabdp.Curator(seed=2)
    other.add("firms", _firms(), unit="firm", ledger=led)
    with pytest.raises(LedgerError, match="in use by another run") as err:
        other.author_session("firms", name="b")   # another curator object: refused
    assert str(tmp_path) not in str(err.value)
    cur.close("a")
    for call in (lambda: _count(author),
                 lambda: author.sum("payroll", by="county", keys=KEYS, nulls="drop",
                                    mechanism=tabdp.mechanisms.Gaussian(30.0))):
        with pytest.raises(InvalidParameterError, match="closed by the curator"):
            call()
    assert _state(led) == (0, 0.0)
    _count(other.author_session("firms", name="b"))   # the name refused before is free
    other.close("b")
    assert _state(led) == (1, 0.5)


# -- neighbouring datasets, ledgers in several states ------------------------------------------


@pytest.mark.parametrize("state", ["at_budget", "absent", "half"])
def test_one_more_firm_in_any_ledger_state_looks_alike(tmp_path, state):
    """One firm more, at its lifetime budget, entering, or half-spent: the same but the noise.

    The neighbour has one firm more; the ledger holds it at its lifetime budget, not at all
    (entering the data), or half-spent. What the author sees, but the noise, is the same.
    """
    seen = []
    for extra in (False, True):
        led = _new_ledger(tmp_path / f"ledger{int(extra)}")
        with tabdp.Ledger.open(led, autocommit=False) as ledger:
            rho = {"at_budget": 1.0, "absent": 0.0, "half": 0.5}[state]
            if extra and rho:
                ledger.charge(pl.Series([10**6]), {"rho": np.array([rho])}, {})
            ledger.commit(label="2025")
        runs = []
        for i in range(3):
            cur = tabdp.Curator(seed=20 + i)
            cur.add("firms", _firms(extra), unit="firm", ledger=led)
            author = cur.author_session("firms", name=f"s{i}")
            out = _count(author)
            runs.append((out.drop("count", strict=False).columns, out["county"].to_list(),
                         json.dumps(author.summary(), sort_keys=True, default=str),
                         repr(author)))
            cur.close(author.name)
        seen.append(runs)
    assert seen[0] == seen[1]


# -- concurrent releases in one session --------------------------------------------------------


def test_concurrent_releases_in_one_session_pass_the_filter_one_at_a_time(tmp_path):
    """A server that runs an author's calls in threads: releases of one session at once.

    Each release reads the units' losses so far, filters, then charges and commits the
    lifetime ledger. Two at once both passed the filter on the same losses (each unit charged
    past its lifetime budget) and committed over each other: the ledger no longer verified
    (every later run on the dataset refused) or recorded 1.5 against a budget of 1.
    """
    import threading

    for trial in range(3):
        led = _new_ledger(tmp_path / f"ledger{trial}")
        cur = tabdp.Curator()
        cur.add("firms", _firms(), unit="firm", ledger=led)
        author = cur.author_session("firms", name="a")
        _count(author)                      # every unit at 0.5 of its 1.0
        start = threading.Barrier(4)
        got: list[pl.DataFrame] = []
        errors: list[BaseException] = []

        def release(author: tabdp.AuthorSession = author, start: threading.Barrier = start,
                    got: list[pl.DataFrame] = got, errors: list[BaseException] = errors
                    ) -> None:
            start.wait()
            try:
                got.append(_count(author))
            except BaseException as err:    # noqa: BLE001 - collected for the assertion
                errors.append(err)

        threads = [threading.Thread(target=release) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [] and len(got) == 4
        cur.close("a")
        assert _state(led) == (5, 1.0)      # verifies; no unit past its lifetime budget
        per = cur.report("a").per_record
        assert per["rho"].max() == 1.0
