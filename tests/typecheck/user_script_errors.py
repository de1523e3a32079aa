"""Misuses the type checker must catch (``.ci/lint`` expects an error on each marked line).

Each line ending in ``# error: <code>`` must get a mypy error of that code (and a pyright error),
and no other line any: this shows the typed entry point carries real types (not ``Any``).
"""

from __future__ import annotations

import pandas as pd
import polars as pl

import tabdp
from tabdp.mechanisms import Gaussian


def misuse() -> None:
    """Wrong argument types and a result assigned to the other library's frame."""
    keys = tabdp.KeySet.from_dict(county=["a", "b"])
    frame = pl.DataFrame({"county": ["a"], "payroll": [1.0]})
    mechanism = Gaussian(sigma=1.0)
    wrong: pd.DataFrame = tabdp.dp(frame).sum(  # error: assignment
        "payroll", by="county", keys=keys, mechanism=mechanism)
    tabdp.dp(frame).sum("payroll", by="county", keys=keys, mechanism=0.5)  # error: arg-type
    tabdp.dp(frame).total("payroll")  # error: attr-defined
    print(wrong)
