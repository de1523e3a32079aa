# pyright: strict
"""A user's script, type-checked in CI (``.ci/lint``): mypy --strict and pyright (strict) pass.

It uses tabdp the way an analyst would, through the typed entry point ``tabdp.dp(frame)`` (the
``.dp`` attribute is registered at run time and invisible to type checkers). The annotations
assert what the checker infers: a pandas frame gives pandas results, a Polars DataFrame or
LazyFrame gives Polars DataFrames. ``tests/test_typing.py`` also runs it.
"""

from __future__ import annotations

import pandas as pd
import polars as pl

import tabdp
from tabdp.mechanisms import Gaussian


def release() -> tuple[pd.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Three releases of one small frame: pandas, Polars eager and Polars lazy."""
    data = {"county": ["a", "a", "b"], "payroll": [10.0, 20.0, 5.0]}
    keys = tabdp.KeySet.from_dict(county=["a", "b"])
    session = tabdp.Session(seed=1)
    mechanism = Gaussian(sigma=1.0)

    by_pandas: pd.DataFrame = tabdp.dp(pd.DataFrame(data)).sum(
        "payroll", by="county", keys=keys, mechanism=mechanism, session=session)
    by_polars: pl.DataFrame = tabdp.dp(pl.DataFrame(data)).sum(
        "payroll", by="county", keys=keys, mechanism=mechanism, session=session)
    counts: pl.DataFrame = tabdp.dp(pl.DataFrame(data).lazy()).count(
        by="county", keys=keys, session=session)
    return by_pandas, by_polars, counts


if __name__ == "__main__":
    pandas_out, polars_out, count_out = release()
    print(list(pandas_out.columns))
    print(polars_out.height, count_out["count"].to_list())
