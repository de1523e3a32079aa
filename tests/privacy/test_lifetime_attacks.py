"""Reviewer R11: attacks on the lifetime ledger's privacy and integrity claims (issue 31).

Each test is an experiment: neighbouring release series compared file by file, units that try
to pass their lifetime budget, and ledgers altered in ways the tamper tests of
``test_lifetime.py`` do not cover. Findings not fixed yet are ``xfail(strict=True)`` with the
reason.
"""

from __future__ import annotations

import io
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp import mechanisms as mech
from tabdp.cli import main as cli_main
from tabdp.exceptions import InvalidParameterError, LedgerError, TabdpError

pytest.importorskip("deltalake")

ROOT = Path(__file__).resolve().parents[2]
KEYS = tabdp.KeySet.from_dict(c=["a", "b"])
BASE = pl.DataFrame({"id": [1, 2, 3], "c": ["a", "b", "a"]})


def _count(df: pl.DataFrame, s: tabdp.Session) -> pl.DataFrame:
    out: pl.DataFrame = df.dp.count(by=["c"], keys=KEYS, session=s,
                                    mechanism=mech.Gaussian(1.0))  # 0.5 per unit
    return out


# -- neighbouring series through the release workflow ----------------------------------------
@pytest.mark.slow  # eight yearly runs through the spec (about 10-20 s); CI runs it
def test_neighbouring_spec_series_public_files_equal_except_noise_and_time(tmp_path):
    """D and D' (unit 9999 removed from every year), eight `tabdp run`s each, same seeds.

    Every public file name, summary.json (its public ``lifetime`` entry included) and the
    manifest (but its creation time) are identical every year; the tables are identical bit
    for bit once the unit is at its lifetime budget (2027 on). Nothing public depends on the
    ledger except through the filter.
    """
    sys.path.insert(0, str(ROOT / "tests" / "release"))
    import test_ledger_spec as T

    from tabdp.release.runner import run_release
    from tabdp.release.spec import load_spec

    orig = T._sample
    pubs: dict[str, list[dict[str, bytes]]] = {}
    try:
        for name, drop in (("D", False), ("Dp", True)):
            d = tmp_path / name
            d.mkdir()
            T._sample = ((lambda y, n=90: orig(y, n).filter(pl.col("estab") != 9999))
                         if drop else orig)
            pubs[name] = []
            for year in range(2021, 2029):
                r = run_release(load_spec(T._spec(d, year)), test_seed=True)
                pubs[name].append({p.name: p.read_bytes() for p in sorted(r.public.iterdir())})
    finally:
        T._sample = orig
    for i, (a, b) in enumerate(zip(pubs["D"], pubs["Dp"], strict=True)):
        assert list(a) == list(b)
        assert a["summary.json"] == b["summary.json"]
        ma, mb = json.loads(a["manifest.json"]), json.loads(b["manifest.json"])
        ma.pop("created"), mb.pop("created")
        assert ma == mb
        if i >= 6:  # the unit is at its budget: left out of everything
            assert a == {**b, "manifest.json": a["manifest.json"]}
    life = json.loads(pubs["D"][7]["summary.json"])["lifetime"]
    # from the spec and the ledger's public entries only (release names and public curves):
    # identical on D and D' above, nothing from the per-unit state
    assert "releases_before" not in life and life["series"] == "test-series"
    assert life["guarantee_in_words"][0].startswith(
        "Over the releases of the series 'test-series' (this one, 'series_2028', included)")
    assert life["releases"] == [f"series_{y}" for y in range(2021, 2029)]
    assert life["guarantee_in_words"][1].startswith(
        "Over the 8 releases 'series_2021', 'series_2022', 'series_2023', …, 'series_2027' "
        "and 'series_2028' (this one) of series 'test-series', a unit of size 1 in each of "
        "them has lost at most rho = ")


