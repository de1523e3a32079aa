"""Deprecation shims kept for one release: renamed arguments and moved names.

Example:
    >>> import warnings
    >>> @renamed_argument("delta", "sensitivity")
    ... def rho(sensitivity: float) -> float:
    ...     return sensitivity / 2
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     rho(delta=4.0), caught[0].category.__name__
    (2.0, 'DeprecationWarning')
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["renamed_argument", "wrap_sensitivity_methods", "moved_name"]

F = TypeVar("F", bound=Callable[..., Any])

#: Methods whose first argument is the per-record sensitivity Δ (formerly named ``delta``).
SENSITIVITY_METHODS = ("rho", "epsilon")


def renamed_argument(old: str, new: str) -> Callable[[F], F]:
    """Accept the keyword ``old`` for one release as ``new``, with a DeprecationWarning.

    Args:
        old: The former keyword name.
        new: The current keyword name.

    Returns:
        A decorator; positional calls and calls with ``new`` pass through unchanged.

    Example:
        >>> @renamed_argument("delta", "sensitivity")
        ... def f(sensitivity: float) -> float:
        ...     return sensitivity
        >>> f(3.0), f(sensitivity=3.0)
        (3.0, 3.0)
    """
    def deco(fn: F) -> F:
        if getattr(fn, "__renamed_arguments__", {}).get(old) == new:
            return fn

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if old in kwargs:
                if new in kwargs:
                    raise TypeError(
                        f"{fn.__qualname__}() got both {new!r} and its deprecated name {old!r}; "
                        f"got {old}={kwargs[old]!r} and {new}={kwargs[new]!r}.\n"
                        f"Hint: pass {new}= only.")
                warnings.warn(
                    f"{fn.__qualname__}(): the keyword {old!r} is deprecated and will be removed "
                    f"in the next release; use {new!r} (in tabdp, 'sensitivity' is the record's "
                    "sensitivity Δ and 'delta' always the δ of (ε, δ)-DP).",
                    DeprecationWarning, stacklevel=2)
                kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        wrapper.__renamed_arguments__ = {old: new}  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]
    return deco


def wrap_sensitivity_methods(cls: type) -> None:
    """Give the ``rho``/``epsilon`` a class defines the ``delta`` -> ``sensitivity`` shim.

    Only methods whose signature names ``sensitivity`` are wrapped (a subclass written against
    the old name keeps working as it did).

    Args:
        cls: The class (called from ``Mechanism.__init_subclass__``).

    Example:
        >>> from tabdp.mechanisms import Gaussian
        >>> Gaussian.rho.__renamed_arguments__
        {'delta': 'sensitivity'}
    """
    for name in SENSITIVITY_METHODS:
        fn = cls.__dict__.get(name)
        if inspect.isfunction(fn) and "sensitivity" in inspect.signature(fn).parameters:
            setattr(cls, name, renamed_argument("delta", "sensitivity")(fn))


def moved_name(module: str, name: str, new_home: str, value: Any) -> Any:
    """Warn that ``module.name`` moved to ``new_home`` and return its value (for ``__getattr__``).

    Args:
        module: The old module.
        name: The name looked up.
        new_home: The module that holds it now.
        value: The object.

    Returns:
        ``value``.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     moved_name("a", "x", "b", 1), "b.x" in str(caught[0].message)
        (1, True)
    """
    warnings.warn(
        f"{module}.{name} is deprecated there and will be removed in the next release; import it "
        f"from {new_home} ({new_home}.{name}).", DeprecationWarning, stacklevel=3)
    return value
