"""The family registry: one canonical name per mechanism and noise law, aliases on input."""

from __future__ import annotations

import pytest

import tabdp.mechanisms as mech
import tabdp.noise as noise
from tabdp import registry
from tabdp.calibrate import FAMILIES, calibrate
from tabdp.exceptions import InvalidParameterError
from tabdp.mechanisms.smooth import NOISE_FAMILIES
from tabdp.release.spec import CALIBRATION_FAMILIES, MECHANISM_FAMILIES


def test_every_mechanism_class_registers_its_family_once() -> None:
    """Each mechanism class is registered once, and its ``family`` is the canonical name."""
    fams = registry.families("mechanism")
    assert len({f.name for f in fams}) == len(fams) == 14
    for f in fams:
        assert f.cls.family == f.name  # type: ignore[attr-defined]
        assert getattr(mech, f.cls.__name__) is f.cls
        assert registry.family_of(f.cls) == f.name
    assert mech.LogTransform.family == "log" and mech.RootTransform.family == "root"
    assert mech.SymmetricStable.family == "symmetric_stable"


def test_readers_use_the_registry() -> None:
    """Spec parser, calibration and smooth-sensitivity read their family lists from it."""
    assert FAMILIES == CALIBRATION_FAMILIES == (
        "gaussian", "laplace", "generalized_gaussian", "exp_polylog", "root", "log",
        "unit_splitting")
    assert MECHANISM_FAMILIES["log"] == "LogTransform"
    assert MECHANISM_FAMILIES["symmetric_stable"] == "SymmetricStable"
    assert "smooth_sensitivity" not in MECHANISM_FAMILIES
    assert NOISE_FAMILIES == ("polyplace", "student_t", "cauchy", "laplace")
    assert registry.get("cauchy", kind="noise").cls is noise.GeneralizedCauchy


@pytest.mark.parametrize(("given", "expected"), [
    ("log", "log"), ("log_transform", "log"), ("root_transform", "root"),
    ("stable", "symmetric_stable"), ("symmetric_stable", "symmetric_stable")])
def test_aliases(given: str, expected: str) -> None:
    """Aliases map to the canonical name."""
    assert registry.canonical(given) == expected
    assert registry.get(given).name == expected


def test_loose_lookup_and_calibrate_aliases() -> None:
    """Class names and spelling variants only in loose mode (calibrate's input)."""
    assert registry.canonical("LogTransform") is None
    assert registry.canonical("LogTransform", loose=True) == "log"
    assert registry.canonical("log-transform", loose=True) == "log"
    assert calibrate("log_transform", {1e3: 0.5}, 1e3).family == "log"


def test_unknown_and_conflicting_names() -> None:
    """Unknown names get a hint; a name taken by another class is refused."""
    with pytest.raises(InvalidParameterError, match=r"unknown mechanism family 'lgo'.*'log'"):
        registry.get("lgo")

    class Other:
        pass

    with pytest.raises(InvalidParameterError, match="already registered by LogTransform"):
        registry.register("log_transform", "mechanism", Other)
    assert registry.canonical("log_transform") == "log"


def test_a_module_run_again_registers_its_classes_again() -> None:
    """A module run again (pytest's importlib mode) registers its classes again (stop 66).

    Before, ``pytest --doctest-modules tabdp/mechanisms/transformation.py`` stopped at
    collection: the second run's ``RootTransform`` was refused as another class under 'root'.
    """
    import importlib.util

    from tabdp.mechanisms import transformation

    before = registry.get("root").cls
    saved = dict(registry._FAMILIES), dict(registry._LOOKUP)
    spec = importlib.util.spec_from_file_location(transformation.__name__,
                                                  transformation.__file__)
    assert spec is not None and spec.loader is not None
    again = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(again)  # the same classes, defined anew
        assert registry.get("root").cls is again.RootTransform is not before
    finally:
        for table, old in zip((registry._FAMILIES, registry._LOOKUP), saved, strict=True):
            table.clear()
            table.update(old)  # type: ignore[arg-type]
    assert registry.get("root").cls is before
