"""Small numeric helpers shared across tabdp (package-private).

Example:
    >>> ceil_snap(np.array([2.1 / 0.7, 1e7 / 0.37])).tolist()
    [3.0, 27027028.0]
"""

from __future__ import annotations

import numpy as np

__all__ = ["ceil_snap"]


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
