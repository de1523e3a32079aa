"""`tabdp ledger verify` recomputes the state from the history (issue 31, review finding).

A ledger's state (each unit's lifetime totals, what the filter reads) is implied by its
history (each release's per-unit losses, pinned by the chain). The byte checks accepted a state
rewritten together with its hash in the chain's last entry and the anchor, e.g. some units'
lifetime loss lowered so that they get more budget. `verify` now adds every release's losses
per unit (rounded up, in release order) and refuses a state that is not their sum.
"""

from __future__ import annotations

import io
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp import mechanisms as mech
from tabdp.cli import main as cli_main
from tabdp.exceptions import LedgerError

pytest.importorskip("deltalake")

KEYS = tabdp.KeySet.from_dict(county=["c1", "c2", "c3"])


def _entries(path: Path) -> tuple[list[Path], list[dict]]:
    files = sorted((path / "chain").glob("*.json"))
    return files, [json.loads(f.read_bytes()) for f in files]


def _rewrite_chain(path: Path, files: list[Path], entries: list[dict], start: int) -> None:
    """Entries ``start``.. rehashed and relinked, and the anchor rewritten.

    The library's own hashing, as anyone with write access to the folder and its anchor can.
    """
    from tabdp.privacy import _anchor
    from tabdp.privacy.lifetime import _canon, _entry_hash

    for i in range(start, len(entries)):
        if i:
            entries[i]["prev"] = entries[i - 1]["hash"]
        entries[i]["hash"] = _entry_hash(entries[i])
        files[i].write_bytes(_canon(entries[i]))
    _anchor.write_anchor(path, entries)


def forge_state(path: Path, edit: Callable[[pl.DataFrame], pl.DataFrame]) -> None:
    """Rewrite the state's file, its size and hash in the entry that wrote it, and the anchor."""
    from tabdp.privacy.lifetime import _read_hashed

    files, entries = _entries(path)
    k = max(i for i, e in enumerate(entries) if e.get("state"))
    rel, _, digest = entries[k]["state"]["files"][0]
    f = path / rel
    edit(pl.read_parquet(f)).write_parquet(f)
    _, size, new = _read_hashed(f, digest, path)
    entries[k]["state"]["files"][0] = [rel, size, new]
    _rewrite_chain(path, files, entries, k)


def forge_history(path: Path, k: int, edit: Callable[[pl.DataFrame], pl.DataFrame]) -> None:
    """Rewrite release ``k``'s history file, its hash, every later entry and the anchor."""
    from tabdp.privacy.lifetime import _read_hashed

    files, entries = _entries(path)
    rel, _, digest = entries[k]["history"]["files"][0]
    f = path / rel
    edit(pl.read_parquet(f)).write_parquet(f)
    _, size, new = _read_hashed(f, digest, path)
    entries[k]["history"]["files"][0] = [rel, size, new]
    _rewrite_chain(path, files, entries, k)


