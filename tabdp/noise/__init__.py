"""Noise distributions: symmetric laws with density, cdf, quantiles, variance and sampling.

Every law follows [`NoiseDistribution`][tabdp.noise.NoiseDistribution] (scipy-like contract) and
samples by inverse CDF from a [`tabdp.RandomSource`][tabdp.RandomSource].

Example:
    >>> from tabdp.noise import Gaussian
    >>> Gaussian(sigma=1.0).interval_halfwidth(0.9) > 1.6
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tabdp._lazy_scipy import lazy_package

if TYPE_CHECKING:
    from tabdp.noise._base import NoiseDistribution
    from tabdp.noise.discrete import DiscreteGaussianNoise, DiscreteLaplaceNoise
    from tabdp.noise.exp_polylog import ExpPolyLog
    from tabdp.noise.gaussian import Gaussian, Laplace
    from tabdp.noise.generalized_gaussian import GeneralizedGaussian
    from tabdp.noise.logconcave import Logistic, Subbotin
    from tabdp.noise.polyplace import PolyPlace
    from tabdp.noise.smooth_baselines import GeneralizedCauchy, StudentT
    from tabdp.noise.stable import SymmetricStable

# The laws are loaded on first use (PEP 562): a Spark worker that unpickles one mechanism imports
# its law's module only, not SciPy's special functions and mpmath with every other law's.
_LAZY: dict[str, str] = {
    "NoiseDistribution": "_base",
    "DiscreteGaussianNoise": "discrete",
    "DiscreteLaplaceNoise": "discrete",
    "ExpPolyLog": "exp_polylog",
    "Gaussian": "gaussian",
    "Laplace": "gaussian",
    "GeneralizedGaussian": "generalized_gaussian",
    "Logistic": "logconcave",
    "Subbotin": "logconcave",
    "PolyPlace": "polyplace",
    "GeneralizedCauchy": "smooth_baselines",
    "StudentT": "smooth_baselines",
    "SymmetricStable": "stable",
}

# Each law's public family name (tabdp.registry, which calls `_register` before its first
# lookup); "smooth": a smooth-sensitivity noise law.
_FAMILIES: list[tuple[str, str, tuple[str, ...], tuple[str, ...]]] = [
    ("polyplace", "PolyPlace", (), ("smooth",)), ("student_t", "StudentT", (), ("smooth",)),
    ("cauchy", "GeneralizedCauchy", ("generalized_cauchy",), ("smooth",)),
    ("laplace", "Laplace", (), ("smooth",)), ("gaussian", "Gaussian", (), ()),
    ("generalized_gaussian", "GeneralizedGaussian", (), ()), ("exp_polylog", "ExpPolyLog", (), ()),
    ("discrete_gaussian", "DiscreteGaussianNoise", (), ()),
    ("discrete_laplace", "DiscreteLaplaceNoise", (), ()), ("logistic", "Logistic", (), ()),
    ("subbotin", "Subbotin", (), ()), ("symmetric_stable", "SymmetricStable", ("stable",), ())]

__all__ = ["NoiseDistribution", "Gaussian", "Laplace", "GeneralizedGaussian", "ExpPolyLog",
           "PolyPlace", "StudentT", "GeneralizedCauchy", "DiscreteGaussianNoise",
           "DiscreteLaplaceNoise", "Logistic", "Subbotin", "SymmetricStable"]


__getattr__, __dir__ = lazy_package(__name__, _LAZY, __all__, globals())


def _register() -> None:
    """Register every law's family name (imports every law: what a registry lookup needs)."""
    from tabdp import registry

    for name, cls, aliases, tags in _FAMILIES:
        registry.noise_law(name, __getattr__(cls), aliases=aliases, tags=tags)
