r"""On-disk cache of the exact samplers' tables (docs/exact-rounding.md §4.7).

The exact samplers' tables (the Gaussian Taylor tables, the certified Arb tables of
`tabdp.noise.rounding.certified`) take from 0.1 s to several seconds per law to build. They
depend on the law's shape alone, never on data, so they are built once and kept on disk:

* **Where.** ``$TABDP_CACHE_DIR`` if set (``off``, ``none`` or ``0`` disables the disk cache), else
  the platform's user cache folder: ``$XDG_CACHE_HOME/tabdp`` or ``~/.cache/tabdp`` (Linux and
  other POSIX systems), ``~/Library/Caches/tabdp`` (macOS), ``%LOCALAPPDATA%\tabdp\Cache``
  (Windows). Tables go in a sub-folder named after the tabdp version and `FORMAT_VERSION`.
* **What.** One ``.npz`` file of float64 arrays per table piece (e.g. one binade), holding the
  parameters it was built with (law, shape, table layout, working precision, the versions of
  tabdp, numpy, scipy, mpmath and python-flint) and a SHA-256 hash of parameters and arrays.
* **Writes** go to a temporary file in the same folder, then ``os.replace`` (atomic): a reader
  sees either no file or a whole one, and concurrent writers of the same piece write the same
  bytes. Any ``OSError`` (read-only or missing folder, full disk) is ignored: the table is then
  built in memory as before, with the same values.
* **Reads** check the parameters, the hash and the table's certificate (the caller's ``verify``:
  the law's exact tail brackets its quantile at sampled nodes). Anything that fails (missing,
  truncated, other parameters, a changed byte, a failed certificate) counts as a miss: the piece is
  rebuilt and the file replaced. Nothing here ever raises.

`STATS` counts what happened in this process (``hit``, ``miss``, ``reject``, ``store``,
``store_failed``), for tests and benchmarks.

Example:
    >>> import tempfile
    >>> with use_cache_dir(tempfile.mkdtemp()):
    ...     store_table("doc", {"n": 4}, {"coef": np.arange(4.0)})
    ...     got = load_table("doc", {"n": 4}, lambda a: bool(a["coef"][1] == 1.0))
    ...     miss = load_table("doc", {"n": 5}, lambda a: True)     # other parameters: a miss
    True
    >>> got["coef"].tolist(), miss
    ([0.0, 1.0, 2.0, 3.0], None)
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import importlib.metadata
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FORMAT_VERSION", "STATS", "ENV_VAR", "use_cache_dir", "cache_root", "table_dir",
           "build_env", "load_table", "store_table", "content_hash", "sample_indices"]

#: Version of the file layout; bump it when the stored arrays or their meaning change.
FORMAT_VERSION = 1
#: Environment variable naming the cache folder (``off`` disables the disk cache).
ENV_VAR = "TABDP_CACHE_DIR"
_OFF = {"off", "none", "0", "false", "no"}
#: Events in this process: ``hit`` (loaded and verified), ``miss`` (no file), ``reject`` (a file
#: that failed a check), ``store`` and ``store_failed`` (ignored write errors).
STATS: collections.Counter[str] = collections.Counter()
_HASH_KEY = "__sha256__"
_PARAMS_KEY = "__params__"


@contextlib.contextmanager
def use_cache_dir(path: str | os.PathLike[str] | None) -> Iterator[None]:
    """Point ``$TABDP_CACHE_DIR`` at ``path`` (None: disk cache off) for a block, then restore it.

    Example:
        >>> with use_cache_dir(None):
        ...     os.environ["TABDP_CACHE_DIR"]
        'off'
    """
    old = os.environ.get(ENV_VAR)
    os.environ[ENV_VAR] = "off" if path is None else os.fspath(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = old


def cache_root() -> Path | None:
    """The cache folder (unversioned), or None when the disk cache is off or has no home.

    ``$TABDP_CACHE_DIR`` wins; otherwise the platform rule of the module docstring.

    Example:
        >>> with use_cache_dir("/tmp/tabdp-doc"):
        ...     str(cache_root())
        '/tmp/tabdp-doc'
        >>> with use_cache_dir(None):
        ...     cache_root() is None
        True
    """
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return None if env.lower() in _OFF else Path(env).expanduser()
    try:
        if sys.platform == "win32":
            base = os.environ.get("LOCALAPPDATA", "").strip()
            return Path(base) / "tabdp" / "Cache" if base else None
        if sys.platform == "darwin":
            return Path.home() / "Library" / "Caches" / "tabdp"
        xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
        # the XDG rule: a relative XDG_CACHE_HOME is invalid and ignored
        base_path = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
        return base_path / "tabdp"
    except (RuntimeError, KeyError, OSError):             # no home directory
        return None


def _tabdp_version() -> str:
    mod = sys.modules.get("tabdp")
    return str(getattr(mod, "__version__", "unknown"))


def table_dir() -> Path | None:
    """The versioned folder of the tables: ``<root>/tables-f<FORMAT_VERSION>/tabdp-<version>``.

    Example:
        >>> with use_cache_dir("/tmp/tabdp-doc"):
        ...     table_dir().parent.name
        'tables-f1'
    """
    root = cache_root()
    if root is None:
        return None
    return root / f"tables-f{FORMAT_VERSION}" / f"tabdp-{_tabdp_version()}"


@functools.lru_cache(maxsize=1)
def _versions() -> tuple[tuple[str, str], ...]:
    out = []
    for mod, dist in (("numpy", "numpy"), ("scipy", "scipy"), ("mpmath", "mpmath"),
                      ("flint", "python-flint")):
        loaded = sys.modules.get(mod)
        ver = getattr(loaded, "__version__", None) if loaded is not None else None
        if ver is None:                    # without importing it (python-flint costs 80 ms)
            try:
                ver = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                ver = "absent"
        out.append((mod, str(ver)))
    return tuple(out)


def build_env() -> dict[str, str]:
    """Versions a table build may depend on (part of every table's parameters).

    Example:
        >>> sorted(build_env())
        ['flint', 'format', 'mpmath', 'numpy', 'scipy', 'tabdp']
    """
    return {"tabdp": _tabdp_version(), "format": str(FORMAT_VERSION), **dict(_versions())}


def _canonical(params: Mapping[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, separators=(",", ":"), allow_nan=True, default=repr)


def content_hash(params: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 of the parameters (canonical JSON) and of every array (name, dtype, shape, bytes).

    Example:
        >>> h = content_hash({"a": 1}, {"x": np.zeros(2)})
        >>> len(h), h == content_hash({"a": 1}, {"x": np.zeros(2)})
        (64, True)
        >>> h == content_hash({"a": 1}, {"x": np.array([0.0, 2.0**-1074])})
        False
    """
    h = hashlib.sha256(_canonical(params).encode())
    for name in sorted(arrays):
        a = np.asarray(arrays[name], order="C")
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        h.update(f"|{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def sample_indices(arrays: Mapping[str, np.ndarray], n: int, k: int) -> list[int]:
    """``k`` node indices in ``[0, n)`` to re-check (fewer if two picks coincide).

    The first, the last and ``k − 2`` chosen by the arrays' content hash (deterministic for a
    given file, different from file to file).

    Example:
        >>> idx = sample_indices({"x": np.zeros(3)}, 64, 4)
        >>> idx[0], idx[-1], len(idx) <= 4
        (0, 63, True)
    """
    digest = hashlib.sha256(content_hash({}, arrays).encode()).digest()
    picks = {0, n - 1}
    for i in range(max(0, k - 2)):
        picks.add(int.from_bytes(digest[4 * i: 4 * i + 4], "little") % n)
    return sorted(picks)


def _path(kind: str, params: Mapping[str, Any]) -> Path | None:
    d = table_dir()
    if d is None:
        return None
    try:
        digest = hashlib.sha256(_canonical(params).encode()).hexdigest()[:32]
    except (TypeError, ValueError):
        return None
    return d / f"{kind}-{digest}.npz"


def load_table(kind: str, params: Mapping[str, Any],
               verify: Callable[[dict[str, np.ndarray]], bool]) -> dict[str, np.ndarray] | None:
    """The arrays stored for ``(kind, params)`` if present and valid, else None (never raises).

    Valid means: readable, the stored parameters equal ``params``, the stored hash equals the
    recomputed `content_hash`, and ``verify(arrays)`` returns True (the certificate check).

    Example:
        >>> load_table("doc-absent", {"n": 1}, lambda a: True) is None
        True
    """
    path = _path(kind, params)
    try:
        present = path is not None and path.is_file()
    except OSError:                    # e.g. a folder without search permission
        present = False
    if path is None or not present:
        STATS["miss"] += 1
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: np.array(z[k]) for k in z.files}
        stored_hash = str(data.pop(_HASH_KEY))
        stored_params = str(data.pop(_PARAMS_KEY))
        ok = (stored_params == _canonical(params)
              and stored_hash == content_hash(params, data)
              and bool(verify(data)))
    except Exception:                  # a bad file of any kind is a miss, never an error
        ok = False
    if not ok:
        STATS["reject"] += 1
        return None
    STATS["hit"] += 1
    return data


def store_table(kind: str, params: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> bool:
    """Write the arrays atomically (temporary file, then rename); False if that failed.

    Failures (no cache folder, read-only folder, full disk) are silent.

    Example:
        >>> with use_cache_dir(None):
        ...     store_table("doc", {"n": 1}, {"x": np.zeros(1)})
        False
    """
    path = _path(kind, params)
    if path is None:
        return False
    data = {k: np.array(v, order="C") for k, v in arrays.items()}
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{kind}-", suffix=".tmp", dir=path.parent)
        # Values typed Any: np.savez takes the arrays as keywords, next to its bool keyword
        # ``allow_pickle`` (no array here is named so).
        payload: dict[str, Any] = {**data, _PARAMS_KEY: np.array(_canonical(params)),
                                   _HASH_KEY: np.array(content_hash(params, data))}
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
    except Exception:
        STATS["store_failed"] += 1
        return False
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    STATS["store"] += 1
    return True
