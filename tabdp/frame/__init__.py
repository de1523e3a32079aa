"""Frame layer: key sets, grouped releases and the ``.dp`` accessors (pandas, Polars).

Example:
    >>> from tabdp.frame import KeySet
    >>> len(KeySet.from_dict(a=[1, 2], b=[1, 2, 3]))
    6
"""

from tabdp.frame._engine import count_mechanism
from tabdp.frame._grid import GRID_SPREAD_SHARE, coarse_grid
from tabdp.frame._output import (
    LONG_COLUMNS,
    STAT_SUFFIXES,
    WIDE_SUFFIXES,
    coefficient_of_variation,
    flag_codes,
    long_to_wide,
)
from tabdp.frame.accessor import DPAccessor, dp, register
from tabdp.frame.keys import KeySet

__all__ = ["DPAccessor", "KeySet", "count_mechanism", "dp", "register",
           # the one check of a caller's table grid (spec tables and the accessor)
           "GRID_SPREAD_SHARE", "coarse_grid",
           # the output model of a release (columns of the long and wide forms, cv and flags),
           # shared with tabdp.release
           "LONG_COLUMNS", "STAT_SUFFIXES", "WIDE_SUFFIXES", "coefficient_of_variation",
           "flag_codes", "long_to_wide"]