# -- the filter: ids ---------------------------------------------------------------------------
def test_uint64_ids_are_refused_by_dtype_not_by_value(tmp_path):
    """Finding R11-3 (fixed): UInt64 unit ids with a ledger.

    Ids >= 2**63 failed Polars' cast to Int64 with a non-tabdp error quoting the unit
    id, and only when such an id was present (the error
    depended on one record). Now UInt64 ids are refused by their dtype, before any data is
    read, with the same error whatever the values.
    """
    errors = []
    for big in (3, 2**63 + 5):
        df = pl.DataFrame({"id": pl.Series([1, 2, big], dtype=pl.UInt64), "c": ["a", "b", "a"]})
        with tabdp.Ledger.open(tmp_path / f"l{big}", series="s", lifetime_budget=1.0,
                               create=True) as led:
            s = tabdp.Session(unit="id", seed=1, ledger=led)
            with pytest.raises(InvalidParameterError) as info:
                _count(df, s)
            errors.append(str(info.value))
            assert led.releases == 0
    assert errors[0] == errors[1].replace(str(tmp_path / f"l{2**63 + 5}"),
                                          str(tmp_path / "l3"))
    assert str(2**63 + 5) not in errors[1] and "UInt64" in errors[1]


def test_text_and_integer_ids_cannot_share_a_series(tmp_path):
    """'1' and 1 are never the same unit, nor silently two: the second kind is refused."""
    with tabdp.Ledger.open(tmp_path / "l", series="s", lifetime_budget=1.0, create=True) as led:
        _count(BASE, tabdp.Session(unit="id", seed=1, ledger=led))
    text = BASE.with_columns(pl.col("id").cast(pl.String))
    with tabdp.Ledger.open(tmp_path / "l") as led, pytest.raises(InvalidParameterError,
                                                                 match="keys units by Int64"):
        _count(text, tabdp.Session(unit="id", seed=2, ledger=led))


def test_a_unit_never_passes_its_budget_by_rounding(tmp_path):
    """0.1 + 0.1 + 0.1 > 0.3 in doubles: the third 0.1 is refused (never a total above B)."""
    df = pl.DataFrame({"id": [1], "c": ["a"]})
    sigma = float(np.sqrt(1 / (2 * 0.1)))  # rho = 1/(2 sigma^2) = 0.1 (to rounding)
    path = tmp_path / "l"
    for year in range(6):
        with tabdp.Ledger.open(path, series="s", lifetime_budget=0.3, create=True) as led:
            s = tabdp.Session(unit="id", seed=year, ledger=led)
            df.dp.count(by=["c"], keys=KEYS, session=s, mechanism=mech.Gaussian(sigma))
    with tabdp.Ledger.open(path) as led:
        rho = float(led.state()["rho"][0])
        hist = led.history()
    assert rho <= 0.3
    assert rho == float(hist["rho"].sum()) or abs(rho - float(hist["rho"].sum())) < 1e-15


def test_curve_lifetime_budget_charges_follow_units_not_positions(tmp_path):
    """Shuffled inputs and changing sizes: charges follow units.

    Per-currency lifetime ρ sums to the total ρ unit by unit (a misaligned per-currency
    charge would not).
    """
    curve = {"payroll": {10.0: 50.0, 1e4: 200.0}, "rows": {1: 150.0}}
    path = tmp_path / "l"
    rng = np.random.default_rng(0)
    for year in range(3):
        ids = rng.permutation(np.arange(40, dtype=np.int64))
        df = pl.DataFrame({"id": ids, "c": np.where(ids % 2 == 0, "a", "b"),
                           "payroll": rng.lognormal(3.0, 1.0 + year, 40)})
        with tabdp.Ledger.open(path, series="s", lifetime_budget=curve, create=True) as led:
            s = tabdp.Session(unit="id", seed=year, ledger=led)
            df.dp.sum("payroll", by="c", keys=KEYS, mechanism=mech.Gaussian(40.0), session=s)
            df.dp.count(by="c", keys=KEYS, mechanism=mech.Gaussian(2.0), session=s)
    with tabdp.Ledger.open(path) as led:
        st = led.state()
    np.testing.assert_allclose(st["rho"], st["rho@payroll"] + st["rho@rows"], rtol=1e-12)
    np.testing.assert_allclose(st["rho@rows"], 3 * 0.125, rtol=1e-12)


