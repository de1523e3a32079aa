"""On-disk cache of the exact samplers' tables (tabdp._cache; docs/exact-rounding.md §4.7).

A second process loads the tables instead of building them; corrupted, truncated, mislabelled or
tampered files are rejected and rebuilt with the values of a fresh build; an unusable cache folder
falls back to memory; concurrent writers never leave a bad file. Every test uses its own
temporary cache folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from tabdp.noise import (
    ExpPolyLog,
    Gaussian,
    GeneralizedGaussian,
    NoiseDistribution,
    StudentT,
)
from tabdp.noise.exact import round_noisy
from tabdp.noise.rounding.certified import CertifiedIsf
from tabdp.noise.rounding.taylor import (
    _TAIL_SPEC,
    _cache,  # the instance the samplers use (doctests re-import)
    _TaylorTable,
)

ROOT = Path(__file__).resolve().parents[2]

#: One fresh process: the first release of a Gaussian and an ExpPolyLog (p = 1) law; prints the
#: cache events, the time of the releases and the released values.
_SCRIPT = """
import json, sys, time
import numpy as np
t0 = time.perf_counter()
from tabdp import _cache
from tabdp.noise import ExpPolyLog, Gaussian
from tabdp.noise.exact import round_noisy
from tabdp.rng import RandomSource
q = np.linspace(-50.0, 50.0, 20000)
t1 = time.perf_counter()
g = round_noisy(Gaussian(3.0), q, grid=0.01, rng=RandomSource(seed=5))
e = round_noisy(ExpPolyLog(sigma=2.0, a=1.0, d=4.0), q, grid=0.01, rng=RandomSource(seed=6))
t2 = time.perf_counter()
print(json.dumps({"stats": dict(_cache.STATS), "seconds": t2 - t1,
                  "values": [g.values.tolist(), e.values.tolist()]}))
"""


def _run(cache: Path | str, script: str = _SCRIPT) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TABDP_CACHE_DIR=str(cache))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _files(cache: Path) -> list[Path]:
    return sorted(cache.rglob("*.npz"))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache folder for this test (in this process and its subprocesses)."""
    d = tmp_path / "cache"
    monkeypatch.setenv("TABDP_CACHE_DIR", str(d))
    return d


@pytest.mark.slow
def test_second_process_loads_instead_of_building(cache: Path) -> None:
    cold = _run(cache)
    assert cold["stats"].get("build", 0) > 0 and cold["stats"].get("hit", 0) == 0
    assert cold["stats"]["store"] == cold["stats"]["build"]
    files = _files(cache)
    assert len(files) == cold["stats"]["store"]
    assert all(f.parent.parent.name == f"tables-f{_cache.FORMAT_VERSION}" for f in files)
    warm = _run(cache)
    # loaded, not built: the counters say so (timings are reported, not asserted)
    assert warm["stats"].get("build", 0) == 0, warm["stats"]
    assert warm["stats"]["hit"] == cold["stats"]["build"]
    assert warm["stats"].get("reject", 0) == 0
    assert warm["values"] == cold["values"]
    off = _run("off")
    assert off["stats"].get("hit", 0) == 0 and off["values"] == cold["values"]
    print(f"first releases: built {cold['seconds']:.3f} s, loaded {warm['seconds']:.3f} s")


