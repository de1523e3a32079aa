"""Exact rounding as its own layer: strategies composed with a noise law (docs/exact-rounding.md).

A law ([`NoiseDistribution`][tabdp.noise.NoiseDistribution]) holds a `Rounding` in ``law.rounding``:
a float64 quantile-bounds strategy for the fast path and an exact tail for the few cells float64
cannot decide. One module per strategy:

* `closed_form`: bounds from closed forms proven relative to libm
  (Laplace, Logistic, PolyPlace, SaS α = 1; `RelErrorBounds` for any law with a relative
  error bound).
* `taylor`: the Gaussian's Taylor tables (Gaussian, SaS α = 2).
* `certified`: certified Arb tables (generalized Gaussian, Subbotin,
  Student t, generalized Cauchy, exponential polylogarithmic, SaS 1 < α < 2), with the SaS
  series of `stable_series`.
* `highprec`: exact tails in mpmath (closed form or quadrature of
  the exact log-density) and certified Arb tails.

The layer imports no law module: laws import it (one-way dependency).

Example:
    >>> from tabdp.noise import Gaussian
    >>> r = rounder_for(Gaussian(sigma=1.0))
    >>> type(r.quantile).__name__, type(r.tail).__name__
    ('GaussianTaylorBounds', 'ArbTail')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tabdp._lazy_scipy import lazy_package

if TYPE_CHECKING:
    from tabdp.noise.rounding._core import (
        ExactTail,
        NoBounds,
        QuantileBounds,
        Rounding,
        mid_rad,
    )
    from tabdp.noise.rounding.certified import ArbShape, CertifiedBounds
    from tabdp.noise.rounding.closed_form import (
        LaplaceBounds,
        LogisticBounds,
        RelErrorBounds,
        ScaledBounds,
    )
    from tabdp.noise.rounding.compose import rounder_for
    from tabdp.noise.rounding.highprec import ArbTail, MpTail, mp_quad_checked, solve_abs_isf
    from tabdp.noise.rounding.taylor import GaussianTaylorBounds

# The names below are loaded on first use (PEP 562): a law imports the strategies it names, so a
# Spark worker unpickling one law does not import the Gaussian's Taylor tables (mpmath, SciPy).
_LAZY: dict[str, str] = {
    **dict.fromkeys(("ExactTail", "NoBounds", "QuantileBounds", "Rounding", "mid_rad"), "_core"),
    **dict.fromkeys(("ArbShape", "CertifiedBounds"), "certified"),
    **dict.fromkeys(("LaplaceBounds", "LogisticBounds", "RelErrorBounds", "ScaledBounds"),
                    "closed_form"),
    "rounder_for": "compose",
    **dict.fromkeys(("ArbTail", "MpTail", "mp_quad_checked", "solve_abs_isf"), "highprec"),
    "GaussianTaylorBounds": "taylor",
}

__all__ = ["Rounding", "rounder_for", "QuantileBounds", "ExactTail", "NoBounds", "RelErrorBounds",
           "LaplaceBounds", "LogisticBounds", "ScaledBounds", "GaussianTaylorBounds",
           "CertifiedBounds", "ArbShape", "MpTail", "ArbTail", "mp_quad_checked",
           "solve_abs_isf", "mid_rad"]


__getattr__, __dir__ = lazy_package(__name__, _LAZY, __all__, globals())
