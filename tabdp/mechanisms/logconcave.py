"""Symmetric log-concave mechanisms of [Vin22]: Logistic, Subbotin_r and the vector Subbotin_r.

* [`Logistic`][tabdp.mechanisms.Logistic] — ``q + Logistic(scale)``: pure, ε(Δ) = Δ/scale (the
  log-density ratio ``ψ(z/s) − ψ((z−Δ)/s)`` increases to Δ/s since ψ' = tanh(·/2) < 1), with the
  exact (ε, δ) policy of [Vin22] Thm 4.
* [`Subbotin`][tabdp.mechanisms.Subbotin] — ``q + scale·X``, X standard Subbotin_r (r ≥ 1). r = 1 is
  the Laplace mechanism (pure, ε = Δ/scale) and r = 2 the Gaussian mechanism with σ = scale
  (Gaussian DP, ρ = Δ²/(2 scale²)). Any other r has no pure ε and no zCDP ρ; it is accounted in
  approximate DP only, at a per-cell δ that must be given (``delta=``): a record of sensitivity Δ
  loses the exact ε of [Vin22] Lemma 1
  ([`epsilon_for_scale`][tabdp.privacy.approx.epsilon_for_scale]).
* [`VectorSubbotin`][tabdp.mechanisms.VectorSubbotin] — m measures released at once with iid noise,
  accounted at the norm of a unit's (weighted) contribution vector: r = 2 (ℓ2 norm, exact by
  rotation invariance) and r = 1 (ℓ1 norm, pure). Other r are refused: [Vin22] Thm 9, which would
  extend the scalar condition to the ℓ_r norm for every r, is false for r ≠ 2 (see the class notes).

Example:
    >>> from tabdp.mechanisms.logconcave import Logistic, Subbotin
    >>> float(Logistic(scale=2.0).epsilon(1.0))
    0.5
    >>> m = Subbotin(r=4.0, scale=8.743266, delta=1e-4)
    >>> round(float(m.approx_epsilon(1.0, 1e-4)), 6), float(m.epsilon(1.0))
    (1.0, inf)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from tabdp import registry
from tabdp._numeric import div_up, half_square_up
from tabdp._validation import check_int, check_real
from tabdp.exceptions import DataValidationError, InvalidParameterError
from tabdp.mechanisms._base import LawOfSums, not_pure
from tabdp.mechanisms.additive import AdditiveMechanism, check_noise_range
from tabdp.noise.logconcave import Logistic as _LogisticNoise
from tabdp.noise.logconcave import Subbotin as _SubbotinNoise
from tabdp.noise.logconcave import check_subbotin_r
from tabdp.privacy.approx import (
    SubbotinChoice,
    check_generic_floor,
    choose_subbotin_r,
    epsilon_for_scale,
)
from tabdp.privacy.conversions import check_dp_delta

__all__ = ["Logistic", "Subbotin", "VectorSubbotin"]


def _abs(sensitivity: ArrayLike) -> np.ndarray:
    return np.abs(np.asarray(sensitivity, dtype=np.float64))


@registry.mechanism('logistic', tags=('spec', 'additive'), rank=9)
class Logistic(AdditiveMechanism):
    """Logistic mechanism: ``q + Logistic(scale)``; PRDP ε(Δ) = Δ/scale, exact (ε, δ) policy.

    The log-density ratio of neighbouring outputs is ``ψ(z/s) − ψ((z−Δ)/s)`` with
    ``ψ(x) = |x| + 2·log1p(e^{−|x|})``; ψ' = tanh(x/2) ∈ (−1, 1), so the ratio increases to its
    supremum Δ/s as z → ∞ ([Vin22] §3.3). The (ε, δ) policy is the closed form of Thm 4.

    Args:
        scale: Logistic scale s > 0 (standard deviation π·s/√3).

    Example:
        >>> m = Logistic(scale=0.98421439)
        >>> round(float(m.epsilon(1.0)), 6), round(float(m.approx_epsilon(1.0, 1e-4)), 6)
        (1.016039, 1.0)
    """

    pure = True
    policy_formula = ("eps(D) = D / scale; rho = eps * tanh(eps / 2); (eps, delta): "
                      "eps(D) = D/scale + 2 ln(1 - sqrt(delta (1 - exp(-D/scale)))) "
                      "(Vinterbo 2022 Thm 4)")

    def __init__(self, scale: float) -> None:
        """Check ``scale`` and build the logistic noise law."""
        self.scale = check_real("scale", scale, owner="Logistic", gt=0.0,
                                hint="scale is the logistic scale s (sd = pi*s/sqrt(3)); for "
                                     "(eps, delta)-DP use tabdp.privacy.approx.min_scale"
                                     "('logistic', eps, delta, sensitivity)")
        super().__init__(_LogisticNoise(self.scale))

    def sum_law(self) -> LawOfSums:
        """The law of a sum of released cells: closed-form characteristic function πbt/sinh(πbt).

        Example:
            >>> from tabdp.mechanisms import Logistic
            >>> Logistic(scale=1.0).sum_law().kind
            'logistic'
        """
        return LawOfSums("logistic", self.noise, self.scale)

    def epsilon(self, sensitivity: ArrayLike) -> np.ndarray:
        """ε(Δ) = Δ/scale.

        Args:
            sensitivity: Per-record sensitivities.

        Returns:
            PRDP losses.

        Example:
            >>> Logistic(scale=4.0).epsilon([0.0, 2.0]).tolist()
            [0.0, 0.5]
        """
        return div_up(_abs(sensitivity), self.scale)

    def approx_epsilon(self, sensitivity: ArrayLike, delta: float) -> np.ndarray:
        """Exact (ε, δ) policy ([Vin22] Thm 4 inverted; docs/math/log-concave.md §3).

        Args:
            sensitivity: Per-record sensitivities.
            delta: δ in (0, 1).

        Returns:
            ε(Δ) at δ (never above the pure Δ/scale).

        Example:
            >>> round(float(Logistic(scale=1.0).approx_epsilon(1.0, 1e-6)), 6)
            0.998409
        """
        dd = check_dp_delta(delta, "Logistic.approx_epsilon")
        return epsilon_for_scale("logistic", self.scale, dd, _abs(sensitivity))

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> Logistic(scale=2.0).params()
            {'scale': 2.0}
        """
        return {"scale": self.scale}


