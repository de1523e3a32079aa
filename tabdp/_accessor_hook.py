"""Register the ``.dp`` accessor on pandas, Polars and PySpark frames without importing them.

``import tabdp`` promises that ``df.dp`` works on pandas and Polars frames. Importing pandas and
Polars just to register it would cost about half a second, paid by every ``tabdp`` command
(``tabdp --help`` included) and by programs that use only one of the two libraries. Instead:

* a library already imported is registered at once;
* a library not yet imported is registered right after its first import, by a one-shot finder
  on ``sys.meta_path`` that wraps that one module's ``exec_module`` and removes itself when done.

PySpark DataFrames get the same accessor (a ``dp`` property on ``pyspark.sql.DataFrame``) right
after ``pyspark.sql.dataframe`` is imported: importing PySpark (and starting its JVM machinery) just
to register would cost seconds on every ``import tabdp``.

What is registered is a small factory: the first ``.dp`` access imports
`tabdp.frame.accessor`, whose [`register`][tabdp.frame.register] then installs the real
[`DPAccessor`][tabdp.frame.DPAccessor] class on both libraries.

Example:
    >>> import polars as pl, tabdp
    >>> type(pl.DataFrame({"a": [1]}).dp).__name__
    'DPAccessor'
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

__all__ = ["install"]


class _LazyDP:
    """Stand-in for [`DPAccessor`][tabdp.frame.DPAccessor] until the frame layer is imported.

    Calling it (what ``df.dp`` does) imports the frame layer, installs the real class on both
    libraries and returns a real accessor bound to the frame.
    """

    def __new__(cls, frame: Any) -> Any:  # noqa: D102
        from tabdp.frame.accessor import DPAccessor, register

        register()  # from now on the libraries hold the real class
        return DPAccessor(frame)


def _register_pandas(pd: ModuleType) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # re-registration warns
        pd.api.extensions.register_dataframe_accessor("dp")(_LazyDP)


def _register_polars(pl: ModuleType) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pl.api.register_dataframe_namespace("dp")(_LazyDP)
        pl.api.register_lazyframe_namespace("dp")(_LazyDP)


def _register_spark(mod: ModuleType) -> None:
    # PySpark has no accessor API: a property on its DataFrame base class (classic and Spark
    # Connect DataFrames both derive from pyspark.sql.dataframe.DataFrame)
    cls = getattr(mod, "DataFrame", None)
    if cls is not None and not isinstance(getattr(cls, "dp", None), property):
        cls.dp = property(_LazyDP, doc="tabdp's differentially private releases (tabdp.frame)")


_REGISTER: dict[str, Callable[[ModuleType], None]] = {
    "pandas": _register_pandas,
    "polars": _register_polars,
    "pyspark.sql.dataframe": _register_spark,
}
def _has_api(module: ModuleType) -> bool:
    """Whether pandas / Polars is imported far enough to register on (its ``api`` exists)."""
    return getattr(module, "api", None) is not None


#: Whether an already imported module is complete enough to register on.
_READY: dict[str, Callable[[ModuleType], bool]] = {
    "pyspark.sql.dataframe": lambda m: getattr(m, "DataFrame", None) is not None,
}


class _AfterImport:
    """Runs a callback right after a named top-level module has been imported for the first time.

    A meta path finder (the protocol of ``importlib.abc.MetaPathFinder``, not subclassed to keep
    ``importlib.abc`` out of ``import tabdp``).
    """

    _tabdp_after_import = True  # marker: one instance per interpreter, even across reloads

    def __init__(self) -> None:
        self.pending: dict[str, Callable[[ModuleType], None]] = {}

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        callback = self.pending.get(fullname)
        if callback is None:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        original = getattr(loader, "exec_module", None)
        if spec is None or loader is None or original is None:
            return None  # let the import system report it; try again on the next import
        finder_self = self

        def exec_module(module: ModuleType) -> None:
            original(module)
            try:
                del loader.exec_module  # restore the loader's own method
            except AttributeError:  # pragma: no cover - loader without an instance __dict__
                pass
            finder_self.pending.pop(fullname, None)
            if not finder_self.pending and finder_self in sys.meta_path:
                sys.meta_path.remove(finder_self)
            try:
                callback(module)
            except Exception as err:  # noqa: BLE001 - never break the user's import
                warnings.warn(f"tabdp could not register the .dp accessor on {fullname}: "
                              f"{type(err).__name__}: {err}. Call tabdp.frame.register() "
                              "after importing it.", RuntimeWarning, stacklevel=2)

        try:
            loader.exec_module = exec_module
        except AttributeError:  # pragma: no cover - loader with __slots__
            return None
        return spec


def install() -> None:
    """Register the ``.dp`` accessor on pandas and Polars now or right after they are imported.

    Idempotent. Libraries that are already imported are registered at once; the others when the
    program first imports them.

    Example:
        >>> install()
        >>> import pandas as pd
        >>> hasattr(pd.DataFrame, "dp")
        True
    """
    finder = next((f for f in sys.meta_path if getattr(f, "_tabdp_after_import", False)), None)
    for name, register in _REGISTER.items():
        module = sys.modules.get(name)
        ready = _READY.get(name, _has_api)
        if module is not None and ready(module):
            register(module)
            continue
        if finder is None:
            finder = _AfterImport()
            sys.meta_path.insert(0, finder)
        finder.pending[name] = register  # type: ignore[attr-defined]
    if finder is not None and not finder.pending and finder in sys.meta_path:  # type: ignore[attr-defined]
        sys.meta_path.remove(finder)
