"""Small numeric helpers shared across tabdp (package-private).

Example:
    >>> ceil_snap(np.array([2.1 / 0.7, 1e7 / 0.37])).tolist()
    [3.0, 27027028.0]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

__all__ = ["ceil_snap", "integer_dtype"]


def ceil_snap(x: np.ndarray) -> np.ndarray:
    """``ceil`` that snaps ratios within a few ulps of an integer to it (2.1/0.7 → 3).

    The tolerance is kept at 8 ulps (not 1e-9 relative) so that a real fraction of a large ratio
    (1e7/0.37 = 27027027.027) is never snapped down: that would under-count the loss.

    Args:
        x: Ratios.

    Returns:
        Their ceilings, with near-integers snapped.

    Example:
        >>> ceil_snap(np.array([0.5, 2.0000000000000004])).tolist()
        [1.0, 2.0]
    """
    r = np.rint(x)
    near = np.abs(x - r) <= 8.0 * np.finfo(np.float64).eps * np.maximum(1.0, np.abs(x))
    return np.where(near, r, np.ceil(x))


def integer_dtype(dtype: Any) -> bool:
    """Whether a measure's Polars dtype gives integer estimates (Int64 output).

    Integer dtypes of at most 64 bits, except UInt64: sums of wider integers (Int128, UInt64,
    UInt128) are far more likely to pass the Int64 range, so they stay Float64 (a public choice
    made from the schema alone). An Int64 estimate beyond ±(2**63 - 1024) is null.

    Args:
        dtype: A Polars dtype.

    Returns:
        True for Int8 ... Int64 and UInt8 ... UInt32.

    Example:
        >>> integer_dtype(pl.Int32), integer_dtype(pl.UInt64), integer_dtype(pl.Float64)
        (True, False, False)
    """
    wide = tuple(t for t in (getattr(pl, "Int128", None), getattr(pl, "UInt128", None), pl.UInt64)
                 if t is not None)
    return bool(dtype.is_integer()) and dtype not in wide
