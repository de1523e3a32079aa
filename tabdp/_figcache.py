"""The public page's figures, cached on disk and looked up without importing matplotlib.

The public page's figures (loss curves, margins of error) follow from the release plan alone,
and a release with the same plan draws the same bytes again: `cached_svg` keeps them in the
samplers' cache folder (`tabdp._cache`). Its key names matplotlib's version and rc settings
without importing matplotlib when the caller has not (importing it cost 0.1–0.3 s of a release's
fixed cost, 2026-12-06): the version from the installed distribution's metadata, and the rc
settings as the contents of every matplotlibrc file matplotlib could read at start-up. Once
matplotlib is imported, its live settings (``rcParams``, which a caller may change in code) are
keyed instead. A figure whose key is missed is drawn (`tabdp.plotting` imported then).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
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


def _rc_files() -> list[str]:
    """Every matplotlibrc matplotlib may read at start-up (a superset of the one it reads).

    ``matplotlib.matplotlib_fname`` takes the first of: ``./matplotlibrc``, ``$MATPLOTLIBRC``
    (a file, or a folder holding ``matplotlibrc``), the configuration folder's
    (``$MPLCONFIGDIR``, else ``$XDG_CONFIG_HOME/matplotlib`` or ``~/.config/matplotlib``, else
    ``~/.matplotlib``), then the installed defaults (named by the version). All candidates that
    exist are hashed, so a change to any of them is a miss.
    """
    env = os.environ
    home = pathlib.Path.home()
    paths = [pathlib.Path.cwd() / "matplotlibrc"]
    if env.get("MATPLOTLIBRC"):
        rc = pathlib.Path(env["MATPLOTLIBRC"])
        paths += [rc, rc / "matplotlibrc"]
    if env.get("MPLCONFIGDIR"):
        paths.append(pathlib.Path(env["MPLCONFIGDIR"]) / "matplotlibrc")
    xdg = pathlib.Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
    paths += [xdg / "matplotlib" / "matplotlibrc", home / ".matplotlib" / "matplotlibrc"]
    out = []
    for p in paths:
        try:
            if p.is_file():
                out.append(f"{p}:{hashlib.sha256(p.read_bytes()).hexdigest()}")
        except OSError:
            out.append(f"{p}:unreadable")
    return out


def _matplotlib() -> dict[str, Any]:
    """Matplotlib's version and rc settings, without importing it if it is not imported."""
    mpl = sys.modules.get("matplotlib")
    if mpl is not None:
        return {"matplotlib": str(getattr(mpl, "__version__", "?")),
                # every live rc setting (the figures draw on their own canvas: not the backend)
                "rc": [[k, repr(v)] for k, v in sorted(dict.items(mpl.rcParams))
                       if k != "backend"]}
    try:
        version = importlib.metadata.version("matplotlib")
    except importlib.metadata.PackageNotFoundError:
        version = "absent"
    return {"matplotlib": version, "rc_files": _rc_files()}


def figure_key(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
    """SHA-256 of a figure's name and inputs, tabdp's and matplotlib's versions and rc settings.

    Args:
        name: The figure function's full name (``module.qualname``).
        args: Its positional arguments.
        kwargs: Its keyword arguments.

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
                           "tabdp": _tabdp_version(), **_matplotlib()},
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
    key = None if folder is None else figure_key(name, args, kwargs)
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
    svg = str(draw())
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