# -- under-charging -----------------------------------------------------------------------------
def test_closing_with_uncommitted_charges_warns(tmp_path):
    """Finding R11-2 (fixed): closing with uncommitted charges.

    With ``autocommit=False`` a caller who closes the ledger without
    ``Session.commit_ledger`` has the tables in hand and the ledger uncharged; three such runs
    released 1.5 against a lifetime budget of 1.0, silently. Closing now warns (the release
    workflow, which closes without committing only when nothing was published, does not).
    """
    path = tmp_path / "l"
    for i in range(2):
        led = tabdp.Ledger.open(path, series="s", lifetime_budget=1.0, autocommit=False,
                                create=True)
        s = tabdp.Session(unit="id", seed=i, ledger=led)
        _count(BASE, s)
        with pytest.warns(tabdp.exceptions.PrivacyWarning, match="NOT committed"):
            led.close()
    with tabdp.Ledger.open(path) as led:
        assert led.releases == 0  # the warning says so: nothing was charged
    # committed: no warning
    led = tabdp.Ledger.open(path, autocommit=False)
    s = tabdp.Session(unit="id", seed=9, ledger=led)
    _count(BASE, s)
    s.commit_ledger(label="x")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        led.close()


def test_a_vanished_ledger_is_not_a_new_series(tmp_path):
    """Finding R11-1 (fixed): a deleted, moved or unmounted ledger restarted the series at zero.

    ``Ledger.open`` no longer creates by default (``Ledger.create`` / ``tabdp ledger init``
    start a series), so a vanished folder is refused.
    """
    path = tmp_path / "l"
    for i in range(2):
        with tabdp.Ledger.open(path, series="s", lifetime_budget=1.0, create=i == 0) as led:
            _count(BASE, tabdp.Session(unit="id", seed=i, ledger=led))
    import shutil

    shutil.rmtree(path)  # or an unmounted volume, a typo'd path in next year's spec
    with pytest.raises(LedgerError, match="never created implicitly"):
        tabdp.Ledger.open(path, series="s", lifetime_budget=1.0)
    assert not path.exists()
    with pytest.raises(LedgerError, match="already there"):
        tabdp.Ledger.create(tmp_path, series="s", lifetime_budget=1.0)


# -- integrity ------------------------------------------------------------------------------------
def _two_releases(path: Path) -> None:
    for i in range(2):
        with tabdp.Ledger.open(path, series="s", lifetime_budget=5.0, create=True) as led:
            _count(BASE, tabdp.Session(unit="id", seed=i, ledger=led))


def test_a_symlink_inside_the_ledger_is_refused_and_its_target_untouched(tmp_path):
    """Finding R11-4 (fixed): symbolic links inside the ledger.

    A state file replaced by a symlink to a copy elsewhere verified
    (the bytes matched), and every commit chmod-ed whatever a symlink in the ledger pointed
    to (``_private`` followed links). A ledger holding a symlink is refused now.
    """
    path = tmp_path / "l"
    _two_releases(path)
    victim = tmp_path / "victim.txt"
    victim.write_text("x")
    victim.chmod(0o644)
    os.symlink(victim, path / "chain" / ".notes")
    with pytest.raises(LedgerError, match="symbolic link"):
        tabdp.Ledger.open(path)
    assert victim.stat().st_mode & 0o777 == 0o644
    (path / "chain" / ".notes").unlink()
    state = next((path / "state").glob("*.parquet"))
    moved = tmp_path / "elsewhere.parquet"
    state.rename(moved)
    os.symlink(moved, state)
    with pytest.raises(LedgerError, match="symbolic link"):
        tabdp.Ledger.open(path)
    err = io.StringIO()
    assert cli_main(["ledger", "verify", str(path)], stderr=err) == 2
    assert "symbolic link" in err.getvalue()


