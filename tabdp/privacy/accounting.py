"""Per-unit loss totals of a session and their (ε, δ) statement.

A unit's losses over a session are kept as components that compose exactly:

* ``rho``: total PRzCDP ρ (``inf`` once an approximate-DP-only release touched the unit);
* ``epsilon``: total PRDP ε (``inf`` once a non-pure release touched it);
* ``rho_z``: ρ of the releases with a pure or zCDP guarantee (finite part of ``rho``);
* ``rho_g``: the part of ``rho_z`` from Gaussian-shift mechanisms;
* ``eps_a``, ``delta_a``: ε and δ summed over approximate-DP-only releases (basic composition).

The per-record (ε, δ) statement at a chosen δ ([`epsilon_at`][tabdp.privacy.accounting.epsilon_at])
composes the approximate part (``eps_a``, ``delta_a``) with the (ε, δ − delta_a) conversion of
``rho_z`` — exact Gaussian-DP when all of it comes from Gaussian-shift mechanisms (μ² = 2ρ), else
the zCDP conversion — and, for units with a pure total, never reports more than ``epsilon``.
"""

from __future__ import annotations

import numpy as np

from tabdp._numeric import add_up
from tabdp.exceptions import InvalidParameterError
from tabdp.privacy.conversions import check_dp_delta, gdp_epsilon, zcdp_epsilon


def _gauss_eps(mu: np.ndarray, delta: float) -> np.ndarray:
    from tabdp.privacy.approx import epsilon_for_scale

    out = np.zeros(mu.shape)
    pos = np.isfinite(mu) & (mu > 0)
    if np.any(pos):
        out[pos] = epsilon_for_scale("gaussian", 1.0, delta, mu[pos])
    if np.any(~pos & (mu > 0)):  # infinite shifts
        out[~pos & (mu > 0)] = gdp_epsilon(mu[~pos & (mu > 0)], delta)
    return out


__all__ = ["COMPONENTS", "epsilon_at"]


def _sub_down(d: float, a: np.ndarray) -> np.ndarray:
    """``d − a`` rounded down (a double <= the exact difference; Knuth's TwoSum decides)."""
    with np.errstate(all="ignore"):
        s = d - a
        bb = s - d
        err = (d - (s - bb)) + (-a - bb)  # the exact (d − a) − s where finite
        return np.where(err < 0.0, np.nextafter(s, -np.inf), s)


def _convert(rz: np.ndarray, rg: np.ndarray, delta: float) -> np.ndarray:
    """ε at ``delta`` of zCDP parts ``rz`` of which ``rg`` is Gaussian-shift (elementwise).

    Exact Gaussian-DP where all of the zCDP part is Gaussian-shift (``rg >= rz``), else the
    zCDP conversion; each value's answer depends on it alone (and on ``delta``).
    """
    gauss = rg >= rz  # all of the zCDP part is Gaussian-shift
    if not np.any(gauss):
        return zcdp_epsilon(rz, delta)
    conv = np.empty(rz.shape)
    # exact Gaussian-DP profile (vectorized solver of tabdp.privacy.approx, rounded up); μ =
    # sqrt(2ρ) is the shift in noise standard deviations, taken one double up (a correctly
    # rounded square root can be half a unit in the last place below the exact one; ε at δ
    # grows with μ, so a larger μ is never optimistic)
    mu = np.sqrt(2.0 * rz[gauss])
    mu = np.where(mu > 0.0, np.nextafter(mu, np.inf), mu)
    conv[gauss] = np.where(np.isfinite(mu), _gauss_eps(mu, delta), np.inf)
    other = ~gauss
    if np.any(other):
        conv[other] = zcdp_epsilon(rz[other], delta)
    return conv


#: Columns of the per-unit totals.
COMPONENTS = ("rho", "epsilon", "size", "rho_z", "rho_g", "eps_a", "delta_a")


def epsilon_at(delta: float, rho_z: np.ndarray, rho_g: np.ndarray, eps_a: np.ndarray,
               delta_a: np.ndarray, epsilon: np.ndarray) -> np.ndarray:
    """Per-unit ε at δ from the loss components (see the module docstring).

    Args:
        delta: The δ of the statement, in (0, 1).
        rho_z: zCDP part of ρ per unit.
        rho_g: Gaussian-shift part of ``rho_z``.
        eps_a: Approximate-DP ε per unit.
        delta_a: Approximate-DP δ per unit.
        epsilon: Pure ε per unit (``inf`` where not pure).

    Returns:
        ε per unit (``inf`` where the approximate parts alone use up δ).

    Raises:
        InvalidParameterError: The five arrays do not all have the same shape (one value per
            unit in each; none is broadcast against another).

    Example:
        >>> z = np.zeros(1)
        >>> # one Gaussian release with mu = 1/3.18570299: exactly eps = 1 at delta = 1e-4
        >>> r = np.array([0.5 / 3.18570299**2])
        >>> round(float(epsilon_at(1e-4, r, r, z, z, np.array([np.inf]))[0]), 6)
        1.0
        >>> try:
        ...     epsilon_at(1e-4, r, r, z, z, np.full(2, np.inf))  # 1 unit's rho, 2 epsilons
        ... except ValueError as err:
        ...     print(type(err).__name__, str(err).splitlines()[0][-28:])
        InvalidParameterError delta_a (1,), epsilon (2,).
    """
    d = check_dp_delta(delta, "per-record (epsilon, delta) statement")
    rho_z = np.asarray(rho_z, dtype=np.float64)
    rho_g = np.asarray(rho_g, dtype=np.float64)
    eps_a = np.asarray(eps_a, dtype=np.float64)
    delta_a = np.asarray(delta_a, dtype=np.float64)
    epsilon = np.asarray(epsilon, dtype=np.float64)
    parts = {"rho_z": rho_z, "rho_g": rho_g, "eps_a": eps_a, "delta_a": delta_a,
             "epsilon": epsilon}
    if len({a.shape for a in parts.values()}) > 1:  # numpy would broadcast them silently
        got = ", ".join(f"{k} {a.shape}" for k, a in parts.items())
        raise InvalidParameterError(
            "epsilon_at: the loss components must have one shape (one value per unit in "
            f"each); got {got}.\nHint: pass the five per-unit columns of the same units "
            "(equal lengths); a value is never repeated to fill another's length.")
    if not np.any(delta_a):
        # no approximate-DP δ anywhere (the usual case): d − 0 = d exactly, every unit takes
        # the one conversion at d, and 0 + x = x exactly where no approximate ε either (the
        # same doubles as the general path below, without its per-δ masks and copies)
        conv = _convert(rho_z, rho_g, d)
        out = add_up(eps_a, conv) if np.any(eps_a) else conv
        return np.minimum(out, epsilon)
    rest = _sub_down(d, delta_a)  # the δ left to the conversion: never above d − delta_a
    out = np.full(rho_z.shape, np.inf)
    ok = rest > 0
    if np.any(ok):
        rz, rg, rr = rho_z[ok], rho_g[ok], rest[ok]
        conv = np.empty(rz.shape)
        # the conversions are vectorized for one delta: group units by remaining delta
        for value in np.unique(rr):
            sel = rr == value
            conv[sel] = _convert(rz[sel], rg[sel], float(value))
        out[ok] = add_up(eps_a[ok], conv)  # never below the exact sum (review R18-2)
    return np.minimum(out, epsilon)
