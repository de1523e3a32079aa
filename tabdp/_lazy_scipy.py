"""SciPy's root finders, optimizers and splines, and whole modules, imported on first use.

``scipy.optimize``, ``scipy.integrate`` and ``scipy.interpolate`` take about 0.3-0.9 s to
import (they pull in ``scipy.linalg`` and ``scipy.fft``), yet tabdp needs them only when it
computes something: a noise table, a calibration, an accounting conversion. Modules that use them
import these thin stand-ins instead, so importing the mechanisms stays fast; each stand-in
forwards every argument to the SciPy function of the same name. `LazyModule` stands in for a
whole module (``scipy.special``, ``mpmath``) the same way: a Spark worker that unpickles a
mechanism imports the mechanism's module and its noise law's, and SciPy's ``special`` (about
0.2 CPU-s, with ``numpy.f2py`` and ``unittest``) and mpmath (0.04) are needed only when a noise
table, a tail or an exact rounding is computed, never by the per-record policy.

Example:
    >>> from tabdp._lazy_scipy import brentq
    >>> round(brentq(lambda x: x * x - 2.0, 0.0, 2.0), 12)
    1.414213562373
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from types import ModuleType
from typing import Any

__all__ = ["brentq", "minimize_scalar", "quad", "CubicSpline", "LazyModule", "submodule",
           "lazy_package"]


class LazyModule:
    """A module imported on the first attribute read; each name is then kept on the stand-in.

    ``mpmath = LazyModule("mpmath")`` (under ``if not TYPE_CHECKING``) lets a module's code
    write ``mpmath.mpf(...)`` as before while importing tabdp's module does not import mpmath;
    a name read once is stored on the stand-in, so later reads are plain attribute reads (the
    same objects: ``special.ndtr`` is ``scipy.special.ndtr``).

    Args:
        name: The module's dotted name.

    Example:
        >>> special = LazyModule("scipy.special")
        >>> import scipy.special
        >>> special.ndtr is scipy.special.ndtr, float(special.ndtr(0.0))
        (True, 0.5)
    """

    def __init__(self, name: str) -> None:
        self._lazy_name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):  # copy, pickle and inspect probe dunders: not the module's
            raise AttributeError(attr)
        value = getattr(importlib.import_module(self._lazy_name), attr)
        setattr(self, attr, value)
        return value

    def __repr__(self) -> str:
        return f"<lazy module {self._lazy_name!r}>"


def submodule(package: str, name: str) -> ModuleType | None:
    """``package.name`` imported, when ``name`` is a submodule of ``package`` (else None).

    For the ``__getattr__`` of a package that loads its names lazily (PEP 562): importing such a
    package no longer imports its submodules, so ``tabdp.mechanisms.smooth.choose_gamma`` after
    a bare ``import tabdp`` would raise AttributeError; the package imports the submodule on
    first read instead (the import then sets it as the package's attribute).

    Args:
        package: The package's dotted name.
        name: The attribute read.

    Returns:
        The submodule, or None when ``package`` has no submodule ``name``.

    Example:
        >>> submodule("tabdp.noise", "gaussian").__name__
        'tabdp.noise.gaussian'
        >>> submodule("tabdp.noise", "Gaussian") is None
        True
    """
    if name.startswith("__"):  # dunders probed by copy, pickle, inspect: never submodules
        return None
    found = importlib.util.find_spec(f"{package}.{name}")
    return None if found is None else importlib.import_module(found.name)


def lazy_package(package: str, lazy: Mapping[str, str], names: Sequence[str],
                 namespace: MutableMapping[str, Any],
                 fallback: Callable[[str], Any] | None = None,
                 hidden: frozenset[str] = frozenset(),
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's PEP 562 ``__getattr__`` and ``__dir__``: its names loaded on first use.

    A public name is imported from its module when first read and then kept in the package's
    namespace (later reads are plain); a submodule is imported when first read as an attribute
    (`submodule`), as it was reachable when the package imported every submodule.

    Args:
        package: The package's dotted name (``__name__``).
        lazy: Public name → the module defining it: a submodule's name relative to the package
            (``"additive"``) or a dotted absolute name (``"tabdp.privacy.budget"``).
        names: The package's ``__all__``.
        namespace: The package's ``globals()``.
        fallback: Called with a name that is neither lazy nor a submodule, before the
            AttributeError (e.g. a moved name's deprecation path); it raises KeyError to decline.
        hidden: Names left out of ``dir()`` (moved names).

    Returns:
        ``(__getattr__, __dir__)``, to assign at module level.

    Example:
        >>> getattr_, dir_ = lazy_package("tabdp.noise", {"Gaussian": "gaussian"}, ["Gaussian"], {})
        >>> getattr_("Gaussian").__module__, "Gaussian" in dir_()
        ('tabdp.noise.gaussian', True)
        >>> getattr_("gaussian").__name__
        'tabdp.noise.gaussian'
    """

    def __getattr__(name: str) -> Any:
        if name in lazy:
            home = lazy[name]
            module = importlib.import_module(home if "." in home else f"{package}.{home}")
            value = getattr(module, name)
            namespace[name] = value
            return value
        if fallback is not None:
            try:
                return fallback(name)
            except KeyError:
                pass
        found = submodule(package, name)  # e.g. tabdp.mechanisms.smooth after `import tabdp`
        if found is not None:
            return found
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted((set(namespace) | set(names)) - hidden)

    return __getattr__, __dir__


def brentq(*args: Any, **kwargs: Any) -> Any:
    """`scipy.optimize.brentq`, imported on first call.

    Args:
        *args: Positional arguments of `scipy.optimize.brentq`.
        **kwargs: Keyword arguments of `scipy.optimize.brentq`.

    Returns:
        What `scipy.optimize.brentq` returns.

    Example:
        >>> brentq(lambda x: x - 1.0, 0.0, 3.0)
        1.0
    """
    from scipy.optimize import brentq as f

    return f(*args, **kwargs)


def minimize_scalar(*args: Any, **kwargs: Any) -> Any:
    """`scipy.optimize.minimize_scalar`, imported on first call.

    Args:
        *args: Positional arguments of `scipy.optimize.minimize_scalar`.
        **kwargs: Keyword arguments of `scipy.optimize.minimize_scalar`.

    Returns:
        What `scipy.optimize.minimize_scalar` returns.

    Example:
        >>> res = minimize_scalar(lambda x: (x - 2.0) ** 2, bounds=(0.0, 5.0), method="bounded")
        >>> round(float(res.x), 4)
        2.0
    """
    from scipy.optimize import minimize_scalar as f

    return f(*args, **kwargs)


def quad(*args: Any, **kwargs: Any) -> Any:
    """`scipy.integrate.quad`, imported on first call (``scipy.integrate`` loads the optimizers).

    Args:
        *args: Positional arguments of `scipy.integrate.quad`.
        **kwargs: Keyword arguments of `scipy.integrate.quad`.

    Returns:
        What `scipy.integrate.quad` returns.

    Example:
        >>> val, err = quad(lambda x: 2.0 * x, 0.0, 1.0)
        >>> round(val, 12)
        1.0
    """
    from scipy.integrate import quad as f

    return f(*args, **kwargs)


def CubicSpline(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - SciPy's class name
    """A `scipy.interpolate.CubicSpline`, the class imported on first call.

    Args:
        *args: Positional arguments of `scipy.interpolate.CubicSpline`.
        **kwargs: Keyword arguments of `scipy.interpolate.CubicSpline`.

    Returns:
        The spline.

    Example:
        >>> float(CubicSpline([0.0, 1.0, 2.0], [0.0, 1.0, 4.0])(1.0))
        1.0
    """
    from scipy.interpolate import CubicSpline as cls

    return cls(*args, **kwargs)
