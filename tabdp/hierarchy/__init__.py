"""Consistent hierarchical tables: GLS post-processing of levels released directly.

[`consistent`][tabdp.hierarchy.consistent] turns tables released at several levels of a
geography × industry hierarchy into one consistent set (every parent is the sum of its
children), the best linear unbiased estimate of all of them; [`solve`][tabdp.hierarchy.solve] is
the exact linear-time solver on a product of two trees. Post-processing: no privacy cost.

Example:
    >>> from tabdp.hierarchy import consistent, solve
    >>> callable(consistent) and callable(solve)
    True
"""

from tabdp.hierarchy.consistent import Product, cell_weights, consistent, expected_margin
from tabdp.hierarchy.gls import GLSResult, Tree, dense_gls, solve
from tabdp.hierarchy.plan import (
    SplitPlan,
    calibrated_shares,
    certified_margins,
    expected_sd,
    gaussian_shares,
    plan_split,
)
from tabdp.hierarchy.release import consistent_from_release

__all__ = ["consistent", "cell_weights", "Product", "solve", "dense_gls", "Tree", "GLSResult",
           "expected_sd", "expected_margin", "plan_split", "SplitPlan", "gaussian_shares",
           "calibrated_shares", "consistent_from_release", "certified_margins"]
