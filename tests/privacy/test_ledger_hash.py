"""The hash of a ledger's data files: BLAKE3 where installed, SHA-256 before and without it.

A chain entry names each file's algorithm by its digest (``blake3:<hex>`` or bare SHA-256 hex)
and by its format (``tabdp-ledger/2`` or ``/1``): ledgers written before BLAKE3 open, a series
goes on across the change, and tampering is refused under either hash.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp.cli import main as cli_main
from tabdp.exceptions import InvalidParameterError, LedgerError
from tabdp.privacy import lifetime

pytest.importorskip("deltalake")


class _FakeBlake3:
    """blake3's interface (``name``, ``update``, ``hexdigest``), where the package is missing."""

    name = "blake3"

    def __init__(self, data: bytes = b"") -> None:
        self._h = hashlib.blake2b(data, digest_size=32)

    def update(self, data: bytes) -> _FakeBlake3:
        self._h.update(data)
        return self

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def _blake3_or_fake():
    try:
        from blake3 import blake3
    except ImportError:
        return _FakeBlake3
    return blake3


@pytest.fixture(params=["sha256", "blake3"])
def algo(request, monkeypatch):
    hasher = None if request.param == "sha256" else _blake3_or_fake()
    monkeypatch.setattr(lifetime, "_blake3", lambda: hasher)
    return request.param


def _release(path: Path, k: int, create: bool = True) -> None:
    units = pl.Series("unit", np.arange(k, k + 50, dtype=np.int64))
    with tabdp.Ledger.open(path, series="s", lifetime_budget=100.0, create=create) as led:
        led.charge(units, {"rho": np.full(50, 0.5), "rho@rows": np.full(50, 0.125)},
                   {"size": np.arange(50, dtype=np.float64)})
        led.commit(label=str(k))


def _entries(path: Path) -> list[dict]:
    return [json.loads(p.read_bytes()) for p in sorted((path / "chain").glob("*.json"))]


def _flip(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x01
    p.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["state", "history"])
def test_each_file_names_its_hash_and_a_flipped_byte_is_refused(tmp_path, algo, where):
    path = tmp_path / "l"
    for k in range(3):
        _release(path, k)
    entries = _entries(path)
    digests = [f[2] for e in entries[1:] for part in ("state", "history") for f in e[part]["files"]]
    if algo == "blake3":
        assert all(d.startswith("blake3:") and len(d) == 71 for d in digests)
        assert [e["format"] for e in entries] == ["tabdp-ledger/1"] + ["tabdp-ledger/2"] * 3
    else:
        assert all(len(d) == 64 and ":" not in d for d in digests)
        assert {e["format"] for e in entries} == {"tabdp-ledger/1"}
    rel = entries[-1][where]["files"][0][0]
    if algo == "blake3" and lifetime._blake3() is not _FakeBlake3:  # the real BLAKE3 of the bytes
        assert entries[-1][where]["files"][0][2] == "blake3:" + lifetime._blake3()(
            (path / rel).read_bytes()).hexdigest()
    assert cli_main(["ledger", "verify", str(path)]) == 0
    _flip(path / rel)
    with pytest.raises(LedgerError, match="does not verify"):
        tabdp.Ledger.open(path)
    assert cli_main(["ledger", "verify", str(path)], stderr=io.StringIO()) == 2


def test_a_sha256_series_goes_on_with_blake3(tmp_path, monkeypatch):
    """Releases hashed with SHA-256 (before BLAKE3), then BLAKE3: every file verifies."""
    path = tmp_path / "l"
    monkeypatch.setattr(lifetime, "_blake3", lambda: None)
    _release(path, 0)
    _release(path, 10)
    monkeypatch.setattr(lifetime, "_blake3", _blake3_or_fake)
    _release(path, 20)
    entries = _entries(path)
    assert [e["format"] for e in entries] == ["tabdp-ledger/1"] * 3 + ["tabdp-ledger/2"]
    assert lifetime.verify_ledger(path, history=True)[0][-1]["seq"] == 3
    with tabdp.Ledger.open(path) as led:
        got = led.lookup(pl.Series("unit", [0, 10, 25, 69]), ["rho"])["rho"].tolist()
    assert got == [0.5, 1.0, 1.5, 0.5]
    _flip(path / entries[1]["history"]["files"][0][0])  # the oldest, SHA-256-hashed history
    with pytest.raises(LedgerError, match="does not verify"):
        lifetime.verify_ledger(path, history=True)


def test_a_blake3_ledger_without_the_package_is_refused_clearly(tmp_path, monkeypatch):
    path = tmp_path / "l"
    monkeypatch.setattr(lifetime, "_blake3", _blake3_or_fake)
    _release(path, 0)
    monkeypatch.setattr(lifetime, "_blake3", lambda: None)
    with pytest.raises(InvalidParameterError, match=r"(?s)BLAKE3.*blake3 package.*tabdp\[ledger\]"):
        tabdp.Ledger.open(path)
    # and an older tabdp, which knows tabdp-ledger/1 only, refuses it by its format
    monkeypatch.setattr(lifetime, "_FORMATS", ("tabdp-ledger/1",))
    with pytest.raises(LedgerError, match="(?s)tabdp-ledger/1 entry.*version that wrote it"):
        tabdp.Ledger.open(path)