def test_verify_during_a_run_is_refused_busy_and_the_run_unaffected(tmp_path):
    path = tmp_path / "l"
    _two_releases(path)
    led = tabdp.Ledger.open(path, autocommit=False)
    s = tabdp.Session(unit="id", seed=5, ledger=led)
    _count(BASE, s)
    err = io.StringIO()
    assert cli_main(["ledger", "verify", str(path)], stderr=err) == 2
    assert "in use by another run" in err.getvalue()
    s.commit_ledger(label="y")
    led.close()
    assert cli_main(["ledger", "verify", str(path)], stdout=io.StringIO()) == 0


def test_two_series_cannot_share_a_folder_and_a_loose_ledger_is_refused(tmp_path):
    path = tmp_path / "l"
    _two_releases(path)
    with pytest.raises(LedgerError, match="release series 's', not 't'"):
        tabdp.Ledger.open(path, series="t", lifetime_budget=5.0, create=True)
    path.chmod(0o750)
    with pytest.raises(LedgerError, match="owner-only"):
        tabdp.Ledger.open(path)
    path.chmod(0o700)


def test_a_ledger_reached_through_a_symlink_into_the_public_folder_is_refused(tmp_path):
    pub = tmp_path / "public"
    pub.mkdir()
    real = pub / "hidden"
    _two_releases(real)
    link = tmp_path / "ledger-link"
    os.symlink(real, link)
    with pytest.raises(InvalidParameterError, match="public output folder"):
        tabdp.Ledger.open(link, public=(pub,))


def test_errors_are_tabdp_errors_without_confidential_values(tmp_path):
    """The refusals above carry no per-unit loss or unit id."""
    path = tmp_path / "l"
    _two_releases(path)
    next((path / "state").glob("*.parquet")).write_bytes(b"garbage")
    with pytest.raises(TabdpError) as info:
        tabdp.Ledger.open(path)
    msg = str(info.value)
    assert "does not verify" in msg and "0.5" not in msg and "1.0" not in msg


def test_a_lock_file_replaced_by_a_symlink_is_refused_and_its_target_kept(tmp_path):
    """Finding R11-5 (fixed): a lock file replaced by a symbolic link.

    The lock is taken before the ledger is verified, and followed a symlink:
    ``lock -> some file`` truncated and overwrote that file (open, verify or
    ``tabdp ledger verify``). The lock is opened with O_NOFOLLOW now.
    """
    path = tmp_path / "l"
    _two_releases(path)
    victim = tmp_path / "precious.txt"
    victim.write_text("do not truncate me")
    (path / "lock").unlink()
    os.symlink(victim, path / "lock")
    with pytest.raises(LedgerError, match="symbolic link"):
        tabdp.Ledger.open(path)
    err = io.StringIO()
    assert cli_main(["ledger", "verify", str(path)], stderr=err) == 2
    assert "symbolic link" in err.getvalue()
    assert victim.read_text() == "do not truncate me"


def test_a_huge_unit_changes_nothing_public_across_a_series(tmp_path):
    """A huge unit, present in some years only.

    Its charge alone passes the lifetime budget, so it is
    left out of every table: D and D' give the same tables bit for bit, every year.
    """
    rng = np.random.default_rng(1)
    outs: dict[str, list[pl.DataFrame]] = {"D": [], "Dp": []}
    years = range(4)
    data = [pl.DataFrame({"id": np.arange(30, dtype=np.int64),
                          "c": np.where(np.arange(30) % 2 == 0, "a", "b"),
                          "payroll": rng.lognormal(3.0, 1.0, 30)}) for _ in years]
    for name in outs:
        for y in years:
            df = data[y]
            if name == "D" and y in (0, 2, 3):
                df = pl.concat([df, pl.DataFrame({"id": [777], "c": ["a"], "payroll": [1e9]})])
            with tabdp.Ledger.open(tmp_path / name, series="s", lifetime_budget=4.0,
                                   create=True) as led:
                s = tabdp.Session(unit="id", seed=y, ledger=led)
                outs[name].append(df.dp.sum("payroll", by="c", keys=KEYS, session=s,
                                            mechanism=mech.Gaussian(200.0)))
                if name == "D":
                    pr = s.report().per_record
                    assert 777 not in pr.filter(pl.col("rho") > 0)["id"].to_list()
    for a, b in zip(outs["D"], outs["Dp"], strict=True):
        assert a.equals(b)


