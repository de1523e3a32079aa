"""Mechanisms with per-record guarantees: additive and transformation mechanisms.

This namespace holds the mechanisms, their base classes and the types of their interface
([`ReleasedValues`][tabdp.mechanisms.ReleasedValues], [`LawOfSums`][tabdp.mechanisms.LawOfSums],
[`ExactTotals`][tabdp.mechanisms.ExactTotals], [`DEFAULT_LEVEL`][tabdp.mechanisms.DEFAULT_LEVEL],
[`pure_to_zcdp`][tabdp.mechanisms.pure_to_zcdp]). Noise laws live in [`noise`][tabdp.noise]; the
smooth-sensitivity helpers in `tabdp.mechanisms.smooth`, ``sum_gamma`` in `tabdp.mechanisms.stable`
and the (ε, δ) scale helpers in [`approx`][tabdp.privacy.approx] (their old names here still work
for one release, with a DeprecationWarning).

Every mechanism exposes the PRzCDP policy ``rho(sensitivity)``, the PRDP policy
``epsilon(sensitivity)`` (``inf`` when not pure), ``release(values, rng)`` and
``release_table(values, rng, level)``.

Example:
    >>> from tabdp import mechanisms as mech
    >>> m = mech.LogTransform(sigma=2.0, offset=1.0)
    >>> round(float(m.rho(10000.0)), 4)   # ln(10001)^2 / 8 ([FCD+24] Example 4.8)
    10.604
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tabdp._deprecation import moved_name
from tabdp._lazy_scipy import lazy_package

if TYPE_CHECKING:
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
    from tabdp.mechanisms.discrete import (
        DiscreteAdditiveMechanism,
        DiscreteGaussian,
        DiscreteLaplace,
    )
    from tabdp.mechanisms.logconcave import Logistic, Subbotin, VectorSubbotin
    from tabdp.mechanisms.smooth import SmoothSensitivityMechanism, SmoothSensitivityRelease
    from tabdp.mechanisms.stable import SymmetricStable
    from tabdp.mechanisms.transformation import (
        LogTransform,
        RootTransform,
        TransformationMechanism,
    )

#: Where each public name is defined. The names are loaded on first use (PEP 562): a Spark worker
#: that unpickles one mechanism imports its module only (and its noise law's), not every
#: mechanism with SciPy's special functions and mpmath (stop 68). The registry imports every
#: module here (`_register`) before its first lookup.
_LAZY: dict[str, str] = {
    **dict.fromkeys(("DEFAULT_LEVEL", "LawOfSums", "Mechanism", "ReleasedValues",
                     "pure_to_zcdp"), "_base"),
    "ExactTotals": "_totals",
    **dict.fromkeys(("AdditiveMechanism", "ExpPolyLog", "Gaussian", "GeneralizedGaussian",
                     "Laplace", "UnitSplitting"), "additive"),
    **dict.fromkeys(("DiscreteAdditiveMechanism", "DiscreteGaussian", "DiscreteLaplace"),
                    "discrete"),
    **dict.fromkeys(("Logistic", "Subbotin", "VectorSubbotin"), "logconcave"),
    **dict.fromkeys(("SmoothSensitivityMechanism", "SmoothSensitivityRelease"), "smooth"),
    "SymmetricStable": "stable",
    **dict.fromkeys(("LogTransform", "RootTransform", "TransformationMechanism"),
                    "transformation"),
}

__all__ = [
    # the contract of a mechanism
    "Mechanism",
    "ReleasedValues",
    "LawOfSums",
    "ExactTotals",
    "DEFAULT_LEVEL",
    "pure_to_zcdp",
    # families of mechanisms
    "AdditiveMechanism",
    "DiscreteAdditiveMechanism",
    "TransformationMechanism",
    # mechanisms
    "Gaussian",
    "Laplace",
    "GeneralizedGaussian",
    "ExpPolyLog",
    "UnitSplitting",
    "RootTransform",
    "LogTransform",
    "SymmetricStable",
    "Logistic",
    "Subbotin",
    "VectorSubbotin",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "SmoothSensitivityMechanism",
    "SmoothSensitivityRelease",
]

#: Names that moved out of this namespace (deprecated here for one release): name -> new home.
_MOVED: dict[str, str] = {
    "PolyPlace": "tabdp.noise",
    **{name: "tabdp.mechanisms.smooth" for name in (
        "NOISE_FAMILIES", "split_epsilon", "choose_gamma", "default_gamma", "gamma_limit",
        "optimal_shape", "std_per_unit_ss", "std_vs_gamma", "unit_noise")},
    "sum_gamma": "tabdp.mechanisms.stable",
    **{name: "tabdp.privacy.approx" for name in (
        "min_scale", "epsilon_for_scale", "delta_for_scale", "choose_subbotin_r",
        "subbotin_mse")},
}


def _moved(name: str) -> Any:
    home = _MOVED[name]  # KeyError: not a moved name
    return moved_name(__name__, name, home, getattr(importlib.import_module(home), name))


__getattr__, __dir__ = lazy_package(__name__, _LAZY, __all__, globals(), fallback=_moved,
                                    hidden=frozenset(_MOVED))


def _register() -> None:
    """Import every mechanism module (each registers its families): a registry lookup's need."""
    for module in sorted(set(_LAZY.values())):
        importlib.import_module(f"{__name__}.{module}")
