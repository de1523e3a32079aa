"""The one check of a caller's table grid against its noise (spec tables and the Python API).

A table's grid is the set its noisy values are sampled on (docs/exact-rounding.md), not a
presentation unit. `coarse_grid` says when the grid a caller asked for is too coarse for the
published sd, cv and margins to stay true; `tabdp.release.spec` (a table's ``grid``) and the
``.dp`` accessor (``grid=``, also for planned releases) both refuse such a grid with its words,
before any data is read. Grids tabdp chooses itself (the whole-number default of integer
measures, a discrete mechanism's integers, the exact-rounding layer's own) are never checked.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["GRID_SPREAD_SHARE", "check_api_grid", "coarse_grid"]

#: A table's own grid may be at most this fraction of its noise's spread (sd; 1.4826·MAD where
#: the variance is infinite); transformation mechanisms have the same limit in transformed space.
GRID_SPREAD_SHARE = 0.1


def _step(value: Any) -> float | None:
    """A grid step as a float, or None where the grid's own checks refuse it (or it is unset)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    step = float(value)
    return step if math.isfinite(step) and step > 0 else None


def coarse_grid(grid: Any, mechanism: Any, kind: str, measures: Sequence[str], *,
                shown: str, leave: str, round_with: str,
                level: str | None = None) -> tuple[str, str] | None:
    """Whether a caller's table grid is coarser than a tenth of its noise's spread (review r36).

    At most a tenth of the spread, the rounding to the grid adds about g²/12 <= sd²/1200 to the
    variance (under 0.05% of the sd) and its mean is negligible; coarser, it would bias the
    estimate by up to half a step and make the published sd (the noise's) understate the error,
    so such a grid is refused and the coarse rounding is left to publication rounding, which
    flags it (``R``) and rounds the interval outward. A discrete mechanism's grid 1 (its exact
    integers) is no rounding and always allowed; a count's mechanism is the one its grid gives
    (`count_mechanism`: a whole-number grid releases Gaussian and Laplace counts with their
    discrete counterparts). A transformation mechanism's grid rounds the noisy TRANSFORMED
    value: at most σ/10. Public parameters only (grid and mechanism), never the data.

    Args:
        grid: The caller's grid: a step, ``{measure: step}`` or ``None`` (nothing to check).
            Steps that are not positive finite numbers are left to the grid's own checks.
        mechanism: The table's mechanism (a count's as the caller gave it, ``None`` included).
        kind: ``"sum"`` or ``"count"``.
        measures: The released measures (ignored for a count).
        shown: How the message shows the grid received (e.g. ``repr(grid)``).
        leave: How the caller's interface leaves the grid out (e.g. ``"leave grid out"``).
        round_with: How it rounds for publication, with ``{step}`` for the step (e.g.
            ``"publication.round = {step}"``).
        level: The measured level whose mechanism this is (a consistent table's shares).

    Returns:
        ``(message, hint)`` for the first grid step that is too coarse, or ``None``.

    Example:
        >>> from tabdp.mechanisms import Gaussian
        >>> args = dict(shown="1.0", leave="leave grid out", round_with="round = {step}")
        >>> coarse_grid(1.0, Gaussian(sigma=20.0), "sum", ["x"], **args) is None
        True
        >>> coarse_grid(1.0, Gaussian(sigma=2.0), "sum", ["x"], **args)[0][:40]
        '1.0 is too coarse for Gaussian(sigma=2.0'
        >>> coarse_grid(1.0, Gaussian(sigma=2.0), "count", [], **args) is None  # discrete
        True
    """
    from tabdp import mechanisms
    from tabdp.frame._engine import count_mechanism
    from tabdp.noise.exact import noise_spread

    if grid is None:
        return None
    used = count_mechanism(mechanism, grid) if kind == "count" else mechanism
    if isinstance(used, mechanisms.TransformationMechanism):
        steps = [s for s in (map(_step, grid.values() if isinstance(grid, Mapping) else [grid]))
                 if s is not None]
        limit = 0.1 * float(used.sigma)
        if steps and max(steps) > limit:
            return (f"{shown} is too coarse for a transformation mechanism: its grid rounds the "
                    f"noisy TRANSFORMED value (e.g. log(total + offset)), so it must be at most "
                    f"sigma/10 = {limit:g} (default: {used.default_grid():g}).",
                    f"{leave}, and round the published estimates with "
                    f"{round_with.format(step='1000.0')} instead.")
        return None
    for m in (("count",) if kind == "count" else measures):
        step = _step(grid.get(m) if isinstance(grid, Mapping) else grid)
        if step is None:
            continue
        mm = used.measure_mechanism(m) if getattr(used, "joint", False) else used
        noise = getattr(mm, "noise", None)
        if noise is None:
            continue
        if isinstance(mm, mechanisms.DiscreteAdditiveMechanism) and step == 1.0:
            continue
        spread = noise_spread(noise)
        limit = GRID_SPREAD_SHARE * spread
        # a grid of exactly a tenth is allowed despite the spread's last-bit rounding
        if step > limit * (1.0 + 1e-9):
            where = "".join([f" (measure {m})" if isinstance(grid, Mapping) else "",
                             f" (level {level})" if level is not None else ""])
            what = "sd" if spread == float(noise.std()) else "spread (1.4826 x MAD)"
            return (f"{shown} is too coarse for {mm!r}{where}: a table's grid is the set the "
                    f"noisy value is sampled on, and at most {GRID_SPREAD_SHARE:g} x the "
                    f"noise's {what} ({spread:.6g}), i.e. {limit:.6g}, keeps the published sd, "
                    f"cv and margins of error true and the estimate unbiased (a coarser grid "
                    f"biases the estimate by up to half a step and adds its rounding error to "
                    f"every cell, unstated).",
                    f"{leave} (or set a finer one), and round the published estimates with "
                    f"{round_with.format(step=f'{step:g}')} instead: it flags the cells it "
                    f"moves by a non-negligible amount (R) and rounds their intervals outward.")
    return None


