"""The typed entry point ``tabdp.dp(frame)``: the same accessor as ``frame.dp``, same results.

``.ci/lint`` type-checks ``tests/typecheck/user_script.py`` with mypy --strict; here it runs.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import polars as pl
import pytest

import tabdp
from tabdp.exceptions import UnsupportedBackendError
from tabdp.frame import DPAccessor

HERE = Path(__file__).resolve().parent


def _user_script() -> object:
    spec = importlib.util.spec_from_file_location("tabdp_user_script",
                                                  HERE / "typecheck" / "user_script.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_user_script_runs_and_returns_each_librarys_frames() -> None:
    by_pandas, by_polars, counts = _user_script().release()  # type: ignore[attr-defined]
    assert isinstance(by_pandas, pd.DataFrame) and list(by_pandas["county"]) == ["a", "b"]
    assert isinstance(by_polars, pl.DataFrame) and by_polars["county"].to_list() == ["a", "b"]
    assert isinstance(counts, pl.DataFrame) and counts.columns[:2] == ["county", "count"]


@pytest.mark.parametrize("make", [lambda d: pd.DataFrame(d), lambda d: pl.DataFrame(d),
                                  lambda d: pl.DataFrame(d).lazy()])
def test_dp_is_the_accessor(make: object) -> None:
    data = {"c": ["a", "a", "b"], "x": [1.0, 2.0, 3.0]}
    frame = make(data)  # type: ignore[operator]
    acc = tabdp.dp(frame)
    assert type(acc) is DPAccessor and type(frame.dp) is DPAccessor
    keys = tabdp.KeySet.from_dict(c=["a", "b"])
    mech = tabdp.mechanisms.Gaussian(sigma=1.0)
    a = acc.sum("x", by="c", keys=keys, mechanism=mech, session=tabdp.Session(seed=5))
    b = frame.dp.sum("x", by="c", keys=keys, mechanism=mech, session=tabdp.Session(seed=5))
    if isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b)
    else:
        assert a.equals(b)


@pytest.mark.parametrize("bad", [{"x": [1.0]}, [1.0, 2.0], pd.Series([1.0]), pl.Series([1.0]),
                                 None])
def test_dp_refuses_what_is_not_a_frame(bad: object) -> None:
    with pytest.raises(UnsupportedBackendError, match="expected a pandas DataFrame") as err:
        tabdp.dp(bad)
    assert type(bad).__qualname__ in str(err.value) and "Hint:" in str(err.value)
    assert isinstance(err.value, TypeError)


def test_dp_is_public_and_lazy() -> None:
    assert "dp" in tabdp.__all__ and tabdp.dp is tabdp.frame.dp
