"""Mechanisms with per-record guarantees: additive and transformation mechanisms.

Every mechanism exposes the PRzCDP policy ``rho(sensitivity)``, the PRDP policy ``epsilon(sensitivity)``
(``inf`` when not pure), ``release(values, rng)`` and ``release_table(values, rng, level)``.

Example:
    >>> from tabdp import mechanisms as mech
    >>> m = mech.LogTransform(sigma=2.0, offset=1.0)
    >>> round(float(m.rho(10000.0)), 4)   # ln(10001)^2 / 8 (seed 001 Example 4.8)
    10.604
"""

from tabdp.mechanisms._base import (
    DEFAULT_LEVEL,
    LawOfSums,
    Mechanism,
    ReleasedValues,
    pure_to_zcdp,
)
from tabdp.mechanisms._totals import ExactTotals
from tabdp.mechanisms.additive import (
    AdditiveMechanism,
    ExpPolyLog,
    Gaussian,
    GeneralizedGaussian,
    Laplace,
    UnitSplitting,
)
from tabdp.mechanisms.transformation import LogTransform, RootTransform, TransformationMechanism
from tabdp.mechanisms.smooth import (
    NOISE_FAMILIES,
    SmoothSensitivityMechanism,
    SmoothSensitivityRelease,
    choose_gamma,
    default_gamma,
    gamma_limit,
    optimal_shape,
    std_per_unit_ss,
    split_epsilon,
    std_vs_gamma,
    unit_noise,
)
from tabdp.mechanisms.discrete import DiscreteGaussian, DiscreteLaplace
from tabdp.mechanisms.logconcave import Logistic, Subbotin, VectorSubbotin
from tabdp.mechanisms.stable import SymmetricStable, sum_gamma
from tabdp.privacy.approx import (
    choose_subbotin_r,
    delta_for_scale,
    epsilon_for_scale,
    min_scale,
    subbotin_mse,
)
from tabdp.noise.polyplace import PolyPlace

__all__ = [
    "ExactTotals",
    "DEFAULT_LEVEL",
    "Mechanism",
    "LawOfSums",
    "ReleasedValues",
    "pure_to_zcdp",
    "AdditiveMechanism",
    "Gaussian",
    "Laplace",
    "GeneralizedGaussian",
    "ExpPolyLog",
    "UnitSplitting",
    "TransformationMechanism",
    "RootTransform",
    "LogTransform",
    "PolyPlace",
    "SmoothSensitivityMechanism",
    "SmoothSensitivityRelease",
    "split_epsilon",
    "NOISE_FAMILIES",
    "choose_gamma",
    "default_gamma",
    "gamma_limit",
    "optimal_shape",
    "std_per_unit_ss",
    "std_vs_gamma",
    "unit_noise",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "SymmetricStable",
    "sum_gamma",
    "Logistic",
    "Subbotin",
    "VectorSubbotin",
    "min_scale",
    "epsilon_for_scale",
    "delta_for_scale",
    "choose_subbotin_r",
    "subbotin_mse",
]