def test_an_older_copy_of_the_whole_ledger_is_refused(tmp_path):
    """Finding R11-6 (fixed): an older copy of the whole ledger folder was an intact ledger.

    State, history and the matching chain put back from a backup verified: the releases since
    vanished from every unit's lifetime loss. The anchor kept next to the folder
    (``.l.head.json``: the chain head of the last commit) is not in the copy's chain: refused
    before any data is read (more cases in ``test_ledger_anchor.py``).
    """
    import shutil

    from tabdp.exceptions import LedgerAnchorError

    path = tmp_path / "l"
    _two_releases(path)
    backup = tmp_path / "backup"
    shutil.copytree(path, backup, symlinks=True)
    with tabdp.Ledger.open(path) as led:
        _count(BASE, tabdp.Session(unit="id", seed=7, ledger=led))
    shutil.rmtree(path)
    shutil.copytree(backup, path, symlinks=True)
    with pytest.raises(LedgerAnchorError, match="older copy of the ledger folder"):
        tabdp.Ledger.open(path)
    err = io.StringIO()
    assert cli_main(["ledger", "verify", str(path)], stderr=err) == 2
    assert "older copy of the ledger folder" in err.getvalue()


def test_a_run_killed_after_the_commit_is_charged_not_published(tmp_path, monkeypatch):
    """A run dying between the commit and the move: charged, not published.

    The workflow commits, then moves the outputs into place: dying in between (here right
    after the commit, before the renames) leaves the ledger charged and nothing published
    (over-charging, safe); never the reverse.
    """
    sys.path.insert(0, str(ROOT / "tests" / "release"))
    import test_ledger_spec as T

    from tabdp.release import _ledger
    from tabdp.release.runner import run_release
    from tabdp.release.spec import load_spec

    real = _ledger.commit_release

    def killed(*a: object, **k: object) -> None:
        real(*a, **k)  # type: ignore[arg-type]
        raise SystemExit("killed after the commit")

    monkeypatch.setattr(_ledger, "commit_release", killed)
    with pytest.raises(SystemExit):
        run_release(load_spec(T._spec(tmp_path, 2021)), test_seed=True)
    monkeypatch.undo()
    assert not (tmp_path / "out" / "2021" / "public").exists()
    with tabdp.Ledger.open(tmp_path / "ledger") as led:
        assert led.releases == 1 and led.state()["rho"].max() > 0


def test_the_series_id_type_does_not_depend_on_whether_one_unit_was_charged(tmp_path):
    """Review r83: the id type is pinned by a release's schema, whoever it charged.

    A first release over no rows (text ids) charged nobody and left the series' id type
    unset, so a next release of integer ids went through; the neighbouring series, whose
    first release held one unit, refused it. Both now refuse it alike, and both pin String.
    """
    outcomes = []
    for n in (0, 1):
        path = tmp_path / f"l{n}"
        first = pl.DataFrame({"id": pl.Series(["u1"] * n, dtype=pl.String),
                              "c": pl.Series(["a"] * n, dtype=pl.String)})
        with tabdp.Ledger.create(path, series="s", lifetime_budget=1.0) as led:
            _count(first, tabdp.Session(unit="id", seed=1, ledger=led))
            pinned = led.unit_dtype
        with tabdp.Ledger.open(path) as led:
            try:
                _count(BASE, tabdp.Session(unit="id", seed=2, ledger=led))
                outcome = "released"
            except InvalidParameterError as err:
                outcome = str(err).replace(str(path), "L")
            outcomes.append((pinned, outcome, led.releases))
    assert outcomes[0] == outcomes[1], outcomes
    assert outcomes[0][0] == "String" and "keys units by String" in outcomes[0][1]


