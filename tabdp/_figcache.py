"""The public page's figures, cached on disk and looked up without importing matplotlib.

The public page's figures (loss curves, margins of error) follow from the release plan alone,
and a release with the same plan draws the same bytes again: `cached_svg` keeps them in the
samplers' cache folder (`tabdp._cache`). Its key names matplotlib's settings without importing
matplotlib when the caller has not (importing it cost 0.1–0.3 s of a release's fixed cost,
2026-12-06): the hashes of the files matplotlib would read at import (its version file, its
default settings, and every matplotlibrc it could read: `_rc_files`). Once matplotlib is
imported, its live settings (``rcParams``, which a caller may change in code) are keyed
instead, unless a figure drawn here imported it and nothing changed since. The key also
hashes the source of the modules that draw the figures (`_FIGURE_CODE`, read once per
process), so that changed drawing code never serves a figure the old code drew, even under
the same tabdp version (a development checkout). A figure whose key is missed is drawn
(`tabdp.plotting` imported then).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import json
import os
import pathlib
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["cached_svg", "public_svg"]


def _json_default(o: Any) -> Any:
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.integer, np.floating, np.bool_)):
        return o.item()
    raise TypeError(f"not a figure argument: {type(o).__name__}")


def _package() -> pathlib.Path | None:
    """The folder of the matplotlib that ``import matplotlib`` would load (not imported)."""
    try:
        spec = importlib.util.find_spec("matplotlib")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    return pathlib.Path(spec.origin).parent


def _rc_files() -> list[str]:
    """What matplotlib reads at import, as hashes: its version file, defaults and matplotlibrc.

    ``matplotlib.matplotlib_fname`` takes the first matplotlibrc of: ``./matplotlibrc``,
    ``$MATPLOTLIBRC`` (a file, or a folder holding ``matplotlibrc``), the configuration
    folder's (``$MPLCONFIGDIR``; else ``$XDG_CONFIG_HOME/matplotlib`` or
    ``~/.config/matplotlib`` on Linux; ``~/.matplotlib`` or ``%LOCALAPPDATA%/matplotlib`` on
    Windows; ``~/.matplotlib`` elsewhere), then the package's ``mpl-data/matplotlibrc``, whose
    settings are the defaults of every other. Every candidate that exists is hashed (a superset
    of the one read), with the package's ``_version.py``, so a change to any of them is a miss.
    """
    env = os.environ
    paths = [pathlib.Path("matplotlibrc")]  # relative, as matplotlib reads it (no cwd needed)
    if env.get("MATPLOTLIBRC"):
        rc = pathlib.Path(env["MATPLOTLIBRC"])
        paths += [rc, rc / "matplotlibrc"]
    if env.get("MPLCONFIGDIR"):
        paths.append(pathlib.Path(env["MPLCONFIGDIR"]) / "matplotlibrc")
    if env.get("LOCALAPPDATA"):
        paths.append(pathlib.Path(env["LOCALAPPDATA"]) / "matplotlib" / "matplotlibrc")
    try:
        home: pathlib.Path | None = pathlib.Path.home()
    except RuntimeError:  # no home folder
        home = None
    if env.get("XDG_CONFIG_HOME"):
        paths.append(pathlib.Path(env["XDG_CONFIG_HOME"]) / "matplotlib" / "matplotlibrc")
    if home is not None:
        paths += [home / ".config" / "matplotlib" / "matplotlibrc",
                  home / ".matplotlib" / "matplotlibrc"]
    package = _package()
    if package is not None:
        paths += [package / "mpl-data" / "matplotlibrc", package / "_version.py"]
    out = [f"package:{package}"]
    for p in paths:
        try:
            if p.is_file():
                out.append(f"{p}:{hashlib.sha256(p.read_bytes()).hexdigest()}")
        except OSError:
            out.append(f"{p}:unreadable")
    return out


#: `_rc_files` as it was just before a figure drawn here imported matplotlib; None when
#: matplotlib was imported elsewhere (or is not imported).
_AT_IMPORT: list[list[str] | None] = [None]


def _live_rc(mpl: Any, name: str) -> list[list[str]]:
    """Every setting of ``mpl.<name>`` (``rcParams``, ``rcParamsOrig``) but the backend."""
    return [[k, repr(v)] for k, v in sorted(dict.items(getattr(mpl, name))) if k != "backend"]


def _matplotlib() -> dict[str, Any]:
    """Matplotlib's settings for a figure's key, without importing matplotlib.

    Not imported: the files it would read (`_rc_files`). Imported by a figure drawn here, with
    its live settings unchanged since (``rcParams`` equal to ``rcParamsOrig``) and the files as
    they were then: the same key as before the import, so the later figures of a release whose
    first figure was drawn are found by the next run without importing matplotlib. Otherwise
    (imported elsewhere, or settings changed in code) the version and every live setting.
    """
    mpl = sys.modules.get("matplotlib")
    if mpl is None:
        return {"rc_files": _rc_files()}
    files = _AT_IMPORT[0]
    if files is not None and _live_rc(mpl, "rcParams") == _live_rc(mpl, "rcParamsOrig"):
        now = _rc_files()
        if now == files:
            return {"rc_files": now}
    return {"matplotlib": str(getattr(mpl, "__version__", "?")), "rc": _live_rc(mpl, "rcParams")}


#: The modules whose code draws the public figures (their source is in every figure's key).
_FIGURE_CODE = ("tabdp.plotting", "tabdp._svgchart", "tabdp._histogram", "tabdp._figcache")


@functools.lru_cache(maxsize=1)
def _figure_code() -> str:
    """SHA-256 of the source files of `_FIGURE_CODE`, found without importing them.

    A module whose file cannot be read (no source installed) counts by its name alone: its
    figures are then keyed by tabdp's version, as before this hash.

    Example:
        >>> len(_figure_code())
        64
    """
    digest = hashlib.sha256()
    for module in _FIGURE_CODE:
        digest.update(module.encode() + b"\0")
        try:
            spec = importlib.util.find_spec(module)
            origin = spec.origin if spec is not None else None
            digest.update(pathlib.Path(origin).read_bytes() if origin else b"?")
        except (OSError, ImportError, ValueError):
            digest.update(b"?")
    return digest.hexdigest()


def figure_key(name: str, args: Sequence[Any], kwargs: Mapping[str, Any],
               settings: Mapping[str, Any] | None = None) -> str | None:
    """SHA-256 of a figure's name and inputs, tabdp's version and code, matplotlib's settings.

    Args:
        name: The figure function's full name (``module.qualname``).
        args: Its positional arguments.
        kwargs: Its keyword arguments.
        settings: Matplotlib's settings as `_matplotlib` gives them (computed if None).

    Returns:
        The key, or None when an input is not JSON-serialisable (the figure is then drawn).

    Example:
        >>> k = figure_key("tabdp.plotting.loss_curves_svg", [{"t": []}], {"title": "L"})
        >>> len(k), k == figure_key("tabdp.plotting.loss_curves_svg", [{"t": []}],
        ...                         {"title": "M"})
        (64, False)
    """
    from tabdp._cache import _tabdp_version

    try:
        text = json.dumps({"figure": name, "args": list(args), "kwargs": dict(kwargs),
                           "tabdp": _tabdp_version(), "code": _figure_code(),
                           **(_matplotlib() if settings is None else settings)},
                          default=_json_default, allow_nan=True)
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(text.encode()).hexdigest()


def cached_svg(name: str, draw: Callable[[], Any], args: Sequence[Any],
               kwargs: Mapping[str, Any]) -> str:
    """The SVG ``draw()`` returns, from the cache when a file holds it under its key.

    Args:
        name: The figure function's full name (``module.qualname``; its last part names the
            file).
        draw: Draws the figure (called on a miss).
        args: The function's positional arguments (in the key).
        kwargs: Its keyword arguments (in the key).

    Returns:
        The SVG, byte for byte what ``draw()`` returns.

    Example:
        >>> cached_svg("demo.figure", lambda: "<svg/>", [], {})
        '<svg/>'
    """
    from tabdp._cache import table_dir

    folder = table_dir()
    settings = None if folder is None else _matplotlib()
    key = None if settings is None else figure_key(name, args, kwargs, settings)
    if folder is None or key is None:
        return str(draw())
    path = folder / "figures" / f"{name.rsplit('.', 1)[-1]}-{key[:40]}.json"
    try:
        got = json.loads(path.read_text(encoding="utf-8"))
        svg = got["svg"]
        if (got.get("key") == key and isinstance(svg, str)
                and got.get("sha256") == hashlib.sha256(svg.encode()).hexdigest()):
            return svg
    except (OSError, ValueError, KeyError, TypeError):
        pass
    before = "matplotlib" in sys.modules
    svg = str(draw())
    if not before and "matplotlib" in sys.modules and settings is not None:
        _AT_IMPORT[0] = settings.get("rc_files")  # (the files its import read)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".fig-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"key": key, "sha256": hashlib.sha256(svg.encode()).hexdigest(),
                           "svg": svg}, fh)
            os.replace(tmp, path)
        except BaseException:
            pathlib.Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass
    return svg


def public_svg(function: str, *args: Any, **kwargs: Any) -> str:
    """``tabdp.plotting.<function>(*args, **kwargs)``, cached; plotting is imported on a miss.

    Args:
        function: A figure function of `tabdp.plotting` (``"loss_curves_svg"``,
            ``"moe_curves_svg"``).
        *args: Its positional arguments (public inputs only: the cache folder is not the
            confidential output folder).
        **kwargs: Its keyword arguments.

    Returns:
        The SVG.

    Example:
        >>> rows = [{"delta": 1.0, "rho": 0.1}, {"delta": 10.0, "rho": 0.5}]
        >>> from tabdp.plotting import loss_curves_svg
        >>> public_svg("loss_curves_svg", {"t": rows}, title="L") == loss_curves_svg(
        ...     {"t": rows}, title="L")
        True
    """
    def draw() -> Any:
        return getattr(importlib.import_module("tabdp.plotting"), function)(*args, **kwargs)

    return cached_svg(f"tabdp.plotting.{function}", draw, args, kwargs)