@pytest.mark.slow
def test_every_corrupted_file_is_rejected_and_rebuilt_bit_for_bit(cache: Path) -> None:
    cold = _run(cache)
    files = _files(cache)
    fresh = {f: f.read_bytes() for f in files}
    for i, f in enumerate(files):                     # one bit flipped in the stored arrays
        raw = bytearray(fresh[f])
        with np.load(f) as z:
            name = ("coef", "rem")[i % 2]
            payload = z[name].tobytes()
        start = bytes(raw).find(payload)
        assert start > 0
        raw[start + (i * 7919) % len(payload)] ^= 0x01 << (i % 8)
        f.write_bytes(bytes(raw))
    bad = _run(cache)
    assert bad["stats"]["reject"] == len(files), bad["stats"]
    assert bad["stats"].get("hit", 0) == 0
    assert bad["values"] == cold["values"]
    # the rebuilt files are byte-identical to the first build's (a deterministic build)
    assert {f: f.read_bytes() for f in _files(cache)} == fresh
    for f in files:                                   # truncated
        f.write_bytes(fresh[f][: len(fresh[f]) // 2])
    short = _run(cache)
    assert short["stats"]["reject"] == len(files) and short["values"] == cold["values"]


def _tail_table(persist: bool) -> _TaylorTable:
    return _TaylorTable(*_TAIL_SPEC, persist="tail" if persist else None)


def _reference() -> _TaylorTable:
    ref = _tail_table(False)
    ref.ensure(np.array([0, 20, 53]))
    return ref


def test_gaussian_binade_rejections_in_process(cache: Path) -> None:
    ref = _reference()
    before = _cache.STATS.copy()
    tab = _tail_table(True)
    tab.ensure(np.array([0, 20, 53]))
    assert _cache.STATS["store"] - before["store"] == 3
    path = {b: _cache._path("gaussian", tab._cache_params(b)) for b in (0, 20, 53)}
    good = {b: path[b].read_bytes() for b in path}

    def reload(expect: str) -> None:
        s0 = _cache.STATS.copy()
        t = _tail_table(True)
        t.ensure(np.array([0, 20, 53]))
        assert _cache.STATS[expect] - s0[expect] >= 1, (expect, _cache.STATS - s0)
        assert np.array_equal(t.coef, ref.coef) and np.array_equal(t.rem, ref.rem)
        assert np.array_equal(t.built, ref.built)
        for b in path:                                # rebuilt files replaced the bad ones
            path[b].write_bytes(good[b])

    reload("hit")
    # wrong parameters: binade 0's file stored under binade 20's name
    path[20].write_bytes(good[0])
    reload("reject")
    # tampered but consistent: a valid hash over a remainder 1000 times too small
    arr = {"coef": ref.coef[:, :32].copy(), "rem": ref.rem[:32] / 1e3}
    assert _cache.store_table("gaussian", tab._cache_params(0), arr)
    reload("reject")
    # a node value moved by 1e-9 relative, hash recomputed
    arr = {"coef": ref.coef[:, 20 * 32: 21 * 32].copy(), "rem": ref.rem[20 * 32: 21 * 32].copy()}
    arr["coef"][0, :] *= 1.0 + 1e-9
    assert _cache.store_table("gaussian", tab._cache_params(20), arr)
    reload("reject")
    # other stored parameters (e.g. another precision) under the right file name
    params = dict(tab._cache_params(53), prec=64)
    assert _cache.store_table("gaussian", params, {"coef": ref.coef[:, -32:],
                                                   "rem": ref.rem[-32:]})
    path[53].write_bytes(_cache._path("gaussian", params).read_bytes())
    reload("reject")


def test_gaussian_check_catches_a_wrong_remainder_at_every_node() -> None:
    """Power of the certificate check: a node value moved past its bound fails at that node."""
    ref = _reference()
    sl = slice(20 * 32, 21 * 32)
    base = {"coef": ref.coef[:, sl].copy(), "rem": ref.rem[sl].copy()}
    assert ref.verify_binade(20, base, nodes=32)
    caught = 0
    for j in range(32):
        arr = {"coef": base["coef"].copy(), "rem": base["rem"].copy()}
        # the node value moved up by twice the bound's whole width (remainder and rounding)
        arr["coef"][0, j] += 2 * (base["rem"][j] + 2.0**-47 * abs(base["coef"][0, j]))
        caught += not ref.verify_binade(20, arr, nodes=32)
    assert caught == 32


def _certified(persist: bool) -> CertifiedIsf:
    law = ExpPolyLog(sigma=1.0, a=1.0, d=4.0)
    tab = CertifiedIsf(law._arb_key(), law._arb_tail, law._arb_density,
                       lambda u: law._abs_isf(u), kbits=law._arb_kbits(), nsub=law._arb_nsub())
    tab.persist = persist
    return tab


_U_POINTS = np.array([2.0**-40, 0.001, 0.3, 0.75, 1.0 - 2.0**-30])


def test_certified_binades_rejected_and_rebuilt(cache: Path) -> None:
    ref = _certified(False)
    ref_b = ref.point_bounds(_U_POINTS)
    tab = _certified(True)
    assert np.array_equal(tab.point_bounds(_U_POINTS)[1], ref_b[1])
    files = _files(cache)
    assert len(files) == sum(int(r.built.sum()) for r in ref.regions.values())
    s0 = _cache.STATS.copy()
    again = _certified(True)
    got = again.point_bounds(_U_POINTS)
    assert _cache.STATS["hit"] - s0["hit"] == len(files) and _cache.STATS["build"] == s0["build"]
    assert all(np.array_equal(a, b) for a, b in zip(got, ref_b, strict=True))
    # tamper every file consistently (valid hash): bounds 1000 times too tight
    for name, reg in ref.regions.items():
        per = 1 << reg.kbits
        for b in np.flatnonzero(reg.built).tolist():
            sl = slice(b * per, (b + 1) * per)
            assert _cache.store_table("certified", tab._cache_params(name, b), {
                "coef": reg.coef[:, sl], "rem": reg.rem[sl] / 1e3,
                "failures": np.array(0, dtype=np.int64)})
    s0 = _cache.STATS.copy()
    third = _certified(True)
    got = third.point_bounds(_U_POINTS)
    assert _cache.STATS["reject"] - s0["reject"] == len(files)
    assert all(np.array_equal(a, b) for a, b in zip(got, ref_b, strict=True))
    for name, reg in ref.regions.items():
        assert np.array_equal(third.regions[name].coef, reg.coef)
        assert np.array_equal(third.regions[name].rem, reg.rem)


def test_unusable_cache_folder_falls_back_to_memory(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    ref = _reference()
    for target in (blocker / "cache", "off"):         # mkdir fails; cache disabled
        monkeypatch.setenv("TABDP_CACHE_DIR", str(target))
        s0 = _cache.STATS.copy()
        tab = _tail_table(True)
        tab.ensure(np.array([0, 20, 53]))
        assert np.array_equal(tab.coef, ref.coef) and np.array_equal(tab.rem, ref.rem)
        assert _cache.STATS["store"] == s0["store"] and _cache.STATS["hit"] == s0["hit"]
    # a read-only folder (the rename refused, as for a non-root user on a 0o555 folder)
    monkeypatch.setenv("TABDP_CACHE_DIR", str(tmp_path / "ro"))

    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    s0 = _cache.STATS.copy()
    tab = _tail_table(True)
    tab.ensure(np.array([0, 20, 53]))
    assert np.array_equal(tab.coef, ref.coef)
    assert _cache.STATS["store_failed"] - s0["store_failed"] == 3
    assert _files(tmp_path / "ro") == [] and list((tmp_path / "ro").rglob("*.tmp")) == []
    # and a release through it gives the values of a release without any cache
    law = Gaussian(2.0)
    a = round_noisy(law, np.zeros(500), grid=0.01, rng=3).values
    monkeypatch.setenv("TABDP_CACHE_DIR", "off")
    assert np.array_equal(a, round_noisy(law, np.zeros(500), grid=0.01, rng=3).values)


@pytest.mark.slow
def test_concurrent_writers_do_not_corrupt(cache: Path) -> None:
    # threads: writers of the same piece race with readers
    params = {"doc": "race"}
    arrays = {"x": np.arange(20000.0)}
    seen: list[object] = []

    def write() -> None:
        for _ in range(15):
            _cache.store_table("race", params, arrays)

    def read() -> None:
        for _ in range(30):
            got = _cache.load_table("race", params, lambda a: True)
            seen.append(None if got is None else bool(np.array_equal(got["x"], arrays["x"])))

    assert _cache.store_table("race", params, arrays)
    s0 = _cache.STATS.copy()
    threads = [threading.Thread(target=f) for f in (write, write, write, read, read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # the file is replaced atomically while readers read: every read gets a whole, valid file
    assert _cache.STATS["reject"] == s0["reject"] and _cache.STATS["miss"] == s0["miss"]
    assert seen == [True] * 60
    # processes: four cold processes build and store the same tables at the same time
    env = dict(os.environ, PYTHONPATH=str(ROOT), TABDP_CACHE_DIR=str(cache))
    procs = [subprocess.Popen([sys.executable, "-c", _SCRIPT], env=env, stdout=subprocess.PIPE,
                              text=True) for _ in range(3)]
    outs = [json.loads(p.communicate(timeout=600)[0].strip().splitlines()[-1]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert all(o["values"] == outs[0]["values"] for o in outs)
    assert list(cache.rglob("*.tmp")) == []
    warm = _run(cache)
    assert warm["stats"].get("build", 0) == 0 and warm["stats"].get("reject", 0) == 0
    assert warm["values"] == outs[0]["values"]


def test_cache_location_rules(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TABDP_CACHE_DIR", raising=False)
    if sys.platform.startswith("linux"):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert _cache.cache_root() == tmp_path / "xdg" / "tabdp"
        monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")        # invalid: ignored
        assert _cache.cache_root() == Path.home() / ".cache" / "tabdp"
        monkeypatch.delenv("XDG_CACHE_HOME")
        assert _cache.cache_root() == Path.home() / ".cache" / "tabdp"
    monkeypatch.setenv("TABDP_CACHE_DIR", str(tmp_path / "mine"))
    import tabdp

    assert _cache.table_dir() == (tmp_path / "mine" / f"tables-f{_cache.FORMAT_VERSION}"
                                  / f"tabdp-{tabdp.__version__}")
    for off in ("off", "OFF", "none", "0"):
        monkeypatch.setenv("TABDP_CACHE_DIR", off)
        assert _cache.cache_root() is None and _cache.table_dir() is None


@pytest.mark.parametrize("law", [StudentT(df=3.0), GeneralizedGaussian(sigma=1.0, p=0.5),
                                 ExpPolyLog(sigma=1.0, a=3.0, d=1.0, p=2.0)], ids=repr)
def test_certified_laws_load_their_own_binades(cache: Path, law: NoiseDistribution) -> None:
    """Each law's stored binades pass their certificate check on load (no false rejection)."""

    def table() -> CertifiedIsf:
        tab = CertifiedIsf(law._arb_key(), law._arb_tail, law._arb_density,
                           lambda u: law._abs_isf(u) / law._arb_unit(), kbits=law._arb_kbits(),
                           nsub=law._arb_nsub())
        tab.persist = True
        return tab

    first = table().point_bounds(_U_POINTS)
    built = len(_files(cache))
    assert built >= len(_U_POINTS) - 1
    s0 = _cache.STATS.copy()
    again = table().point_bounds(_U_POINTS)
    assert _cache.STATS["hit"] - s0["hit"] == built
    assert _cache.STATS["reject"] == s0["reject"] and _cache.STATS["build"] == s0["build"]
    assert all(np.array_equal(a, b) for a, b in zip(again, first, strict=True))