@pytest.mark.parametrize("dtype", [pl.UInt64, pl.Float64, pl.Boolean])
def test_unit_ids_the_ledger_cannot_key_are_refused_without_rows_too(tmp_path, dtype):
    """Review r83: the Polars engine refused these ids only when a row held one.

    A frame with no rows went through (and was committed as a release); one row was
    refused. Both are refused by the type, before anything is read or recorded.
    """
    errors = []
    for n in (0, 1):
        df = pl.DataFrame({"id": pl.Series([1] * n, dtype=pl.Int64).cast(dtype),
                           "c": pl.Series(["a"] * n, dtype=pl.String)})
        with tabdp.Ledger.create(tmp_path / f"l{n}", series="s", lifetime_budget=1.0) as led:
            with pytest.raises(InvalidParameterError) as info:
                _count(df, tabdp.Session(unit="id", seed=1, ledger=led))
            errors.append(str(info.value).replace(str(tmp_path / f"l{n}"), "L"))
            assert led.releases == 0
    assert errors[0] == errors[1] and str(dtype) in errors[0]


@pytest.mark.parametrize("second", [BASE, BASE.head(0)], ids=["rows", "no-rows"])
def test_the_run_id_type_does_not_depend_on_whether_one_unit_was_charged(tmp_path, second):
    """Review r88: within one run (no commit between sessions) the same as across runs (r83).

    A ledger opened with ``autocommit=False`` serves two sessions: text ids first, then
    integer ids. The run's id type was only the type of the units it had charged, so after a
    first release over no rows the integer release went through (and the run was committed
    as an Int64 series), while after one holding one unit it failed with a raw Polars error
    naming that unit's id. Both are now refused alike, from the first release's schema.
    """
    outcomes = []
    for n in (0, 1):
        path = tmp_path / f"l{n}"
        first = pl.DataFrame({"id": pl.Series(["u1"] * n, dtype=pl.String),
                              "c": pl.Series(["a"] * n, dtype=pl.String)})
        with tabdp.Ledger.create(path, series="s", lifetime_budget=1.0,
                                 autocommit=False) as led:
            _count(first, tabdp.Session(unit="id", seed=1, ledger=led))
            try:
                _count(second, tabdp.Session(unit="id", seed=2, ledger=led))
                outcome = "released"
            except TabdpError as err:
                outcome = f"{type(err).__name__}: {err}".replace(str(path), "L")
            except Exception as err:  # noqa: BLE001 - the raw error this test rules out
                outcome = f"raw {type(err).__name__}: {err}"
            led.commit(label="run")
            outcomes.append((outcome, led.unit_dtype))
    assert outcomes[0] == outcomes[1], outcomes
    assert outcomes[0][1] == "String" and "keys units by String" in outcomes[0][0]
    assert "u1" not in outcomes[1][0]


# -- review rev63l -----------------------------------------------------------------------------
@pytest.mark.parametrize("autocommit", [False, True])
def test_a_closed_ledger_is_refused_before_data_whatever_the_rows(tmp_path, autocommit):
    """A session's ledger closed: every release refused before a row is read, rows or none.

    Before, with ``autocommit=False`` a release over no rows went through (its lock released,
    another run could be charging the ledger) while one holding a unit failed at its charge:
    whether the release was refused depended on whether one record was in it.
    """
    errors = []
    for i, ids in enumerate(([], [1])):
        df = pl.DataFrame({"id": pl.Series(ids, dtype=pl.Int64),
                           "c": pl.Series(["a"] * len(ids), dtype=pl.String)})
        led = tabdp.Ledger.create(tmp_path / f"l{i}", series="s", lifetime_budget=1.0,
                                  autocommit=autocommit)
        s = tabdp.Session(unit="id", seed=1, ledger=led)
        led.close()
        with pytest.raises(LedgerError, match="is closed") as info:
            _count(df, s)
        errors.append(str(info.value).replace(f"l{i}", "l"))
        assert s.records == []
    assert errors[0] == errors[1]