@pytest.mark.parametrize("rehash_entry", [False, True], ids=["entry-as-is", "entry-rehashed"])
def test_a_digest_downgraded_to_sha256_is_refused(tmp_path, monkeypatch, rehash_entry):
    """A BLAKE3 file altered and its entry's digest rewritten as the SHA-256 of the new bytes.

    The algorithm is named inside the hashed entry: rewriting it changes the entry, refused by
    the entry's hash, or (the entry rehashed too) by the anchor's chain head.
    """
    monkeypatch.setattr(lifetime, "_blake3", _blake3_or_fake)
    path = tmp_path / "l"
    for k in range(2):
        _release(path, k)
    head = sorted((path / "chain").glob("*.json"))[-1]
    entry = json.loads(head.read_bytes())
    rel = entry["state"]["files"][0][0]
    assert entry["state"]["files"][0][2].startswith("blake3:")
    _flip(path / rel)
    entry["state"]["files"][0][2] = hashlib.sha256((path / rel).read_bytes()).hexdigest()
    entry["format"] = lifetime.FORMAT
    if rehash_entry:
        entry["hash"] = lifetime._entry_hash(entry)
    head.write_bytes(json.dumps(entry).encode())
    with pytest.raises(LedgerError, match="does not verify|anchor"):
        tabdp.Ledger.open(path)
    assert cli_main(["ledger", "verify", str(path)], stderr=io.StringIO()) == 2


@pytest.mark.parametrize("digest", [123, None, ["blake3:00"]], ids=["number", "null", "list"])
def test_a_digest_that_is_not_text_is_refused_as_altered(tmp_path, algo, digest):
    """A head entry (rehashed) whose file digest is not text: refused as altered (exit 2).

    The algorithm is read from the digest's text (``blake3:`` or bare hex); a number, null or
    list there is an altered ledger like any other digest that does not match, never an
    internal error (exit 70).
    """
    entry = _two_releases_head(tmp_path)
    entry["state"]["files"][0][2] = digest
    _rehash_and_assert_refused(tmp_path, entry)


@pytest.mark.parametrize("alter", ["two-fields", "state-text", "history-text", "files-null",
                                   "version-text", "size-text"])
def test_a_malformed_head_entry_is_refused_as_altered(tmp_path, alter):
    """A head entry rehashed with its state or history in another shape: refused (exit 2).

    Not an internal error (exit 70) while the files are checked: a ledger whose entry does not
    list its files as tabdp writes them was altered.
    """
    entry = _two_releases_head(tmp_path)
    if alter == "two-fields":
        entry["state"]["files"] = [entry["state"]["files"][0][:2]]
    elif alter == "state-text":
        entry["state"] = "x"
    elif alter == "history-text":
        entry["history"] = "x"
    elif alter == "files-null":
        entry["history"]["files"] = None
    elif alter == "version-text":
        entry["state"]["version"] = "1"
    else:
        entry["state"]["files"][0][1] = str(entry["state"]["files"][0][1])
    _rehash_and_assert_refused(tmp_path, entry)


def _two_releases_head(tmp_path):
    """The head entry (parsed) of a ledger ``tmp_path / "l"`` of two releases."""
    path = tmp_path / "l"
    for k in range(2):
        _release(path, k)
    return json.loads(sorted((path / "chain").glob("*.json"))[-1].read_bytes())


def _rehash_and_assert_refused(tmp_path, entry):
    """Write ``entry`` rehashed as the head of ``tmp_path / "l"``: open and verify refuse it."""
    path = tmp_path / "l"
    head = sorted((path / "chain").glob("*.json"))[-1]
    entry["hash"] = lifetime._entry_hash(entry)
    head.write_bytes(json.dumps(entry).encode())
    with pytest.raises(LedgerError, match="does not verify"):
        tabdp.Ledger.open(path)
    err = io.StringIO()
    assert cli_main(["ledger", "verify", str(path)], stderr=err) == 2, err.getvalue()


def test_the_delta_logs_are_checked_for_their_files_not_hashed(tmp_path):
    """What the docs say of the Delta logs is what is checked (review r71).

    The filter reads the state files the chain names and hashes; the Delta logs are checked to
    name exactly those files at the chain's versions. Their other bytes (a commit time) are not
    hashed: altered, the ledger still verifies and opens, with the same state. A log naming
    another file is refused.
    """
    path = tmp_path / "l"
    _release(path, 0)
    _release(path, 10, create=False)
    with tabdp.Ledger.open(path) as led:
        before = led.state()
    version = _entries(path)[-1]["state"]["version"]  # the log adding the state's file
    log = path / "state" / "_delta_log" / f"{version:020d}.json"
    text = log.read_text()
    stamp = json.loads(text.splitlines()[0])["commitInfo"]["timestamp"]
    log.write_text(text.replace(f'"timestamp":{stamp}', f'"timestamp":{stamp + 1}', 1))
    assert cli_main(["ledger", "verify", str(path)]) == 0
    with tabdp.Ledger.open(path) as led:
        assert led.state().equals(before)
    name = next(f[0] for f in _entries(path)[-1]["state"]["files"]).split("/")[-1]
    assert name in log.read_text()
    log.write_text(log.read_text().replace(name, name.replace("part-", "pARt-")))
    assert cli_main(["ledger", "verify", str(path)]) == 2
    with pytest.raises(LedgerError, match="Delta log altered"):
        tabdp.Ledger.open(path)
