"""Deterministic statistical helpers for sampler tests (imported by the test modules).

Sampler tests draw a fixed-seed sample and run a one-sample Kolmogorov–Smirnov test against the
exact CDF. Because the seed is fixed the outcome is deterministic; the threshold p ≤ 1e-6 makes a
false alarm on a correct sampler a one-in-a-million event for whatever seed is chosen, while a
power check (the same sample must be *rejected* against the same law rescaled by 0.7 and 1.3)
shows that the test is sharp enough to catch a wrong sampler.

The helpers test themselves in :func:`self_test` (run by ``test_stats_helpers`` here and in
``tests/noise/test_noise.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

__all__ = ["P_REJECT", "ks_pvalue", "assert_ks_fits", "assert_power", "scaled_cdfs",
           "self_test"]

#: KS p-values at or below this reject.
P_REJECT = 1e-6

Cdf = Callable[[np.ndarray], ArrayLike]
CdfCollection = Mapping[str, Cdf] | Iterable[Cdf]


def ks_pvalue(sample: ArrayLike, cdf: Cdf) -> float:
    """One-sample KS p-value of ``sample`` against ``cdf`` (``scipy.stats.kstest``).

    Args:
        sample: Draws.
        cdf: Vectorized CDF.

    Returns:
        The p-value.

    Example:
        >>> x = np.random.default_rng(0).standard_normal(2000)
        >>> ks_pvalue(x, stats.norm.cdf) > 1e-3
        True
    """
    x = np.asarray(sample, dtype=np.float64).ravel()
    return float(stats.kstest(x, lambda v: np.asarray(cdf(v), dtype=np.float64)).pvalue)


def assert_ks_fits(sample: ArrayLike, cdf: Cdf, p_reject: float = P_REJECT) -> float:
    """Assert that the KS test does not reject ``cdf`` for ``sample`` (fails iff p ≤ p_reject).

    Args:
        sample: Draws (fixed seed).
        cdf: The exact CDF of the law the sampler claims.
        p_reject: Rejection threshold.

    Returns:
        The p-value.

    Raises:
        AssertionError: If ``p <= p_reject``.

    Example:
        >>> x = np.random.default_rng(1).standard_normal(5000)
        >>> assert_ks_fits(x, stats.norm.cdf) > 1e-6
        True
    """
    x = np.asarray(sample, dtype=np.float64).ravel()
    assert np.all(np.isfinite(x)), f"sample has {int((~np.isfinite(x)).sum())} non-finite draws"
    p = ks_pvalue(x, cdf)
    assert p > p_reject, (f"KS test rejects the sampler: p = {p:.3g} <= {p_reject:g} "
                          f"(n = {x.size})")
    return p


def _named(cdfs: CdfCollection) -> list[tuple[str, Cdf]]:
    if isinstance(cdfs, Mapping):
        return [(str(k), v) for k, v in cdfs.items()]
    return [(f"cdf #{i}", c) for i, c in enumerate(cdfs)]


def assert_power(sample: ArrayLike, wrong_cdfs: CdfCollection,
                 p_reject: float = P_REJECT) -> list[float]:
    """Assert that KS *rejects* every wrong CDF (p ≤ p_reject): the test has power.

    Args:
        sample: Draws from the true law (the same fixed-seed sample as the fit check).
        wrong_cdfs: CDFs that must be rejected, e.g. :func:`scaled_cdfs` (scale × 0.7, × 1.3);
            a mapping name → cdf, or an iterable of cdfs.
        p_reject: Rejection threshold.

    Returns:
        The p-values.

    Raises:
        AssertionError: If some wrong CDF is not rejected.

    Example:
        >>> x = np.random.default_rng(2).standard_normal(20_000)
        >>> len(assert_power(x, scaled_cdfs(stats.norm.cdf)))
        2
    """
    x = np.asarray(sample, dtype=np.float64).ravel()
    named = _named(wrong_cdfs)
    assert named, "assert_power needs at least one wrong cdf"
    out = []
    for name, cdf in named:
        p = ks_pvalue(x, cdf)
        assert p <= p_reject, (f"KS test lacks power: wrong law '{name}' not rejected "
                               f"(p = {p:.3g} > {p_reject:g}, n = {x.size})")
        out.append(p)
    return out


def scaled_cdfs(cdf: Cdf, factors: Iterable[float] = (0.7, 1.3)) -> dict[str, Cdf]:
    """CDFs of ``c·Z`` for each factor c: ``x ↦ cdf(x / c)`` (wrong scales for power checks).

    Args:
        cdf: CDF of Z.
        factors: Scale factors.

    Returns:
        Mapping ``"scale x{c}"`` → cdf.

    Example:
        >>> sorted(scaled_cdfs(stats.norm.cdf))
        ['scale x0.7', 'scale x1.3']
        >>> bool(scaled_cdfs(stats.norm.cdf, [2.0])["scale x2.0"](2.0) == stats.norm.cdf(1.0))
        True
    """
    return {f"scale x{c}": (lambda x, c=float(c): cdf(np.asarray(x, dtype=np.float64) / c))
            for c in factors}


def self_test() -> None:
    """Show that the helpers accept the right law and raise on wrong ones.

    * the fit check passes on a correct CDF and raises on a clearly wrong one (scale × 1.3);
    * the power check passes on wrong scales and raises (no power) when handed the correct CDF.

    Example:
        >>> self_test()
    """
    x = np.random.default_rng(20240611).standard_normal(20_000)
    assert_ks_fits(x, stats.norm.cdf)
    assert_power(x, scaled_cdfs(stats.norm.cdf))
    for bad in (scaled_cdfs(stats.norm.cdf, [1.3])["scale x1.3"], stats.laplace.cdf):
        try:
            assert_ks_fits(x, bad)
        except AssertionError:
            pass
        else:  # pragma: no cover - would mean the helper is broken
            raise AssertionError("assert_ks_fits accepted a clearly wrong cdf")
    try:
        assert_power(x, {"correct": stats.norm.cdf})
    except AssertionError as err:
        assert "lacks power" in str(err)
    else:  # pragma: no cover
        raise AssertionError("assert_power did not fail when given the correct cdf")
    try:
        assert_ks_fits(np.array([0.0, np.nan]), stats.norm.cdf)
    except AssertionError as err:
        assert "non-finite" in str(err)
    else:  # pragma: no cover
        raise AssertionError("assert_ks_fits accepted NaN draws")


def test_stats_helpers() -> None:
    """The helpers reject what they must and accept what they must."""
    self_test()
