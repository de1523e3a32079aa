"""Which `Rounding` a law is released with.

Example:
    >>> from tabdp.noise import Laplace
    >>> type(rounder_for(Laplace(scale=1.0)).quantile).__name__
    'LaplaceBounds'
"""

from __future__ import annotations

import warnings
from typing import Any

from tabdp.noise.rounding._core import Rounding
from tabdp.noise.rounding.closed_form import RelErrorBounds
from tabdp.noise.rounding.highprec import MpTail

__all__ = ["rounder_for"]


def rounder_for(law: Any) -> Rounding | None:
    """The `Rounding` composed with ``law`` (None: no exact rounding for it).

    A law written for the previous, inherited contract (no ``rounding``, but an mpmath tail
    ``_mp_sf(x, mp)`` or log-density ``_mp_logpdf(x, mp)``, and optionally a relative error bound
    ``_isf_rtol`` / ``_isf_rel_error(u, m)``) still gets the rounding it had, with a
    ``DeprecationWarning``: `RelErrorBounds` and
    `MpTail`. This shim will be removed in the next release.

    Args:
        law: A noise law.

    Returns:
        Its rounding, or None.

    Example:
        >>> from tabdp.noise import Gaussian
        >>> type(rounder_for(Gaussian(sigma=1.0)).quantile).__name__
        'GaussianTaylorBounds'
    """
    r = getattr(law, "rounding", None)
    if isinstance(r, Rounding):
        return r
    return _legacy_rounding(law)


def _legacy_rounding(law: Any) -> Rounding | None:
    """The rounding of a law that still declares the removed hooks (deprecated), or None."""
    has_sf = callable(getattr(law, "_mp_sf", None))
    if not (has_sf or callable(getattr(law, "_mp_logpdf", None))):
        return None
    warnings.warn(
        f"{type(law).__name__}: exact rounding through the hooks _mp_sf/_mp_logpdf/_isf_rtol is "
        "deprecated and will be removed in the next release; give the law a `rounding` "
        "(tabdp.noise.rounding.Rounding, e.g. Rounding(law, RelErrorBounds(law, rtol), "
        "MpTail(law))), see docs/exact-rounding.md §9.", DeprecationWarning, stacklevel=3)
    rel = getattr(law, "_isf_rel_error", None)
    rtol = rel if callable(rel) else getattr(law, "_isf_rtol", None)
    return Rounding(law, RelErrorBounds(law, rtol), MpTail(law, quadrature=not has_sf))
