"""Noise scales a release cannot draw at are refused before any data is read (review r36 F5).

``Gaussian(sigma=1e-300)`` was refused only when the noise was drawn ("scale below 2**-960"),
and ``Gaussian(sigma=1e300)`` raised a raw ``OverflowError`` from the noise's variance, both
after the data was read: in author mode the generic data failure blamed the curator's data.
Every additive mechanism's scale is now checked from its public parameters, in the argument
checks of a release and when a spec is loaded. The policy functions keep working at those
scales (a mechanism object is also a policy: ``tests/noise/test_extreme_parameters.py``).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl
import pytest
from _specs import one_table_spec

import tabdp
from tabdp import cli
from tabdp import mechanisms as M
from tabdp.exceptions import InvalidParameterError, SpecError
from tabdp.release.spec import load_spec

FAMILIES: dict[str, Callable[[float], Any]] = {
    "gaussian": lambda s: M.Gaussian(sigma=s),
    "laplace": lambda s: M.Laplace(scale=s),
    "generalized_gaussian": lambda s: M.GeneralizedGaussian(sigma=s, p=0.5),
    "exp_polylog": lambda s: M.ExpPolyLog(sigma=s, a=1.0, d=4.0, p=1.0),
    "unit_splitting": lambda s: M.UnitSplitting(threshold=1.0, sigma=s),
    "logistic": lambda s: M.Logistic(scale=s),
    "subbotin": lambda s: M.Subbotin(r=3.0, scale=s, delta=1e-9),
    "vector_subbotin": lambda s: M.VectorSubbotin(r=2.0, scale=s),
    "symmetric_stable": lambda s: M.SymmetricStable(alpha=1.5, gamma=s),
}
NAME = {"laplace": "scale", "logistic": "scale", "subbotin": "scale",
        "vector_subbotin": "scale", "symmetric_stable": "gamma"}
KEYS = tabdp.KeySet.from_dict(c=["a", "b"])


def _boom(s: pl.Series) -> pl.Series:
    raise RuntimeError("the data was read")


def _unreadable() -> pl.LazyFrame:
    """A frame whose schema is known but whose values cannot be read."""
    return pl.LazyFrame({"id": [1, 2, 3], "c": ["a", "a", "b"], "x": [1.0, 2.0, 3.0]}).with_columns(
        pl.col("x").map_batches(_boom, return_dtype=pl.Float64))


@pytest.mark.filterwarnings("ignore::tabdp.exceptions.UsabilityWarning")  # stable: no sd
@pytest.mark.parametrize("scale", [1e-300, 1e300])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_extreme_scale_is_refused_before_the_data_is_read(family: str, scale: float) -> None:
    mech = FAMILIES[family](scale)        # a policy at this scale is still a valid object
    name = NAME.get(family, "sigma")
    with pytest.raises(InvalidParameterError) as err:
        mech.check_releasable()
    text = str(err.value)
    assert f"{name}={scale!r}" in text and ("too small" if scale < 1 else "too large") in text
    assert "allowed here" in text and "Hint:" in text
    with pytest.raises(InvalidParameterError) as err:   # not the frame's RuntimeError
        _unreadable().dp.sum("x", by="c", keys=KEYS, mechanism=mech, negatives="allow",
                             session=tabdp.Session(seed=0, unit="id"))
    assert f"{name}={scale!r}" in str(err.value)
    ok = FAMILIES[family](1.0)
    ok.check_releasable()
    with pytest.raises(RuntimeError, match="the data was read"):  # an ordinary scale reads
        _unreadable().dp.sum("x", by="c", keys=KEYS, mechanism=ok, negatives="allow",
                             session=tabdp.Session(seed=0, unit="id"))


@pytest.mark.parametrize("mech", [M.Gaussian(sigma=1e-300), M.Gaussian(sigma=1e300),
                                  M.Laplace(scale=1e300)])
def test_author_mode_gets_the_parameter_error_not_a_data_failure(mech: Any) -> None:
    """The reviewer's script (/tmp/r36b/api/extreme.py): not the generic data failure."""
    cur = tabdp.Curator(seed=1)
    cur.add("d", pd.DataFrame({"id": [1, 2, 3], "c": ["a", "a", "b"], "x": [1.0, 2.0, 3.0]}),
            schema={"id": "Int64", "c": "String", "x": "Float64"}, unit="id")
    with pytest.raises(InvalidParameterError, match="to draw noise with"):
        cur.author_session("d").sum("x", by="c", keys=KEYS, mechanism=mech, nulls="zero",
                                    negatives="allow")