@registry.mechanism('subbotin', tags=('spec', 'additive'), rank=10)
class Subbotin(AdditiveMechanism):
    """Subbotin_r mechanism: ``q + scale·X`` with X standard Subbotin_r ([Vin22] §2.1, Thm 9).

    * r = 1: the Laplace mechanism — pure, ε(Δ) = Δ/scale, ρ = ε·tanh(ε/2).
    * r = 2: the Gaussian mechanism with σ = scale — Gaussian DP, ρ(Δ) = Δ²/(2·scale²),
      ε = ∞.
    * other r ≥ 1: no pure ε and no zCDP ρ is claimed (both ``inf`` for Δ > 0, 0 at Δ = 0); the
      guarantee is (ε, δ)-DP with the exact ε(Δ) of [Vin22] Lemma 1 at the per-cell δ given as
      ``delta`` (required), exposed as `dp_delta` for the ledger.

    Args:
        r: Shape r ≥ 1.
        scale: Scale > 0 (the factor multiplying a standard Subbotin_r variable).
        delta: Per-cell δ in (0, 1) at which each record's ε is accounted; required for
            r ∉ {1, 2}, refused for r ∈ {1, 2} (those have pure / Gaussian-DP accounting).

    Raises:
        InvalidParameterError: On an invalid r, scale or delta, a missing delta for r ∉ {1, 2},
            or a delta given for r ∈ {1, 2}.

    Example:
        >>> m = Subbotin(r=3.0, scale=5.877443, delta=1e-4)
        >>> round(float(m.approx_epsilon(1.0, 1e-4)), 6), m.dp_delta
        (1.0, 0.0001)
        >>> float(Subbotin(r=2.0, scale=2.0).rho(2.0)), float(Subbotin(1.0, 2.0).epsilon(1.0))
        (0.5, 0.5)
    """


    def __init__(self, r: float, scale: float, *, delta: float | None = None) -> None:
        """Check ``r``, ``scale`` and ``delta`` (needed where the guarantee is approximate)."""
        owner = type(self).__name__
        self.r = check_subbotin_r(r, owner)
        self.scale = check_real("scale", scale, owner=owner, gt=0.0,
                                hint="scale multiplies a standard Subbotin_r variable; for "
                                     "(eps, delta)-DP at sensitivity D use tabdp.privacy.approx."
                                     "min_scale('subbotin', eps, delta, D, r=r)")
        if self.r in (1.0, 2.0):
            if delta is not None:
                what = ("the Laplace mechanism (pure: eps = D/scale)" if self.r == 1.0 else
                        "the Gaussian mechanism (accounted exactly by Gaussian DP / zCDP, "
                        "rho = D^2/(2 scale^2))")
                raise InvalidParameterError(
                    f"{owner}: delta is only used for r not in {{1, 2}}; r={self.r!r} is {what}, "
                    f"so it needs no per-cell delta; got delta={delta!r}.\n"
                    f"Hint: drop delta, e.g. {owner}(r={self.r!r}, scale={self.scale!r}).")
            self.delta: float | None = None
        else:
            if delta is None:
                raise InvalidParameterError(
                    f"{owner}: r={self.r!r} needs delta (the per-cell delta at which each "
                    "record's loss is accounted): Subbotin noise with r > 1 has an unbounded "
                    "log-density ratio, so it has no pure eps, and no zCDP rho is claimed for "
                    "r != 2; its only guarantee is (eps, delta)-DP (Vinterbo 2022, Thm 6).\n"
                    f"Hint: pass delta, e.g. {owner}(r={self.r!r}, scale={self.scale!r}, "
                    "delta=1e-9); use r=1 (pure) or r=2 (Gaussian DP) to avoid delta.")
            self.delta = check_dp_delta(delta, owner)
            check_generic_floor(self.delta, self.r, owner)
        self.dp_delta = self.delta
        self.pure = self.r == 1.0
        self.gaussian_dp = self.r == 2.0
        if self.r == 1.0:
            self.policy_formula = ("eps(D) = D / scale; rho = eps * tanh(eps / 2) "
                                   "(r = 1: Laplace)")
        elif self.r == 2.0:
            self.policy_formula = "rho(D) = D^2 / (2 scale^2) (r = 2: Gaussian, sigma = scale)"
        else:
            self.policy_formula = (
                f"(eps, delta)-DP only, delta = {self.delta!r} per cell: eps(D) = g(u) at the "
                "smallest u with S_r(u - D/scale) - exp(g(u)) S_r(u) <= delta, "
                "g(u) = (|u|^r - |u - D/scale|^r)/r (Vinterbo 2022 Lemma 1); no pure eps, no rho")
        super().__init__(_SubbotinNoise(self.r, self.scale))

    def sum_law(self) -> LawOfSums:
        """The law of a sum of released cells: Gaussian (r = 2), Laplace (r = 1) or numerical.

        Example:
            >>> from tabdp.mechanisms import Subbotin
            >>> Subbotin(r=2.0, scale=1.0).sum_law().kind
            'gaussian'
        """
        return (LawOfSums("gaussian", self.noise, self.scale) if self.r == 2.0
                else LawOfSums("laplace", self.noise, self.scale) if self.r == 1.0
                else LawOfSums("lattice", self.noise))

    def rho(self, sensitivity: ArrayLike) -> np.ndarray:
        """PRzCDP policy: r = 1 ε·tanh(ε/2); r = 2 Δ²/(2·scale²); otherwise none (``inf``).

        Args:
            sensitivity: Per-record sensitivities.

        Returns:
            ρ(Δ) (``inf`` for Δ > 0 and 0 at Δ = 0 when r ∉ {1, 2}).

        Example:
            >>> Subbotin(r=3.0, scale=1.0, delta=1e-6).rho([0.0, 1.0]).tolist()
            [0.0, inf]
        """
        if self.r == 1.0:
            return super().rho(sensitivity)
        if self.r == 2.0:
            # (Δ/s)²/2 rounded up (no under/overflow of Δ², s²); exact stays exact
            return half_square_up(div_up(_abs(sensitivity), self.scale))
        return not_pure(sensitivity)

    def epsilon(self, sensitivity: ArrayLike) -> np.ndarray:
        """PRDP policy: Δ/scale for r = 1; ``inf`` for Δ > 0 otherwise (0 at Δ = 0).

        Args:
            sensitivity: Per-record sensitivities.

        Returns:
            PRDP losses.

        Example:
            >>> Subbotin(r=1.0, scale=2.0).epsilon([1.0]).tolist()
            [0.5]
            >>> Subbotin(r=2.0, scale=2.0).epsilon([0.0, 1.0]).tolist()
            [0.0, inf]
        """
        if self.r == 1.0:
            return div_up(_abs(sensitivity), self.scale)
        return not_pure(sensitivity)

    def approx_epsilon(self, sensitivity: ArrayLike, delta: float) -> np.ndarray:
        """Exact (ε, δ) policy at each sensitivity ([Vin22] Lemma 1, Thms 3 and 5).

        Vectorized; evaluated by [`epsilon_for_scale`][tabdp.privacy.approx.epsilon_for_scale].

        Args:
            sensitivity: Per-record sensitivities.
            delta: δ in (0, 1).

        Returns:
            ε(Δ) at δ.

        Example:
            >>> m = Subbotin(r=7.5, scale=19.003255, delta=1e-4)
            >>> [round(float(e), 6) for e in m.approx_epsilon([0.0, 1.0], 1e-4)]
            [0.0, 1.0]
        """
        dd = check_dp_delta(delta, f"{type(self).__name__}.approx_epsilon")
        return epsilon_for_scale("subbotin", self.scale, dd, _abs(sensitivity), r=self.r)

    def params(self) -> dict[str, Any]:
        """Public parameters: r, scale and (when set) delta.

        Example:
            >>> Subbotin(r=3.0, scale=2.0, delta=1e-9).params()
            {'r': 3.0, 'scale': 2.0, 'delta': 1e-09}
        """
        out: dict[str, Any] = {"r": self.r, "scale": self.scale}
        if self.delta is not None:
            out["delta"] = self.delta
        return out