def test_a_commit_states_the_curves_of_every_session_it_charges(tmp_path):
    """Two sessions on one ``autocommit=False`` ledger, one commit: the entry states both.

    The commit adds every uncommitted charge (2.0 per unit: one count of the first session,
    three of the second) but recorded only the committing session's public curve, so the
    series' public bound said "at most rho = 0.5" for a release that charged each unit 2.0.
    Now the entry's curve is that of every release whose charge it commits.
    """
    led = tabdp.Ledger.create(tmp_path / "l", series="s", lifetime_budget=10.0,
                              autocommit=False)
    s1 = tabdp.Session(unit="id", seed=1, ledger=led)
    s2 = tabdp.Session(unit="id", seed=2, ledger=led)
    _count(BASE, s1)
    for _ in range(3):
        _count(BASE, s2)
    s1.commit_ledger(label="2026")
    assert led.state()["rho"].to_list() == [2.0, 2.0, 2.0]
    words = led.public()["over_releases_in_words"][0]
    assert "a unit of size 1 in each of them has lost at most rho = 2 (zCDP)" in words, words
    _count(BASE, s2)  # after the commit: the next entry states this release alone
    s2.commit_ledger(label="2027")
    assert led.state()["rho"].to_list() == [2.5, 2.5, 2.5]
    assert "has lost at most rho = 2.5 (zCDP)" in led.public()["over_releases_in_words"][0]
    led.close()


# -- review stop 63 ------------------------------------------------------------------------------
def test_a_session_refuses_a_read_only_ledger_before_any_data(tmp_path):
    """A read-only ledger (``tabdp compare``'s) given to a Session: refused, nothing read.

    Before, the session's releases were filtered by the lifetime budget but charged nowhere
    (``commit`` refused, ``close`` dropped the charges silently): tables published from them
    were outside the series' lifetime guarantee.
    """
    path = tmp_path / "l"
    with tabdp.Ledger.create(path, series="s", lifetime_budget=1.0) as led:
        _count(BASE, tabdp.Session(unit="id", seed=1, ledger=led))
    led = tabdp.Ledger.open(path, autocommit=False, read_only=True)
    try:
        with pytest.raises(InvalidParameterError, match="read_only=True") as info:
            tabdp.Session(unit="id", seed=2, ledger=led)
        assert isinstance(info.value, ValueError) and isinstance(info.value, TabdpError)
        text = str(info.value)
        assert "'s'" in text and "charged nowhere" in text and "Hint: open it without" in text
        assert str(path) not in text  # the series' name, never the curator's path
        # the internal path of tabdp compare (whose outputs are never published) still works
        s = tabdp.Session(unit="id", seed=2, ledger=led, _read_only_ledger=True)
        _count(BASE, s)
        assert s.report().per_record["rho_lifetime"].to_list() == [1.0, 1.0, 1.0]
    finally:
        led.close()
    with tabdp.Ledger.open(path) as again:
        assert again.releases == 1
    import inspect

    from tabdp.release.runner import run_release

    # run_release's read-only switch is internal too (a published run through it would be
    # charged nowhere)
    params = inspect.signature(run_release).parameters
    assert "_ledger_read_only" in params and "ledger_read_only" not in params


def test_a_commit_without_releases_is_refused_and_keeps_the_statement(tmp_path):
    """``commit_ledger`` with nothing released since the last commit: refused, nothing written.

    Before, it wrote a release entry with an all-zero curve, and the series' public statement
    then fell back to "every unit has lost at most the lifetime budget" (rho = 4 here),
    dropping the bound of the earlier release (0.5). An entry of zeros already written (an
    older ledger, or ``Ledger.commit`` given one) no longer hides the earlier bound either.
    """
    from tabdp.privacy.session import records_curve

    path = tmp_path / "l"
    led = tabdp.Ledger.create(path, series="s", lifetime_budget=4.0, autocommit=False)
    s = tabdp.Session(unit="id", seed=1, ledger=led)
    _count(BASE, s)
    s.commit_ledger(label="2025")
    said = led.public()["over_releases_in_words"]
    assert "'2025'" in said[0] and "has lost at most rho = 0.5 (zCDP)" in said[0], said
    chain = sorted(p.name for p in (path / "chain").iterdir())
    with pytest.raises(LedgerError, match="got 0 releases") as info:
        s.commit_ledger(label="2026")
    assert isinstance(info.value, ValueError) and "Nothing was written" in str(info.value)
    assert sorted(p.name for p in (path / "chain").iterdir()) == chain
    assert led.releases == 1 and led.public()["over_releases_in_words"] == said
    # a session without releases states the earlier bound too (its own curve is all zeros)
    fresh = tabdp.Session(unit="id", seed=2, ledger=led)
    words = fresh.report().to_dict()["session"]["lifetime"]["over_releases_in_words"][0]
    assert "has lost at most rho = 0.5 (zCDP)" in words, words
    # an all-zero entry written directly: a release of the chain (verify recomputes the same
    # state), and the statement keeps the earlier release's bound
    led.commit(label="2026", public_curve=records_curve([]))
    words = led.public()["over_releases_in_words"][0]
    assert "'2025' and '2026'" in words and "has lost at most rho = 0.5 (zCDP)" in words, words
    led.close()
    out = io.StringIO()
    assert cli_main(["ledger", "verify", str(path)], stdout=out, stderr=out) == 0, out.getvalue()