def check_api_grid(grid: Any, mechanism: Any, kind: str, measures: Any) -> None:
    """Refuse the ``grid=`` of ``frame.dp.sum`` / ``frame.dp.count`` that `coarse_grid` refuses.

    The spec's check and message, in the Python API's words; before any data is read. Grids
    tabdp picks itself (the whole-number default of integer measures) are not checked: call it
    with the caller's argument only.

    Args:
        grid: The caller's ``grid=``.
        mechanism: The caller's ``mechanism=`` (a count's before its discrete swap).
        kind: ``"sum"`` or ``"count"``.
        measures: The caller's measure column(s) (a name or names; ignored for a count).

    Raises:
        InvalidParameterError: The grid is coarser than a tenth of the noise's spread.

    Example:
        >>> from tabdp.mechanisms import Gaussian
        >>> check_api_grid(0.1, Gaussian(sigma=2.0), "sum", "x")
        >>> check_api_grid(1.0, Gaussian(sigma=2.0), "sum", "x")
        Traceback (most recent call last):
        ...
        tabdp.exceptions.InvalidParameterError: grid=1.0 is too coarse for Gaussian(sigma=2.0): ...
    """
    from tabdp.exceptions import InvalidParameterError

    names = [measures] if isinstance(measures, str) else (
        list(measures) if isinstance(measures, Sequence) else [])
    problem = coarse_grid(grid, mechanism, kind, names, shown=f"grid={grid!r}",
                          leave="pass grid=None",
                          round_with="publication rounding (publication.round = "
                                     "{step} in a spec; tabdp.release.publish with "
                                     "Publication(round={step}))")
    if problem is not None:
        raise InvalidParameterError(f"{problem[0]}\nHint: {problem[1]}")