def _check_weights(weights: Mapping[str, float] | None, owner: str) -> dict[str, float]:
    if weights is None:
        return {}
    if not isinstance(weights, Mapping):
        raise InvalidParameterError(
            f"{owner}: weights must be a dict measure -> positive float; got "
            f"{type(weights).__name__} {weights!r}.\nHint: e.g. weights={{'income': 1000.0, "
            "'employees': 1.0}}; measures not listed get weight 1.")
    out: dict[str, float] = {}
    for k, v in weights.items():
        if not isinstance(k, str):
            raise InvalidParameterError(
                f"{owner}: weights keys must be measure names (str); got {k!r}.\n"
                "Hint: e.g. weights={'income': 1000.0}.")
        out[k] = check_real(f"weights[{k!r}]", v, owner=owner, gt=0.0,
                            hint="a weight is the public scale factor of a measure: its "
                                 "contributions are divided by it and its noise multiplied by "
                                 "it, e.g. 1000.0 for an amount in dollars")
    return out


@registry.mechanism('vector_subbotin', tags=('spec', 'additive', 'joint'), rank=11)
class VectorSubbotin(Subbotin):
    """Vector Subbotin_r mechanism: m measures of a cell released at once, for r ∈ {1, 2}.

    Measure j is released as ``q_j + w_j·scale·X_j`` with iid standard Subbotin_r X_j and public
    per-measure weights w_j (default 1). In scaled units (``q_j / w_j``) the noise is iid with a
    common scale; a unit whose contributions to the cell are ``c = (c_1..c_m)`` has per-record
    sensitivity ``‖c/w‖_r`` ([`norm`][tabdp.mechanisms.VectorSubbotin.norm]), and the policy
    functions (``rho``, ``epsilon``, ``approx_epsilon``, ``approx_policy``) are evaluated at that
    norm:

    * r = 2 (vector Gaussian, ℓ2 norm): exact — the law is rotation invariant, so the release is
      a Gaussian shift of ``‖c/w‖_2 / scale`` standard deviations (Gaussian DP, ρ = Δ²/(2s²)).
    * r = 1 (vector Laplace, ℓ1 norm): pure, ε = ``‖c/w‖_1 / scale`` (the per-coordinate log
      ratios add up, triangle inequality); ``approx_epsilon`` returns that pure ε, which is valid
      for every δ (the scalar closed form of Thm 3 would only save 2·δ).

    **Other r are refused.** [Vin22] Thm 9 (docs/math/log-concave.md §5) claims that iid Subbotin_r
    noise with ℓ_r sensitivity Δ satisfies the scalar condition at Δ for every r ≥ 1. That holds
    for r = 2 only: the privacy loss of a shift c depends on its direction, not only on ‖c‖_r.
    Counterexamples (hockey-stick δ(ε) of the vector release vs the scalar δ at the same ℓ_r
    norm, checked by quadrature and Monte Carlo in ``tests/mechanisms/test_logconcave.py``): r = 3,
    c ∝ (1, 1), ‖c‖_3 = 1, ε = 1: δ = 0.252 vs 0.1995; r = 1.2, ‖c‖_1.2 = 3, ε = 4: δ = 0.0032
    vs 0.0024; and the seed's own §4.1 choice (ε = 1, δ = 1e-4, m = 100, r = 4, scale 0.0553)
    has δ(1) ≈ 0.0087 for the mean-query shift (1/500)·(1, …, 1), 87 times the claim.

    Args:
        r: Shape, 1 or 2.
        scale: Common scale in scaled units, > 0 (r = 2: the standard deviation).
        delta: Must stay ``None`` (r ∈ {1, 2} need no per-cell δ); kept for the common
            signature with [`Subbotin`][tabdp.mechanisms.Subbotin].
        weights: Measure → positive public scale factor; measures not listed get 1.

    Raises:
        InvalidParameterError: For r ∉ {1, 2}, a delta, or invalid scale/weights.

    Example:
        >>> m = VectorSubbotin(r=2.0, scale=0.5, weights={"income": 1000.0})
        >>> nrm = m.norm({"income": [3000.0, 0.0], "jobs": [4.0, 2.0]})
        >>> nrm.tolist(), m.rho(nrm).tolist()                    # ‖(3, 4)‖₂ = 5; ρ = Δ²/(2s²)
        ([5.0, 2.0], [50.0, 8.0])
        >>> m.measure_mechanism("income").params()
        {'r': 2.0, 'scale': 500.0}
    """

    #: Releases several measures jointly: the engine computes :meth:`norm` per unit and cell.
    joint = True

    def __init__(self, r: float, scale: float, *, delta: float | None = None,
                 weights: Mapping[str, float] | None = None) -> None:
        """Check ``r`` (1 or 2), ``scale``, ``delta`` and the measure ``weights``."""
        owner = type(self).__name__
        rr = check_subbotin_r(r, owner)
        if rr not in (1.0, 2.0):
            raise InvalidParameterError(
                f"{owner}: r={rr!r} is not supported; only r=1 (vector Laplace, l1 norm) and "
                "r=2 (vector Gaussian, l2 norm) have a valid joint guarantee. Vinterbo 2022 Thm 9 "
                "(iid Subbotin_r noise satisfies the scalar condition at the l_r sensitivity) "
                "is false for r != 2: the privacy loss depends on the direction of the "
                "contribution vector, e.g. r=4, eps=1, delta=1e-4, m=100 equal contributions "
                "give delta ~ 0.0087, not 1e-4.\nHint: use VectorSubbotin(r=2.0, scale=...) "
                "(Gaussian) or r=1.0 (Laplace), or release each measure separately with "
                f"Subbotin(r={rr!r}, scale, delta=...) and compose.")
        super().__init__(rr, scale, delta=delta)
        self.weights = _check_weights(weights, owner)
        #: The eq. (5) search that produced this mechanism (set by :meth:`optimal`).
        self.choice: SubbotinChoice | None = None
        norm_name = "l1" if rr == 1.0 else "l2"
        self.policy_formula = (f"policy of Subbotin_r (r = {rr:g}) evaluated at "
                               f"D = ||(c_j / w_j)_j||_{rr:g} ({norm_name} norm of the weighted "
                               "contributions): " + self.policy_formula)

    def approx_epsilon(self, sensitivity: ArrayLike, delta: float) -> np.ndarray:
        """(ε, δ) policy at the norm: exact Gaussian for r = 2, the pure ε for r = 1.

        Args:
            sensitivity: Norms ``‖c/w‖_r`` of the records' contribution vectors.
            delta: δ in (0, 1).

        Returns:
            ε at δ for each record.

        Example:
            >>> VectorSubbotin(r=1.0, scale=2.0).approx_epsilon([1.0, 3.0], 1e-6).tolist()
            [0.5, 1.5]
        """
        dd = check_dp_delta(delta, f"{type(self).__name__}.approx_epsilon")
        if self.r == 1.0:
            return div_up(_abs(sensitivity), self.scale)
        return super().approx_epsilon(sensitivity, dd)

    def weight(self, measure: str) -> float:
        """Public weight of a measure (1 when not listed).

        Args:
            measure: Measure name.

        Returns:
            Its weight.

        Example:
            >>> VectorSubbotin(r=2.0, scale=1.0, weights={"a": 3.0}).weight("b")
            1.0
        """
        return self.weights.get(measure, 1.0)

    def norm(self, contributions: Mapping[str, ArrayLike]) -> np.ndarray:
        """Per-record sensitivity ``‖(c_j / w_j)_j‖_r`` of the joint release (vectorized).

        Computed as ``M·(Σ_j (a_j/M)^r)^{1/r}`` with ``a_j = |c_j|/w_j`` and ``M = max_j a_j``,
        so it neither overflows nor underflows for large r or extreme contributions.

        Args:
            contributions: Measure → array of one unit's contributions per record (all the
                same shape); a missing measure counts as 0.

        Returns:
            The ℓ_r norms, shaped like the contribution arrays.

        Raises:
            InvalidParameterError: If ``contributions`` is empty or shapes differ.
            DataValidationError: If a contribution is NaN.

        Example:
            >>> m = VectorSubbotin(r=1.0, scale=1.0)
            >>> m.norm({"a": [1.0, -2.0], "b": [3.0, 0.0]}).tolist()
            [4.0, 2.0]
        """
        owner = f"{type(self).__name__}.norm"
        if not isinstance(contributions, Mapping) or len(contributions) == 0:
            raise InvalidParameterError(
                f"{owner}: contributions must be a non-empty dict measure -> array; got "
                f"{contributions!r}.\nHint: e.g. m.norm({{'income': c_income, 'jobs': c_jobs}}).")
        scaled: list[np.ndarray] = []
        shape: tuple[int, ...] | None = None
        for name, c in contributions.items():
            a = np.asarray(np.abs(np.asarray(c, dtype=np.float64)) / self.weight(str(name)))
            if shape is None:
                shape = a.shape
            elif a.shape != shape:
                raise InvalidParameterError(
                    f"{owner}: contribution arrays must have the same shape; measure {name!r} "
                    f"has shape {a.shape}, the first one {shape}.\nHint: pass one entry per "
                    "record for every measure (0 where the record does not contribute).")
            if np.any(np.isnan(a)):
                raise DataValidationError(
                    f"{owner}: measure {name!r} has {int(np.isnan(a).sum())} NaN "
                    "contribution(s).\nHint: clean the input or choose a null policy first.")
            scaled.append(a)
        big = np.array(scaled[0], dtype=np.float64, copy=True)
        for a in scaled[1:]:
            np.maximum(big, a, out=big)
        if self.r == 1.0:
            total = np.zeros(big.shape)
            for a in scaled:
                total = total + a
            return total
        acc = np.zeros(big.shape)
        fin = np.isfinite(big) & (big > 0)
        safe = np.where(fin, big, 1.0)
        with np.errstate(under="ignore", invalid="ignore"):
            for a in scaled:
                acc += np.where(fin, a / safe, 0.0) ** self.r
            out = safe * acc ** (1.0 / self.r)
        return np.where(fin, out, big)

    def check_releasable(self) -> None:
        """Refuse a scale, or a weighted measure's scale ``scale·w``, the noise cannot be drawn at.

        Raises:
            InvalidParameterError: With the scale (and weight), its value and the allowed range.

        Example:
            >>> VectorSubbotin(r=2.0, scale=1.0, weights={"x": 1e3}).check_releasable()
            >>> try:
            ...     VectorSubbotin(r=2.0, scale=1.0, weights={"x": 1e-300}).check_releasable()
            ... except Exception as e:
            ...     print(str(e)[:70])
            VectorSubbotin: scale=1e-300 (scale=1.0 x weights['x']=1e-300) is too 
        """
        super().check_releasable()
        for m, w in self.weights.items():
            s = self.scale * w
            check_noise_range(_SubbotinNoise(self.r, s), type(self).__name__, "scale", s,
                              f" (scale={self.scale!r} x weights[{m!r}]={w!r})")

    def measure_mechanism(self, measure: str) -> Subbotin:
        """The scalar mechanism releasing one measure: ``Subbotin(r, scale·w, delta=...)``.

        Its own policy functions describe a single measure released alone; the joint
        guarantee is the one of this object evaluated at
        [`norm`][tabdp.mechanisms.VectorSubbotin.norm].

        Args:
            measure: Measure name.

        Returns:
            A [`Subbotin`][tabdp.mechanisms.Subbotin] with scale ``scale·w_measure``.

        Example:
            >>> VectorSubbotin(r=2.0, scale=1.5, weights={"x": 2.0}).measure_mechanism("x").params()
            {'r': 2.0, 'scale': 3.0}
        """
        if not isinstance(measure, str):
            raise InvalidParameterError(
                f"{type(self).__name__}.measure_mechanism: measure must be a name (str); got "
                f"{measure!r}.")
        return Subbotin(self.r, self.scale * self.weight(measure), delta=self.delta)

    def params(self) -> dict[str, Any]:
        """Public parameters: r, scale and weights (when given).

        Example:
            >>> VectorSubbotin(r=2.0, scale=1.0, weights={"a": 2.0}).params()
            {'r': 2.0, 'scale': 1.0, 'weights': {'a': 2.0}}
        """
        out = super().params()
        if self.weights:
            out["weights"] = dict(self.weights)
        return out

    def __hash__(self) -> int:
        """Hash consistent with ``==`` (params, with the weights dict as sorted items)."""
        items = tuple(sorted((k, v) for k, v in self.params().items() if k != "weights"))
        return hash((type(self).__name__, items, tuple(sorted(self.weights.items()))))

    @classmethod
    def optimal(cls, epsilon: float, delta: float, m: int, sensitivity: float = 1.0,
                weights: Mapping[str, float] | None = None,
                r_grid: Iterable[float] | None = None) -> VectorSubbotin:
        """The calibrated vector mechanism of smallest MSE ([Vin22] eq. 5) among valid shapes.

        A unit contributing ``sensitivity`` (in scaled units ``c_j / w_j``) to each of ``m``
        measures has ℓ_r sensitivity ``Δ_r = m^{1/r}·sensitivity`` (Thm 10); r minimizes
        ``s_r(ε, δ, Δ_r)²·Var_r`` ([`choose_subbotin_r`][tabdp.privacy.approx.choose_subbotin_r])
        and the scale is ``s_r(ε, δ, Δ_r)`` (min_scale), so each cell is (ε, δ)-DP for that unit.
        Only r ∈ {1, 2} are valid for vectors (see the class notes on Thm 9), so the grid is
        ``(1, 2)``; the search is kept in `choice`.

        Args:
            epsilon: Target ε ≥ 0 per cell.
            delta: Target δ in (0, 1) per cell.
            m: Number of measures, ≥ 1 (equal to ``len(weights)`` when weights are given).
            sensitivity: Largest scaled contribution of a unit to one measure, > 0.
            weights: Measure → positive public weight.
            r_grid: Shapes to try, a subset of {1, 2} (default both).

        Returns:
            The calibrated [`VectorSubbotin`][tabdp.mechanisms.VectorSubbotin].

        Raises:
            InvalidParameterError: On invalid arguments, or a grid with r ∉ {1, 2}.

        Example:
            >>> mech = VectorSubbotin.optimal(1.0, 1e-4, m=100, sensitivity=1 / 500)
            >>> mech.r, round(mech.scale, 7), mech.gaussian_dp           # [Vin22] §4.1, r = 2
            (2.0, 0.0637141, True)
        """
        owner = f"{cls.__name__}.optimal"
        mm = check_int("m", m, owner=owner, ge=1,
                       hint="m is the number of measures released together, e.g. m=10")
        sens = check_real("sensitivity", sensitivity, owner=owner, gt=0.0,
                          hint="the largest contribution of a unit to one measure, in scaled "
                               "units, e.g. sensitivity=1.0")
        w = _check_weights(weights, owner)
        if weights is not None and len(w) != mm:
            raise InvalidParameterError(
                f"{owner}: weights list {len(w)} measure(s) but m={mm}.\nHint: give one weight "
                "per released measure, or leave weights=None (all 1).")
        grid = (1.0, 2.0) if r_grid is None else list(r_grid)
        bad = [x for x in grid if not (isinstance(x, (int, float)) and float(x) in (1.0, 2.0))]
        if bad:
            raise InvalidParameterError(
                f"{owner}: r_grid may only hold 1 and 2 for a vector release; got {bad!r}. "
                "Vinterbo 2022 Thm 9 does not hold for other r (see VectorSubbotin).\nHint: leave "
                "r_grid=None; choose_subbotin_r() still evaluates eq. (5) on any grid.")
        choice = choose_subbotin_r(epsilon, delta, lambda r: mm ** (1.0 / r) * sens, grid)
        mech = cls(choice.r, choice.scale, weights=weights)
        mech.choice = choice
        return mech
