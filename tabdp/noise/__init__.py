"""Noise distributions: symmetric laws with density, cdf, quantiles, variance and sampling.

Every law follows [`NoiseDistribution`][tabdp.noise.NoiseDistribution] (scipy-like contract) and
samples by inverse CDF from a [`tabdp.RandomSource`][tabdp.RandomSource].

Example:
    >>> from tabdp.noise import Gaussian
    >>> Gaussian(sigma=1.0).interval_halfwidth(0.9) > 1.6
    True
"""

from tabdp import registry as _registry
from tabdp.noise._base import NoiseDistribution
from tabdp.noise.discrete import DiscreteGaussianNoise, DiscreteLaplaceNoise
from tabdp.noise.exp_polylog import ExpPolyLog
from tabdp.noise.gaussian import Gaussian, Laplace
from tabdp.noise.generalized_gaussian import GeneralizedGaussian
from tabdp.noise.logconcave import Logistic, Subbotin
from tabdp.noise.polyplace import PolyPlace
from tabdp.noise.smooth_baselines import GeneralizedCauchy, StudentT
from tabdp.noise.stable import SymmetricStable

# Each law's public family name (tabdp.registry); "smooth": a smooth-sensitivity noise law.
for _name, _cls, _aliases, _tags in [
        ("polyplace", PolyPlace, (), ("smooth",)), ("student_t", StudentT, (), ("smooth",)),
        ("cauchy", GeneralizedCauchy, ("generalized_cauchy",), ("smooth",)),
        ("laplace", Laplace, (), ("smooth",)), ("gaussian", Gaussian, (), ()),
        ("generalized_gaussian", GeneralizedGaussian, (), ()), ("exp_polylog", ExpPolyLog, (), ()),
        ("discrete_gaussian", DiscreteGaussianNoise, (), ()),
        ("discrete_laplace", DiscreteLaplaceNoise, (), ()), ("logistic", Logistic, (), ()),
        ("subbotin", Subbotin, (), ()), ("symmetric_stable", SymmetricStable, ("stable",), ())]:
    _registry.noise_law(_name, _cls, aliases=_aliases, tags=_tags)

__all__ = ["NoiseDistribution", "Gaussian", "Laplace", "GeneralizedGaussian", "ExpPolyLog",
           "PolyPlace", "StudentT", "GeneralizedCauchy", "DiscreteGaussianNoise",
           "DiscreteLaplaceNoise", "Logistic", "Subbotin", "SymmetricStable"]
