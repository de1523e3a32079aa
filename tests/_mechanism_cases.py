"""Instances of every registered mechanism family, shared by the policy test suites."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import tabdp.mechanisms as M
from tabdp.frame._quantiles import GroupPrivacyPolicy
from tabdp.mechanisms.smooth import SmoothSensitivityMechanism, SmoothSensitivityRelease

#: Instances per registered mechanism family (a new family fails the suites' coverage tests).
CASES: dict[str, list[Any]] = {
    "gaussian": [M.Gaussian(2.0), M.Gaussian(0.3), M.Gaussian(1e5)],
    "laplace": [M.Laplace(3.0), M.Laplace(0.7)],
    "generalized_gaussian": [M.GeneralizedGaussian(1.5, 0.5), M.GeneralizedGaussian(1.5, 0.3),
                             M.GeneralizedGaussian(0.7, 1.0)],
    "exp_polylog": [M.ExpPolyLog(1.0, 1.0, 4.0), M.ExpPolyLog(2.0, 3.0, 1.0, 2.0),
                    M.ExpPolyLog(1.0, 20.0, 0.5, 3.0)],
    "root": [M.RootTransform(2, 1.0), M.RootTransform(1, 3.0), M.RootTransform(4, 2.0),
             M.RootTransform(2, 1.0, 5.0), M.RootTransform(3.5, 0.5, 0.1, estimator="median")],
    "log": [M.LogTransform(2.0, 1.0), M.LogTransform(0.25, 1e5), M.LogTransform(1.0, 1e-300)],
    "unit_splitting": [M.UnitSplitting(10.0, 50**0.5), M.UnitSplitting(0.7, 1.0)],
    "symmetric_stable": [M.SymmetricStable(2.0, 1.0), M.SymmetricStable(1.0, 0.5),
                         M.SymmetricStable(1.5, 2.0)],
    "logistic": [M.Logistic(0.9)],
    "subbotin": [M.Subbotin(1.0, 2.0), M.Subbotin(2.0, 2.0), M.Subbotin(3.0, 2.0, delta=1e-6)],
    "vector_subbotin": [M.VectorSubbotin(2.0, 3.0), M.VectorSubbotin(1.0, 3.0)],
    "discrete_gaussian": [M.DiscreteGaussian(2.0), M.DiscreteGaussian(0.3),
                          M.DiscreteGaussian(Fraction(1, 31))],
    "discrete_laplace": [M.DiscreteLaplace(3.0), M.DiscreteLaplace(Fraction(1, 3))],
    "smooth_sensitivity": [
        SmoothSensitivityMechanism("polyplace", 1.0),
        GroupPrivacyPolicy(SmoothSensitivityRelease("polyplace", 1.0)),
        GroupPrivacyPolicy(SmoothSensitivityRelease("laplace", 1.0, uncertainty_share=0.5,
                                                    delta=1e-6))],
}
