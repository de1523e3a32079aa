"""Sensitivity analysis: smooth sensitivity of medians and quantiles per group, docs/math/smooth.md.

Example:
    >>> from tabdp.sensitivity import smooth_sensitivity_median
    >>> round(smooth_sensitivity_median([3.0, 4.0, 5.0], gamma=0.5, bounds=(0.0, 10.0)), 4)
    3.6392
"""

from tabdp.sensitivity.smooth import (
    group_sort,
    grouped_quantile,
    quantile_rank,
    smooth_sensitivity_grouped,
    smooth_sensitivity_median,
    smooth_sensitivity_quantile,
)

__all__ = [
    "quantile_rank",
    "group_sort",
    "grouped_quantile",
    "smooth_sensitivity_grouped",
    "smooth_sensitivity_quantile",
    "smooth_sensitivity_median",
]
