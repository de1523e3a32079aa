"""Identity of the objects defined by their public parameters: mechanisms and noise laws.

`ByParams` gives [`Mechanism`][tabdp.mechanisms.Mechanism] and
[`NoiseDistribution`][tabdp.noise.NoiseDistribution] one ``repr``, ``==`` and ``hash``: the
class and ``params()`` (public parameters only), so equal objects share cached policies.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ByParams"]


class ByParams:
    """``repr``, ``==`` and ``hash`` from the class and ``params()``.

    Example:
        >>> class Law(ByParams):
        ...     def __init__(self, s: float) -> None:
        ...         self.s = s
        ...     def params(self) -> dict[str, Any]:
        ...         return {"s": self.s}
        >>> Law(1.0), Law(1.0) == Law(1.0), Law(1.0) == Law(2.0), hash(Law(1.0)) == hash(Law(1.0))
        (Law(s=1.0), True, False, True)
    """

    def params(self) -> dict[str, Any]:
        """Public parameters (every subclass defines them).

        Example:
            >>> ByParams().params()
            Traceback (most recent call last):
            ...
            NotImplementedError: ByParams.params: a subclass defines its public parameters.
        """
        raise NotImplementedError(
            f"{type(self).__name__}.params: a subclass defines its public parameters.")

    def __repr__(self) -> str:
        """``Class(name=value, ...)`` of the public parameters."""
        inner = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({inner})"

    def __eq__(self, other: object) -> bool:
        """Equal: the same class and the same public parameters."""
        return type(self) is type(other) and self.params() == other.params()

    def __hash__(self) -> int:
        """Hash of the class name and the sorted public parameters, consistent with ``==``."""
        return hash((type(self).__name__, tuple(sorted(self.params().items()))))
