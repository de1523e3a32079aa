"""Sources of randomness.

tabdp draws noise from a [`RandomSource`][tabdp.RandomSource]. By default it is *secure*: uniform
bits come from the operating system's cryptographically secure generator (``os.urandom``), so noise
cannot be predicted or replayed. A seeded source (``RandomSource(seed=...)``) is for tests and
tuning only; sessions record its use and reports mark it as not for production.

Releases use [`RandomSource.bits`][tabdp.RandomSource.bits] only: continuous noise is exactly
rounded to a public grid from the uniform interval each 64-bit word leaves open
(``tabdp.noise.exact``), and discrete noise for counts is sampled exactly with integer arithmetic
(``tabdp.noise.discrete``). [`RandomSource.uniform`][tabdp.RandomSource.uniform] and
[`RandomSource.signs`][tabdp.RandomSource.signs] serve the plain float samplers
(``NoiseDistribution.sample``), which are for simulation and tests, not for releases.

Example:
    >>> src = RandomSource(seed=7)
    >>> u = src.uniform(3)
    >>> bool(((u > 0) & (u < 1)).all()), src.secure
    (True, False)
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from tabdp.exceptions import InvalidParameterError

__all__ = ["RandomSource", "as_random_source"]

_TWO_M53 = 2.0 ** -53


class RandomSource:
    """A stream of uniform random bits, secure by default.

    Args:
        seed: ``None`` (default) for the OS CSPRNG; an int or ``numpy.random.SeedSequence`` for a
            reproducible, **non-secure** stream (tests and tuning only).

    Example:
        >>> RandomSource().secure
        True
        >>> RandomSource(seed=1).uniform(2).shape
        (2,)
    """

    def __init__(self, seed: int | np.random.SeedSequence | None = None) -> None:
        """Check ``seed`` (``None``: the operating system's secure source)."""
        if seed is None:
            self._gen: np.random.Generator | None = None
            self.seed: int | None = None
        else:
            if isinstance(seed, bool) or not isinstance(
                    seed, (int, np.integer, np.random.SeedSequence)):
                raise InvalidParameterError(
                    f"seed must be None or a non-negative int; got {seed!r}.\n"
                    "Hint: leave seed=None in production; seeds are for tests only.")
            if isinstance(seed, (int, np.integer)) and seed < 0:
                raise InvalidParameterError(f"seed must be a non-negative int; got {seed!r}.")
            self._gen = np.random.Generator(np.random.PCG64(seed))
            self.seed = int(seed) if isinstance(seed, (int, np.integer)) else None

    @classmethod
    def from_generator(cls, gen: np.random.Generator) -> RandomSource:
        """Wrap a numpy ``Generator`` (non-secure; for tests).

        Args:
            gen: The numpy generator to draw bits from.

        Returns:
            A non-secure source reading from ``gen``.

        Example:
            >>> RandomSource.from_generator(np.random.default_rng(0)).secure
            False
        """
        src = cls.__new__(cls)
        src._gen = gen
        src.seed = None
        return src

    @property
    def secure(self) -> bool:
        """Whether bits come from the OS CSPRNG.

        Example:
            >>> RandomSource(seed=3).secure
            False
        """
        return self._gen is None

    def bits(self, size: int) -> np.ndarray:
        """Return ``size`` independent uniform 64-bit words.

        Args:
            size: Number of words.

        Returns:
            A ``uint64`` array.

        Example:
            >>> RandomSource(seed=0).bits(2).dtype
            dtype('uint64')
        """
        n = int(size)
        if self._gen is None:
            return np.frombuffer(os.urandom(8 * n), dtype=np.uint64).copy()
        return self._gen.integers(0, 2**64, size=n, dtype=np.uint64, endpoint=False)

    def uniform(self, size: int | tuple[int, ...]) -> np.ndarray:
        """Uniform doubles on the open interval (0, 1): ``(k + 0.5) / 2**53``, k of 53 bits.

        Args:
            size: Output shape.

        Returns:
            float64 array strictly inside (0, 1).

        Example:
            >>> u = RandomSource(seed=0).uniform((2, 2)); u.shape
            (2, 2)
        """
        shape = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
        n = int(np.prod(shape)) if shape else 1
        k = self.bits(n) >> np.uint64(11)
        return ((k.astype(np.float64) + 0.5) * _TWO_M53).reshape(shape)

    def signs(self, size: int | tuple[int, ...]) -> np.ndarray:
        """Independent fair signs ``±1.0``.

        Args:
            size: Output shape.

        Returns:
            float64 array of -1.0 and 1.0.

        Example:
            >>> set(RandomSource(seed=0).signs(50).tolist()) == {-1.0, 1.0}
            True
        """
        shape = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
        n = int(np.prod(shape)) if shape else 1
        b = (self.bits(n) >> np.uint64(63)).astype(np.float64)
        return (2.0 * b - 1.0).reshape(shape)

    def standard_normal(self, size: int | tuple[int, ...]) -> np.ndarray:
        """Standard normal draws by inverse CDF (tail-accurate: sign times upper quantile).

        Args:
            size: Output shape.

        Returns:
            float64 array of N(0, 1) draws.

        Example:
            >>> RandomSource(seed=0).standard_normal(4).shape
            (4,)
        """
        from scipy.special import ndtri

        u = self.uniform(size)
        return self.signs(np.shape(u)) * -ndtri(0.5 * u)

    def __repr__(self) -> str:
        """``RandomSource(secure)`` or the seed."""
        return "RandomSource(secure)" if self.secure else f"RandomSource(seed={self.seed!r})"


def as_random_source(rng: Any) -> RandomSource:
    """Coerce ``rng`` into a [`RandomSource`][tabdp.RandomSource].

    Args:
        rng: ``None`` (secure), a ``RandomSource``, an int seed (tests only) or a numpy
            ``Generator`` (tests only).

    Returns:
        A ``RandomSource``.

    Raises:
        InvalidParameterError: For any other type.

    Example:
        >>> as_random_source(None).secure, as_random_source(5).secure
        (True, False)
    """
    if rng is None:
        return RandomSource()
    if isinstance(rng, RandomSource):
        return rng
    if isinstance(rng, np.random.Generator):
        return RandomSource.from_generator(rng)
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return RandomSource(seed=int(rng))
    raise InvalidParameterError(
        f"rng must be None, a tabdp.RandomSource, an int seed or a numpy Generator; got "
        f"{type(rng).__name__}.\nHint: pass nothing in production (secure randomness).")