def _verify(path: Path, *extra: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["ledger", "verify", str(path), *extra], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


# -- a series as the release workflow writes it ---------------------------------------------
def _ids(a: np.ndarray, kind: str) -> pl.Series:
    if kind == "int":
        return pl.Series("unit", a.astype(np.int64))
    return pl.Series("unit", [f"estab-{i:06d}" for i in a])


def _release(led: tabdp.Ledger, rng: np.random.Generator, units: np.ndarray, kind: str,
             currencies: tuple[str, ...], queries: int) -> None:
    """One release: ``queries`` charges (a random part of ``units`` each), one commit."""
    for _ in range(queries):
        sel = units[rng.random(units.size) < 0.8]
        rng.shuffle(sel)  # charges need not come in id order
        n = sel.size
        sums = {"rho": rng.random(n) * 10.0 ** rng.integers(-6, 1, n),
                "epsilon": np.full(n, np.inf), "rho_z": rng.random(n)}
        maxes = {"size": np.round(rng.random(n) * 1e3, 1)}
        for c in currencies:
            sums[f"rho@{c}"] = rng.random(n) * 0.1
            maxes[f"size@{c}"] = np.round(rng.random(n) * 1e4, 2)
        led.charge(_ids(sel, kind), sums, maxes)
    led.commit(label=f"r{len(led.entries)}")


def evolving_series(path: Path, kind: str = "int", seed: int = 5) -> None:
    """Six releases, as a series evolves.

    Units entering, leaving and coming back, a second currency added, a currency not charged,
    a release that charges nobody, one charge in a commit.
    """
    rng = np.random.default_rng(seed)
    tabdp.Ledger.create(path, series="cbp", lifetime_budget=1e9).close()
    plan = [(np.arange(0, 300), ("payroll",), 3),
            (np.arange(50, 350), ("payroll", "rows"), 4),   # new columns: schema merged
            (None, (), 0),                                    # charges nobody
            (np.r_[0:10, 100:400], ("rows",), 2),             # units back; payroll not charged
            (np.arange(200, 260), ("payroll", "rows", "emp"), 1),
            (np.arange(0, 500, 3), ("payroll",), 5)]
    for units, currencies, queries in plan:
        with tabdp.Ledger.open(path, autocommit=False) as led:
            if units is None:
                led.commit(label="nobody")
            else:
                _release(led, rng, units, kind, currencies, queries)


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An evolving series (string ids), built once; tests copy it with its anchor."""
    base = tmp_path_factory.mktemp("base") / "ledger"
    evolving_series(base, kind="str")
    return base


def _copy(src: Path, dst: Path) -> Path:
    from tabdp.privacy import _anchor

    shutil.copytree(src, dst)
    shutil.copy(_anchor.anchor_path(src), _anchor.anchor_path(dst))
    return dst


# -- intact ledgers pass ----------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["int", "str"])
def test_an_intact_evolving_series_verifies(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "ledger"
    evolving_series(path, kind=kind)
    code, out, err = _verify(path)
    assert code == 0, err
    assert "intact (6 release(s)" in out and "its state is the sum of its history" in out
    with tabdp.Ledger.open(path, verify_history=True) as led:  # the full check at open
        state = led.state()
        assert {"rho@payroll", "rho@rows", "rho@emp", "size@emp"} <= set(state.columns)
        assert led.entries[3]["history"] is None  # the release that charged nobody
    code, out, _ = _verify(path, "--bytes-only")
    assert code == 0 and "bytes only: the state was not recomputed" in out
    for extra in ((), ("--bytes-only",)):
        assert cli_main(["ledger", "show", str(path), *extra], stdout=io.StringIO()) == 0


def test_sums_agree_to_the_tolerance_and_single_charges_to_the_bit(
        tmp_path: Path, series: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sums agree within SUM_TOLERANCE; with one charge per commit, bit for bit.

    Several charges per commit round the lifetime sum at other places than the history's
    per-release total: the two differ in the last bits. One charge per commit (the Python
    API's autocommit) gives the same doubles.
    """
    from tabdp.privacy import _recompute
    from tabdp.privacy.lifetime import verify_ledger

    verify_ledger(series, recompute=True)
    monkeypatch.setattr(_recompute, "SUM_TOLERANCE", 0.0)
    with pytest.raises(LedgerError, match="disagree"):
        verify_ledger(series, recompute=True)
    path = tmp_path / "auto"
    df = pl.DataFrame({"id": np.arange(40) % 13, "county": ["c1", "c2", "c3", "c1"] * 10,
                       "pay": np.linspace(1.0, 90.0, 40)})
    for year in (2024, 2025, 2026):
        with tabdp.Ledger.open(path, series="s", lifetime_budget=50.0, create=True) as led:
            s = tabdp.Session(unit="id", seed=year, ledger=led)
            df.dp.sum("pay", by="county", keys=KEYS, mechanism=mech.Gaussian(70.0), session=s)
            df.dp.count(by="county", keys=KEYS, mechanism=mech.Gaussian(3.0), session=s)
    verify_ledger(path, recompute=True)  # tolerance 0: equal bit for bit


def test_a_restored_copy_accepted_then_continued_verifies(tmp_path: Path, series: Path) -> None:
    path = _copy(series, tmp_path / "ledger")
    backup = tmp_path / "backup"
    shutil.copytree(path, backup)
    rng = np.random.default_rng(9)
    with tabdp.Ledger.open(path, autocommit=False) as led:
        _release(led, rng, np.arange(0, 100), "str", ("payroll",), 2)
    shutil.rmtree(path)
    shutil.copytree(backup, path)  # the release above was never published
    assert _verify(path)[0] == 2  # an older copy: refused by the anchor
    assert cli_main(["ledger", "accept-restore", str(path)], stdout=io.StringIO(),
                    stderr=io.StringIO()) == 0
    with tabdp.Ledger.open(path, autocommit=False) as led:
        _release(led, rng, np.arange(80, 180), "str", ("payroll", "emp"), 3)
    code, out, _ = _verify(path)
    assert code == 0 and "intact (7 release(s)" in out


# -- forged states are refused ------------------------------------------------------------------
def _halve_first_units(df: pl.DataFrame) -> pl.DataFrame:
    first = pl.int_range(pl.len()) < 3
    return df.with_columns(pl.when(first).then(pl.col("rho") / 2).otherwise("rho").alias("rho"))


FORGERIES: dict[str, tuple[Callable[[pl.DataFrame], pl.DataFrame], str]] = {
    # three units' lifetime rho halved: they would get more budget
    "rho lowered": (_halve_first_units, r"3 unit\(s\) disagree, 3 below .* in 'rho'"),
    # a unit's row deleted: its lifetime loss restarts at zero
    "unit deleted": (lambda df: df.filter(pl.int_range(pl.len()) != 5),
                     r"1 unit\(s\) disagree, 1 below"),
    # a larger size: a curve budget gives a larger unit a larger limit
    "size raised": (lambda df: df.with_columns(
        pl.when(pl.int_range(pl.len()) == 7).then(pl.col("size@payroll") + 1.0)
        .otherwise("size@payroll").alias("size@payroll")),
        r"1 unit\(s\) disagree, 0 below .* and 1 above it, in 'size@payroll'"),
    # a currency's column dropped: every unit charged in it restarts at zero there
    "currency dropped": (lambda df: df.drop("rho@rows"), r"below .* in 'rho@rows'"),
    # a null where a loss was: the filter reads it as NaN, below no budget
    "loss nulled": (lambda df: df.with_columns(
        pl.when(pl.int_range(pl.len()) == 2).then(None).otherwise("rho_z").alias("rho_z")),
        r"1 unit\(s\) disagree, 1 below .* in 'rho_z'"),
    # the whole state raised by a thousandth: an over-charge, still not the history's sum
    "all raised": (lambda df: df.with_columns(pl.col("rho") * 1.001),
                   r"0 below .* above it, in 'rho'"),
}


@pytest.mark.parametrize("case", sorted(FORGERIES))
def test_a_forged_state_is_refused_by_verify(tmp_path: Path, series: Path, case: str) -> None:
    edit, message = FORGERIES[case]
    path = _copy(series, tmp_path / "ledger")
    forge_state(path, edit)
    # the byte checks pass: the chain, every file's hash and the anchor agree with the forgery
    assert _verify(path, "--bytes-only")[0] == 0
    tabdp.Ledger.open(path).close()  # an open does not recompute (its cost: the state's)
    code, out, err = _verify(path)
    assert code == 2 and out == ""
    assert "does not verify: its state" in err
    assert "is not what its releases' history adds up to" in err
    assert re.search(message, err), err
    assert "estab-" not in err  # no unit id (nor a loss) in the message
    with pytest.raises(LedgerError, match="history adds up to"):
        tabdp.Ledger.open(path, verify_history=True)
    assert cli_main(["ledger", "accept-restore", str(path)], stdout=io.StringIO(),
                    stderr=io.StringIO()) == 2
    assert cli_main(["ledger", "show", str(path)], stdout=io.StringIO(),
                    stderr=io.StringIO()) == 2
    assert cli_main(["ledger", "show", str(path), "--bytes-only"], stdout=io.StringIO()) == 0


def test_the_message_names_the_first_release_the_state_does_not_count(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    tabdp.Ledger.create(path, series="s", lifetime_budget=10.0).close()
    for year, units in ((2024, [1, 2, 3]), (2025, [1, 2, 3]), (2026, [2, 3]), (2027, [3])):
        with tabdp.Ledger.open(path, autocommit=False) as led:
            led.charge(pl.Series(units), {"rho": np.full(len(units), 0.25)}, {})
            led.commit(label=str(year), release=f"cbp_{year}")
    # unit 3's lifetime rho set to what releases 1 and 2 charged it: 3 and 4 not counted
    forge_state(path, lambda df: df.with_columns(
        pl.when(pl.col("unit") == 3).then(0.5).otherwise("rho").alias("rho")))
    code, _, err = _verify(path)
    assert code == 2
    assert "1 unit(s) disagree" in err
    assert "the first release whose losses the state does not count is #3 ('cbp_2026')" in err
    # unit 2 lowered too, to its first release's loss: the first such release is now #2
    forge_state(path, lambda df: df.with_columns(
        pl.when(pl.col("unit") == 2).then(0.25).otherwise("rho").alias("rho")))
    code, _, err = _verify(path)
    assert "2 unit(s) disagree" in err and "does not count is #2 ('cbp_2025')" in err


def test_a_history_rewritten_into_nonsense_is_refused(tmp_path: Path, series: Path) -> None:
    """A history file rewritten into nonsense is refused as such.

    Rewritten with its chain (every later entry relinked) and the anchor: rows of another
    release, a unit twice, a negative loss.
    """
    for name, edit, message in (
            ("release", lambda df: df.with_columns(pl.lit(1, pl.Int64).alias("release")),
             "holds rows of another release"),
            ("twice", lambda df: pl.concat([df, df.head(1)]).sort("unit"),
             "holds a unit twice"),
            ("negative", lambda df: df.with_columns(-pl.col("rho")),
             "negative or not-a-number loss in 'rho'")):
        path = _copy(series, tmp_path / name)
        forge_history(path, 2, edit)
        assert _verify(path, "--bytes-only")[0] == 0
        code, _, err = _verify(path)
        assert code == 2 and message in err, err
