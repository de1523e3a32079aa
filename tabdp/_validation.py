"""Small validators for scalar parameters, shared by every layer (no dataframe imports)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, TypeVar

from tabdp.exceptions import InvalidParameterError

_K = TypeVar("_K")


def bounds_text(gt: float | None = None, ge: float | None = None, lt: float | None = None,
                le: float | None = None) -> str:
    """The allowed range of a number in words (``""`` when unbounded).

    Args:
        gt: Strict lower bound, if any.
        ge: Inclusive lower bound, if any.
        lt: Strict upper bound, if any.
        le: Inclusive upper bound, if any.

    Returns:
        E.g. ``"> 0 and < 1"``.

    Example:
        >>> bounds_text(gt=0, lt=1)
        '> 0 and < 1'
    """
    parts = [f"{op} {b:.12g}" for op, b in ((">", gt), (">=", ge), ("<", lt), ("<=", le))
             if b is not None]
    return " and ".join(parts)


def check_real(name: str, value: Any, *, owner: str, gt: float | None = None,
               ge: float | None = None, le: float | None = None, lt: float | None = None,
               hint: str = "") -> float:
    """Return ``value`` as a finite float after checking its bounds.

    Args:
        name: Parameter name, used in the message.
        value: The value received.
        owner: What the parameter belongs to (e.g. ``"Gaussian"``).
        gt: Strict lower bound, if any.
        ge: Inclusive lower bound, if any.
        le: Inclusive upper bound, if any.
        lt: Strict upper bound, if any.
        hint: How to fix a bad value.

    Returns:
        The value as a Python float.

    Raises:
        InvalidParameterError: If the value is not a finite real number within the bounds.

    Example:
        >>> check_real("sigma", 2, owner="Gaussian", gt=0)
        2.0
    """
    allowed_text = bounds_text(gt, ge, lt, le) or "a finite real number"
    suffix = f"\nHint: {hint}" if hint else ""
    if isinstance(value, bool) or (not isinstance(value, (int, float))
                                   and not hasattr(value, "__float__")):
        raise InvalidParameterError(
            f"{owner}: {name} must be a real number ({allowed_text}); got {value!r} of type "
            f"{type(value).__name__}.{suffix}")
    x = float(value)
    ok = math.isfinite(x)
    ok = ok and (gt is None or x > gt) and (ge is None or x >= ge)
    ok = ok and (lt is None or x < lt) and (le is None or x <= le)
    if not ok:
        raise InvalidParameterError(
            f"{owner}: {name} must be finite and {allowed_text}; got {value!r}.{suffix}")
    return x


def check_int(name: str, value: Any, *, owner: str, ge: int = 1, hint: str = "") -> int:
    """Return ``value`` as an int after checking it is a whole number ``>= ge``.

    Args:
        name: Parameter name.
        value: The value received (an int, or a float with no fractional part).
        owner: What the parameter belongs to.
        ge: Inclusive lower bound.
        hint: How to fix a bad value.

    Returns:
        The value as a Python int.

    Raises:
        InvalidParameterError: If the value is not a whole number ``>= ge``.

    Example:
        >>> check_int("k", 4.0, owner="RootTransform")
        4
    """
    suffix = f"\nHint: {hint}" if hint else ""
    bad = isinstance(value, bool)
    try:
        x = float(value)
        bad = bad or not math.isfinite(x) or x != int(x) or int(x) < ge
    except (TypeError, ValueError):
        bad = True
    if bad:
        raise InvalidParameterError(
            f"{owner}: {name} must be a whole number >= {ge}; got {value!r}.{suffix}")
    return int(float(value))


def check_level(level: float) -> float:
    """Validate a confidence level in (0, 1).

    Args:
        level: The level.

    Returns:
        The level as float.

    Example:
        >>> check_level(0.9)
        0.9
    """
    return check_real("level", level, owner="margin of error", gt=0.0, lt=1.0,
                      hint="use e.g. level=0.9 for 90% margins of error")


#: Coefficient-of-variation thresholds (``cv_flag``, ``suppress_cv``) must be below this: a cv
#: is ``sd / |estimate|`` written as a fraction (0.3 is 30 %). A threshold above 1 (an sd larger
#: than the estimate, e.g. ``suppress_cv = 2``) is meaningful and accepted; one of 5 or more
#: (an sd five times the estimate) is almost always a percentage written as a whole number
#: (``cv_flag = 30`` would flag only cells whose sd is 30 times their estimate), so it is refused.
CV_THRESHOLD_LIMIT = 5.0


def cv_threshold_fix(value: float, name: str = "cv_flag") -> str:
    """The fix for a cv threshold of `CV_THRESHOLD_LIMIT` or more (most likely a percentage).

    Args:
        value: The threshold received.
        name: How the threshold is written (a spec key or a parameter name).

    Returns:
        The fix, in words.

    Example:
        >>> cv_threshold_fix(30)
        'write cv_flag = 0.3 for 30 % (a cv is a fraction: sd / |estimate|, below 5).'
    """
    pct = f"write {name} = {value / 100:g} for {value:g} % " if value <= 100 else (
        f"write {name} as a fraction, e.g. {name} = 0.3 for 30 % ")
    return pct + f"(a cv is a fraction: sd / |estimate|, below {CV_THRESHOLD_LIMIT:g})."


def check_cv_threshold(name: str, value: Any, *, owner: str) -> float:
    """Validate a coefficient-of-variation threshold: a number in (0, 5).

    Args:
        name: Parameter name, used in the message.
        value: The value received.
        owner: What the parameter belongs to.

    Returns:
        The threshold as float.

    Raises:
        InvalidParameterError: Not a number in (0, 5) (``30``: the hint says to write 0.3).

    Example:
        >>> check_cv_threshold("cv_flag", 0.3, owner="forecast")
        0.3
    """
    x = check_real(name, value, owner=owner, gt=0.0,
                   hint=f"a coefficient of variation such as {name}=0.3 (30 %)")
    if x >= CV_THRESHOLD_LIMIT:
        raise InvalidParameterError(
            f"{owner}: {name} must be > 0 and below {CV_THRESHOLD_LIMIT:g} (a coefficient of "
            f"variation as a fraction); got {value!r}.\nHint: "
            + cv_threshold_fix(x, name).replace(f"{name} = ", f"{name}="))
    return x


def first_fall(points: Iterable[tuple[float, float, _K]]
               ) -> tuple[tuple[float, float, _K], tuple[float, float, _K]] | None:
    """The first place where a size curve falls: a value below the one at the next smaller size.

    Budget curves, lifetime budgets and calibration targets may not fall with the record size
    (a larger record may not be given less loss than a smaller one); each caller words its own
    refusal from the two points returned. Equal values do not fall.

    Args:
        points: ``(size, value, label)`` triples, in any order, with distinct sizes (the
            label, such as the size as the user wrote it, comes back with its point).

    Returns:
        ``(smaller, larger)``, the two neighbouring points (in size order) where the value
        falls first, or None where it never falls.

    Example:
        >>> first_fall([(1e7, 0.2, "1e7"), (1e3, 0.5, "1e3")])
        ((1000.0, 0.5, '1e3'), (10000000.0, 0.2, '1e7'))
        >>> first_fall([(1e3, 0.5, "a"), (1e7, 0.5, "b")]) is None
        True
    """
    pts = sorted(points, key=lambda p: p[0])
    for lo, hi in zip(pts, pts[1:], strict=False):
        if hi[1] < lo[1]:
            return lo, hi
    return None