# -- review rev63e -----------------------------------------------------------------------------
def test_sessions_sharing_a_ledger_in_two_threads_take_turns(tmp_path, monkeypatch):
    """Two sessions on one ledger, one thread each: the second release sees the first's charge.

    Before, both releases could pass the lifetime filter on the same losses (each read the
    ledger before the other charged it) and every unit ended at rho = 1.0 against a lifetime
    budget of 0.6; the docs said one thread per session was enough. Here each release waits
    after its filter until the other has filtered too (at most 1 s): with the ledger held from
    the filter to the charge, the second one filters only after the first charged.
    """
    import threading

    from tabdp.privacy.session import Session

    led = tabdp.Ledger.create(tmp_path / "l", series="s", lifetime_budget=0.6,
                              autocommit=False)
    sessions = [tabdp.Session(unit="id", seed=i, ledger=led) for i in range(2)]
    both_filtered = threading.Barrier(2)
    first_done = threading.Event()
    admit = Session.admit

    def slow_admit(self: Any, *a: Any, **k: Any) -> Any:
        out = admit(self, *a, **k)
        try:
            both_filtered.wait(timeout=1.0)
        except threading.BrokenBarrierError:
            pass
        if self is sessions[1]:
            first_done.wait(timeout=5.0)  # the first charges before the second
        return out

    monkeypatch.setattr(Session, "admit", slow_admit)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            _count(BASE, sessions[i])
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)
        finally:
            if i == 0:
                first_done.set()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    sessions[0].commit_ledger(label="2026")
    assert led.state()["rho"].to_list() == [0.5, 0.5, 0.5]  # the second left every unit out
    assert sessions[1].report().per_record.height == 0  # nobody charged by the second
    led.close()


def test_ledger_show_and_verify_mark_what_they_print_confidential(tmp_path):
    """`tabdp ledger show` prints exact counts of units (review rev66a): say they are secret.

    Its lines give, per release, the units charged and in the ledger (exact statistics of the
    records, no noise) and hashes of the confidential files; `verify` and `accept-restore`
    print the chain head. Nothing said so: a curator asked to check `ledger show` against
    their records could paste it into a review. Each now says CONFIDENTIAL.
    """
    path = tmp_path / "l"
    with tabdp.Ledger.open(path, series="s", lifetime_budget=5.0, create=True) as led:
        _count(BASE, tabdp.Session(unit="id", seed=1, ledger=led))
    out = io.StringIO()
    assert cli_main(["ledger", "show", str(path)], stdout=out, stderr=io.StringIO()) == 0
    lines = out.getvalue().splitlines()
    assert "units charged=3" in lines[1]
    assert lines[2].startswith("CONFIDENTIAL (the curator's): the units charged and in the "
                               "ledger are exact counts of the records")
    for command in ("verify", "accept-restore"):
        out = io.StringIO()
        assert cli_main(["ledger", command, str(path)], stdout=out, stderr=io.StringIO()) == 0
        assert "chain head" in out.getvalue()
        assert "CONFIDENTIAL: keep it in your records, never publish it" in out.getvalue()
