"""Noise distributions: symmetric laws with density, cdf, quantiles, variance and sampling.

Every law follows :class:`NoiseDistribution` (scipy-like contract) and samples by inverse CDF from
a :class:`tabdp.RandomSource`.

Example:
    >>> from tabdp.noise import Gaussian
    >>> Gaussian(sigma=1.0).interval_halfwidth(0.9) > 1.6
    True
"""

from tabdp.noise._base import NoiseDistribution
from tabdp.noise.discrete import DiscreteGaussianNoise, DiscreteLaplaceNoise
from tabdp.noise.exp_polylog import ExpPolyLog
from tabdp.noise.gaussian import Gaussian, Laplace
from tabdp.noise.generalized_gaussian import GeneralizedGaussian
from tabdp.noise.logconcave import Logistic, Subbotin
from tabdp.noise.polyplace import PolyPlace
from tabdp.noise.smooth_baselines import GeneralizedCauchy, StudentT
from tabdp.noise.stable import SymmetricStable

__all__ = ["NoiseDistribution", "Gaussian", "Laplace", "GeneralizedGaussian", "ExpPolyLog",
           "PolyPlace", "StudentT", "GeneralizedCauchy", "DiscreteGaussianNoise",
           "DiscreteLaplaceNoise", "Logistic", "Subbotin", "SymmetricStable"]
