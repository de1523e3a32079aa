"""Deprecation shims kept for one release: each old spelling warns and still gives the same value.

``delta`` used to name the sensitivity Δ in ``rho()``/``epsilon()``/``for_epsilon`` while meaning
the DP δ elsewhere; the sensitivity is now ``sensitivity`` everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import tabdp.mechanisms as mech
from tabdp import registry
from tabdp.mechanisms.smooth import SmoothSensitivityMechanism
from tabdp.planning import TargetCurve

_DEPRECATED = r"'delta' is deprecated.*'sensitivity'"
_EXAMPLES: dict[str, Any] = {
    "gaussian": mech.Gaussian(2.0), "laplace": mech.Laplace(2.0),
    "generalized_gaussian": mech.GeneralizedGaussian(2.0, 0.5),
    "exp_polylog": mech.ExpPolyLog(1.0, 2.0, 4.0), "unit_splitting": mech.UnitSplitting(3.0, 2.0),
    "root": mech.RootTransform(k=2.0, sigma=0.5), "log": mech.LogTransform(0.5, 1.0),
    "symmetric_stable": mech.SymmetricStable(1.5, 1.0), "logistic": mech.Logistic(1.0),
    "subbotin": mech.Subbotin(1.0, 2.0),
    "vector_subbotin": mech.VectorSubbotin(2.0, 2.0),
    "discrete_gaussian": mech.DiscreteGaussian(2.0), "discrete_laplace": mech.DiscreteLaplace(2.0),
    "smooth_sensitivity": SmoothSensitivityMechanism(epsilon=1.0, gamma=0.1),
}


def _same_with_warning(new: Callable[[], Any], old: Callable[[], Any]) -> None:
    expected = new()
    with pytest.warns(DeprecationWarning, match=_DEPRECATED):
        got = old()
    np.testing.assert_array_equal(np.asarray(got, dtype=float), np.asarray(expected, dtype=float))


def test_every_registered_mechanism_has_an_example() -> None:
    """The shim test below covers every registered mechanism."""
    assert set(_EXAMPLES) == set(registry.names("mechanism"))


@pytest.mark.parametrize("family", sorted(_EXAMPLES))
@pytest.mark.parametrize("method", ["rho", "epsilon"])
def test_policy_delta_keyword(family: str, method: str) -> None:
    """``m.rho(delta=x)`` / ``m.epsilon(delta=x)`` warn and equal ``sensitivity=x`` and ``(x)``."""
    f = getattr(_EXAMPLES[family], method)
    x = [0.0, 1.0, 3.0]
    _same_with_warning(lambda: f(sensitivity=x), lambda: f(delta=x))
    np.testing.assert_array_equal(f(x), f(sensitivity=x))


def test_both_names_is_an_error() -> None:
    """Giving both the old and the new name is refused."""
    with pytest.raises(TypeError, match="got both 'sensitivity' and its deprecated name"):
        mech.Gaussian(1.0).rho(sensitivity=1.0, delta=1.0)  # type: ignore[call-arg]


def test_stable_for_epsilon_delta_keyword() -> None:
    """``SymmetricStable.for_epsilon(..., delta=Δ)`` warns and gives the same mechanism."""
    _same_with_warning(
        lambda: mech.SymmetricStable.for_epsilon(1.7, 0.5, sensitivity=3.0).gamma,
        lambda: mech.SymmetricStable.for_epsilon(1.7, 0.5, delta=3.0).gamma)  # type: ignore[call-arg]
    assert mech.SymmetricStable.for_epsilon(1.7, 0.5, 3.0).gamma == pytest.approx(
        3.0 * mech.SymmetricStable.for_epsilon(1.7, 0.5).gamma, rel=1e-12)


def test_stable_min_mad_delta_keyword() -> None:
    """``SymmetricStable.min_mad(epsilon, delta=Δ)`` warns and gives the same mechanism."""
    _same_with_warning(lambda: mech.SymmetricStable.min_mad(1.0, sensitivity=2.0).alpha,
                       lambda: mech.SymmetricStable.min_mad(1.0, delta=2.0).alpha)  # type: ignore[call-arg]


@pytest.mark.parametrize("method", ["at", "rho_at"])
def test_target_curve_delta_keyword(method: str) -> None:
    """``TargetCurve.at/rho_at(delta=...)`` warn and give the same limits."""
    f = getattr(TargetCurve.from_mapping({1.0: 1.0, 100.0: 4.0}, "epsilon"), method)
    _same_with_warning(lambda: f(sensitivity=[3.0]), lambda: f(delta=[3.0]))


def test_target_curve_loss_of_delta_keyword() -> None:
    """``TargetCurve.loss_of(m, delta=...)`` warns and gives the same loss."""
    c = TargetCurve.from_mapping({1.0: 1.0})
    m = mech.Laplace(1.0)
    _same_with_warning(lambda: c.loss_of(m, sensitivity=2.0), lambda: c.loss_of(m, delta=2.0))  # type: ignore[call-arg]


@pytest.mark.parametrize("name", [
    "PolyPlace", "NOISE_FAMILIES", "split_epsilon", "choose_gamma", "default_gamma",
    "gamma_limit", "optimal_shape", "std_per_unit_ss", "std_vs_gamma", "unit_noise", "sum_gamma",
    "min_scale", "epsilon_for_scale", "delta_for_scale", "choose_subbotin_r", "subbotin_mse"])
def test_moved_out_of_tabdp_mechanisms(name: str) -> None:
    """Non-mechanisms left ``tabdp.mechanisms``; the old path warns and gives the same object."""
    import importlib

    home = {"PolyPlace": "tabdp.noise", "sum_gamma": "tabdp.mechanisms.stable"}.get(
        name, "tabdp.privacy.approx" if "scale" in name or "subbotin" in name
        else "tabdp.mechanisms.smooth")
    new = getattr(importlib.import_module(home), name)
    assert name not in mech.__all__ and name not in dir(mech)
    with pytest.warns(DeprecationWarning, match=rf"tabdp.mechanisms.{name} is deprecated.*{home}"):
        assert getattr(mech, name) is new


def test_tabdp_mechanisms_exports_mechanisms_and_their_contract() -> None:
    """``__all__``: mechanism classes plus the types of their interface, nothing else."""
    from tabdp.mechanisms import Mechanism

    contract = {"ReleasedValues", "LawOfSums", "ExactTotals", "DEFAULT_LEVEL", "pure_to_zcdp"}
    for name in set(mech.__all__) - contract:
        assert issubclass(getattr(mech, name), Mechanism) or name.startswith("SmoothSensitivity")
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        _ = mech.nope  # type: ignore[attr-defined]


def test_tabdp_synth_moved_to_datasets() -> None:
    """Names read from ``tabdp.synth`` warn and are those of ``tabdp.datasets.synth``."""
    import sys

    import tabdp
    import tabdp.datasets.synth as new

    sys.modules.pop("tabdp.synth", None)
    old = tabdp.synth  # type: ignore[attr-defined]
    with pytest.warns(DeprecationWarning, match=r"tabdp.synth.generate_establishments is dep"
                                                r"recated.*tabdp.datasets.synth"):
        assert old.generate_establishments is new.generate_establishments
    assert "synth" not in tabdp._SUBMODULES  # not advertised at the top level any more


@pytest.mark.parametrize("name", ["PALETTE", "loss_curves_svg", "moe_curves_svg",
                                  "histogram_svg", "scatter_svg"])
def test_report_plots_moved_to_tabdp_plotting(name: str) -> None:
    """``tabdp.report.plots.X`` warns and is ``tabdp.plotting.X``."""
    import tabdp.plotting
    import tabdp.report.plots as old

    with pytest.warns(DeprecationWarning, match=rf"tabdp.report.plots.{name} is deprecated"):
        assert getattr(old, name) is getattr(tabdp.plotting, name)