def test_vector_weights_are_checked() -> None:
    mech = M.VectorSubbotin(r=2.0, scale=1.0, weights={"x": 1e-300})
    with pytest.raises(InvalidParameterError, match=r"weights\['x'\]=1e-300"):
        mech.check_releasable()
    frame = _unreadable().with_columns(pl.col("x").alias("y"))
    with pytest.raises(InvalidParameterError, match=r"weights\['x'\]"):
        frame.dp.sum(["x", "y"], by="c", keys=KEYS, mechanism=mech, negatives="allow",
                     session=tabdp.Session(seed=0, unit="id"))


def test_direct_release_raises_the_parameter_error() -> None:
    """``release_table`` on its own: an InvalidParameterError, not a raw OverflowError."""
    with pytest.raises(InvalidParameterError, match="too large"):
        M.Gaussian(sigma=1e300).release_table([1.0, 2.0], rng=1)


def test_standard_deviation_overflow_is_refused() -> None:
    """A typical size in range but a variance beyond a double (ExpPolyLog with a large d)."""
    mech = M.ExpPolyLog(sigma=4.7e156, a=1.0, d=1e6, p=1.0)
    with pytest.raises(InvalidParameterError, match="standard deviation overflows"):
        mech.check_releasable()


@pytest.mark.parametrize("sigma", ["1e-300", "1e300"])
def test_spec_refuses_the_scale_when_it_is_loaded(tmp_path: Path, sigma: str) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text(one_table_spec(f'{{ family = "gaussian", sigma = {sigma} }}'),
                    encoding="utf-8")
    with pytest.raises(SpecError) as err:
        load_spec(spec)
    assert "tables[0].mechanism.sigma" in str(err.value) and "to draw noise with" in str(err.value)
    out, errs = io.StringIO(), io.StringIO()
    assert cli.main(["validate", str(spec)], stdout=out, stderr=errs) == 2
    assert "too " in errs.getvalue() and "allowed here" in errs.getvalue()


# origin: review r37 (F6: a transformation mechanism's extreme sigma failed with a raw
# ValueError or OverflowError: after the data in the accessor, exit 70 with a traceback in a run)
@pytest.mark.parametrize("sigma", [1e-200, 1e200])
@pytest.mark.parametrize("family", ["log", "root"])
def test_a_transformation_mechanisms_extreme_sigma_is_refused_before_data(
        tmp_path: Path, family: str, sigma: float) -> None:
    mech = (M.LogTransform(sigma=sigma, offset=1.0) if family == "log"
            else M.RootTransform(k=2, sigma=sigma, offset=1.0))
    with pytest.raises(InvalidParameterError, match=re.escape(f"sigma={sigma:g} is outside")):
        _unreadable().dp.sum("x", by="c", keys=KEYS, mechanism=mech, negatives="allow",
                             session=tabdp.Session(seed=0, unit="id"))
    ok = (M.LogTransform(sigma=0.1, offset=1.0) if family == "log"
          else M.RootTransform(k=2, sigma=0.5, offset=1.0))
    with pytest.raises(RuntimeError, match="the data was read"):
        _unreadable().dp.sum("x", by="c", keys=KEYS, mechanism=ok, negatives="allow",
                             session=tabdp.Session(seed=0, unit="id"))
    extra = ", k = 2" if family == "root" else ""
    spec = tmp_path / "s.toml"
    spec.write_text(one_table_spec(
        f'{{ family = "{family}", sigma = {sigma:g}, offset = 1.0{extra} }}'), encoding="utf-8")
    out, errs = io.StringIO(), io.StringIO()
    assert cli.main(["validate", str(spec)], stdout=out, stderr=errs) == 2
    assert "outside the range" in errs.getvalue() and "Traceback" not in errs.getvalue()
