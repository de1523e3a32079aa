"""The symmetric α-stable (SaS) mechanism: release ``q + SaS(α, γ)`` (docs/math/stable.md, [ZA25]).

For 1 ≤ α < 2 the mechanism is pure DP with a per-record policy ε(Δ) = ε(α, d = Δ/γ), the
exact sup of the privacy loss (`tabdp.noise.stable.stable_loss_sup`), evaluated for
millions of Δ through a cached conservative table (never below the exact value; at most ~4e-10
above it, and at most ``EPS_TABLE_RTOL`` = 1e-8 for every supported α). ε grows like d for small
d and like (α+1)·ln d for large d, so the loss of a record grows only logarithmically in its
sensitivity: SaS is a *slowly scaling* mechanism in the sense of [FCD+24]. α = 1 is the Cauchy
mechanism, ε = 2·asinh(Δ/(2γ)); α = 2 is the Gaussian ``N(0, 2γ²)``, which is not pure (zCDP
ρ = Δ²/(4γ²)).

Uncertainty: for α < 2 the noise has no variance, so ``sd`` is ``inf``; the margin of error is
the exact quantile of |Z| and the typical error is the mean absolute deviation
``E|Z| = 2γ·Γ(1 − 1/α)/π`` ([`SymmetricStable.mad`][tabdp.mechanisms.SymmetricStable.mad]). Because
SaS is strictly stable, the noise of a sum of n released cells (or of Σ wᵢ·Zᵢ) is again SaS with
``γ' = (Σ |wᵢ|^α)^{1/α}·γ``
([`SymmetricStable.aggregate`][tabdp.mechanisms.SymmetricStable.aggregate],
[`sum_gamma`][tabdp.mechanisms.stable.sum_gamma]): margins of error of aggregates are exact too.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from tabdp import registry
from tabdp._deprecation import renamed_argument
from tabdp._lazy_scipy import minimize_scalar
from tabdp._numeric import div_up, half_square_up, inflate
from tabdp._validation import check_real
from tabdp.exceptions import InvalidParameterError
from tabdp.mechanisms._base import DEFAULT_LEVEL, LawOfSums, check_level, not_pure
from tabdp.mechanisms.additive import AdditiveMechanism
from tabdp.noise.stable import (
    ALPHA_MAX,
    ALPHA_MIN,
    check_alpha,
    stable_epsilon_table,
    stable_shift_for_epsilon,
)
from tabdp.noise.stable import SymmetricStable as _StableNoise

__all__ = ["SymmetricStable", "sum_gamma"]


def sum_gamma(alpha: float, gammas: ArrayLike) -> float:
    """Scale of a sum of independent SaS(α, γᵢ) variables: ``(Σ γᵢ^α)^{1/α}``.

    SaS is strictly stable ([ZA25] Lemma 29): a·X₁ + b·X₂ ~ (|a|^α + |b|^α)^{1/α}·X, so a
    weighted sum Σ wᵢ·Zᵢ of SaS(α, γ) noises has scale ``sum_gamma(α, |w|·γ)``.

    Args:
        alpha: Stability index (see `tabdp.noise.stable.check_alpha`).
        gammas: Scales γᵢ ≥ 0 (at least one > 0).

    Returns:
        The scale of the sum.

    Raises:
        InvalidParameterError: For a bad α, or scales that are negative, non-finite or all 0.

    Example:
        >>> round(sum_gamma(2.0, [3.0, 4.0]), 12)       # Gaussian: root of the sum of squares
        5.0
        >>> round(sum_gamma(1.0, [1.0, 2.5]), 12)       # Cauchy: scales add up
        3.5
    """
    al = check_alpha(alpha, owner="sum_gamma")
    g = np.abs(np.asarray(gammas, dtype=np.float64)).ravel()
    if g.size == 0 or not np.all(np.isfinite(g)) or not np.any(g > 0):
        raise InvalidParameterError(
            f"sum_gamma: gammas must be finite, non-empty and not all 0; got "
            f"{g[:5].tolist()}.\nHint: pass the scales (or |weight| x scale) of the summands.")
    m = float(g.max())
    return m * float(np.sum((g / m) ** al)) ** (1.0 / al)


@registry.mechanism('symmetric_stable', aliases=('stable',), tags=('spec', 'additive'), rank=8)
class SymmetricStable(AdditiveMechanism):
    """SaS mechanism: ``q + SaS(α, γ)`` ([ZA25]; docs/math/stable.md).

    * 1 ≤ α < 2: pure DP; PRDP policy ε(Δ) = sup_x ln p(x − Δ)/p(x) (exact numeric sup,
      served by a certified conservative table, docs/math/stable.md §2.1), PRzCDP ε·tanh(ε/2).
      ``sd`` is ``inf`` (no variance); use [`mad`][tabdp.mechanisms.SymmetricStable.mad] and the
      margins of error.
    * α = 2: the Gaussian N(0, 2γ²): not pure, ρ(Δ) = Δ²/(4γ²), exact (ε, δ) via Gaussian DP.

    Args:
        alpha: Stability index: 1 (Cauchy), 1.001 … 1.9999, or 2 (Gaussian).
        gamma: Scale γ > 0 (characteristic function exp(−|γt|^α)).

    Example:
        >>> m = SymmetricStable(alpha=1.0, gamma=1.0)
        >>> round(float(m.epsilon(1.0)), 5), m.pure, m.noise.std()
        (0.96242, True, inf)
    """

    pure = True
    noise: _StableNoise

    def __init__(self, alpha: float, gamma: float) -> None:
        """Build the stable noise law (which checks the parameters) and its policy."""
        noise = _StableNoise(alpha, gamma)
        self.alpha, self.gamma = noise.alpha, noise.gamma
        super().__init__(noise)
        if self.alpha == 2.0:
            self.pure = False
            self.gaussian_dp = True
            self.policy_formula = "rho(D) = D^2 / (4 gamma^2)  (Gaussian N(0, 2 gamma^2))"
        else:
            self.policy_formula = (
                "eps(D) = sup_x ln p(x - D/gamma) / p(x), p the SaS(alpha, 1) density "
                "(exact numeric sup, conservative table); rho = eps * tanh(eps / 2)")

    # -- privacy ---------------------------------------------------------------------------------
    def sum_law(self) -> LawOfSums:
        """The law of a sum of released cells: n^(1/α) times the one-cell margin (stability).

        Example:
            >>> from tabdp.mechanisms import SymmetricStable
            >>> SymmetricStable(alpha=1.5, gamma=1.0).sum_law().kind
            'stable'
        """
        return LawOfSums("stable", self.noise, self.gamma, self.alpha)

    def epsilon(self, sensitivity: ArrayLike) -> np.ndarray:
        """PRDP policy ε(Δ) = ε(α, Δ/γ), vectorized (conservative, tight to ~4e-10; ~0.1 µs/value).

        The first call for a new α builds the table (about 1–2 s); α = 1 is the closed form
        2·asinh(Δ/(2γ)); α = 2 gives ``inf`` for Δ > 0.

        Args:
            sensitivity: Per-record sensitivities Δ.

        Returns:
            PRDP losses.

        Example:
            >>> SymmetricStable(1.0, 0.5).epsilon([0.0, 1.0]).round(6).tolist()   # 2 asinh(1)
            [0.0, 1.762747]
        """
        d = np.abs(np.asarray(sensitivity, dtype=np.float64))
        if self.alpha == 2.0:
            return not_pure(d)
        # the table is increasing in the shift: at a shift rounded up it is never below ε
        e = stable_epsilon_table(self.alpha)(div_up(d, self.gamma))
        # α = 1 is the closed form 2·asinh(Δ/(2γ)) (a few ulps): rounded up too
        return inflate(e, 8.0, d > 0) if self.alpha == 1.0 else e

    def rho(self, sensitivity: ArrayLike) -> np.ndarray:
        """PRzCDP policy: ε·tanh(ε/2) for α < 2; Δ²/(4γ²) for the Gaussian α = 2.

        Args:
            sensitivity: Per-record sensitivities Δ.

        Returns:
            ρ(Δ).

        Example:
            >>> float(SymmetricStable(2.0, 1.0).rho(2.0))
            1.0
        """
        d = np.abs(np.asarray(sensitivity, dtype=np.float64))
        if self.alpha == 2.0:
            # (Δ/γ)²/4 rounded up (no under/overflow of Δ², γ²); exact stays exact
            return half_square_up(div_up(d, self.gamma), 0.25)
        return super().rho(d)

    def params(self) -> dict[str, Any]:
        """Public parameters.

        Example:
            >>> SymmetricStable(1.5, 2.0).params()
            {'alpha': 1.5, 'gamma': 2.0}
        """
        return {"alpha": self.alpha, "gamma": self.gamma}

    # -- error -----------------------------------------------------------------------------------
    def mad(self) -> float:
        """Mean absolute error of a released cell: E|Z| = 2γ·Γ(1 − 1/α)/π (``inf`` at α = 1).

        Example:
            >>> round(SymmetricStable(2.0, 1.0).mad(), 4)     # [ZA25] Table 1: 1.1284 γ
            1.1284
        """
        return self.noise.mad()

    def aggregate(self, n_or_weights: int | ArrayLike) -> SymmetricStable:
        """The mechanism whose noise is that of a sum of released cells (stability).

        ``n`` cells: γ' = n^{1/α}·γ; weights w: the noise of Σ wᵢ·(qᵢ + Zᵢ) is
        SaS(α, (Σ|wᵢ|^α)^{1/α}·γ) (docs/math/stable.md §3).

        Args:
            n_or_weights: A number of cells n ≥ 1, or the weights wᵢ.

        Returns:
            A [`SymmetricStable`][tabdp.mechanisms.SymmetricStable] with the same α and the
            aggregate scale.

        Raises:
            InvalidParameterError: For n < 1 or unusable weights.

        Example:
            >>> SymmetricStable(1.0, 2.0).aggregate(3).gamma          # Cauchy: 3 x 2
            6.0
            >>> round(SymmetricStable(2.0, 1.0).aggregate([3.0, 4.0]).gamma, 12)
            5.0
        """
        if np.ndim(n_or_weights) == 0:
            n = check_real("n_or_weights", n_or_weights, owner="SymmetricStable.aggregate",
                           ge=1.0, hint="pass a number of cells n >= 1, or a list of weights")
            return SymmetricStable(self.alpha, self.gamma * n ** (1.0 / self.alpha))
        w = np.asarray(n_or_weights, dtype=np.float64)
        return SymmetricStable(self.alpha, sum_gamma(self.alpha, np.abs(w) * self.gamma))

    def moe_of_sum(self, n_or_weights: int | ArrayLike, level: float = DEFAULT_LEVEL) -> float:
        """Exact margin of error of a sum (or weighted sum) of released cells.

        Args:
            n_or_weights: A number of cells n ≥ 1, or the weights wᵢ.
            level: Confidence level.

        Returns:
            Half-width h with P(|noise of the sum| ≤ h) = level.

        Example:
            >>> round(SymmetricStable(1.0, 1.0).moe_of_sum(2, 0.5), 12)   # Cauchy(2): 2·tan(π/4)
            2.0
        """
        lv = check_level(level)
        return self.aggregate(n_or_weights).noise.interval_halfwidth(lv)

    # -- calibration -----------------------------------------------------------------------------
    @classmethod
    @renamed_argument("delta", "sensitivity")
    def for_epsilon(cls, alpha: float, epsilon: float,
                    sensitivity: float = 1.0) -> SymmetricStable:
        """The mechanism whose exact ε at sensitivity Δ (``sensitivity``) equals ``epsilon``.

        Solves ε(α, d) = ε for d = Δ/γ (Newton on ln d, verified by the grid + Brent
        algorithm; α = 1 closed form γ = Δ/(2·sinh(ε/2))) and returns γ = Δ/d. Reference
        table (docs/math/stable.md §2.4, Δ = ε = 1): γ = 0.9595173757 (α = 1), 0.9200428658 (1.2),
        0.9938762864 (1.5), 1.2545741788 (1.8), 1.4658061998 (1.9), 2.1100355502 (1.99).

        Args:
            alpha: Stability index in [1, 2) (α = 2 is not pure DP).
            epsilon: Target ε > 0.
            sensitivity: Sensitivity Δ > 0 at which ε is attained.

        Returns:
            The calibrated mechanism.

        Raises:
            InvalidParameterError: For α = 2 or bad ε/Δ.

        Example:
            >>> round(SymmetricStable.for_epsilon(1.0, 1.0).gamma, 10)
            0.9595173757
        """
        al = check_alpha(alpha, owner="SymmetricStable.for_epsilon")
        if al == 2.0:
            raise InvalidParameterError(
                "SymmetricStable.for_epsilon: alpha = 2 is the Gaussian mechanism, which is "
                "not pure DP (epsilon = inf for every Delta > 0); allowed are alpha = 1 and "
                f"{ALPHA_MIN} <= alpha <= {ALPHA_MAX}.\nHint: pick alpha < 2, e.g. 1.8, or use "
                "tabdp.mechanisms.Gaussian with a zCDP budget.")
        eps = check_real("epsilon", epsilon, owner="SymmetricStable.for_epsilon", gt=0.0,
                         hint="epsilon is the pure-DP loss at sensitivity Δ, e.g. 1.0")
        dl = check_real("sensitivity", sensitivity, owner="SymmetricStable.for_epsilon", gt=0.0,
                        hint="sensitivity is the Δ at which epsilon is attained, e.g. 1.0")
        return cls(al, dl / stable_shift_for_epsilon(al, eps))

    @classmethod
    @renamed_argument("delta", "sensitivity")
    def min_mad(cls, epsilon: float, sensitivity: float = 1.0,
                alpha_range: tuple[float, float] = (1.05, 1.99),
                xatol: float = 1e-4) -> SymmetricStable:
        """The calibrated mechanism (α and γ) with the smallest MAD for a target ε at Δ.

        Bounded scalar minimization over α of MAD(α) = 2·γ(α)·Γ(1 − 1/α)/π with γ(α) from
        [`for_epsilon`][tabdp.mechanisms.SymmetricStable.for_epsilon]. MAD → ∞ as α → 1 (Γ(1 − 1/α)
        blows up) and γ(α) grows fast as α → 2, so the optimum is interior (α ≈ 1.76 for ε = Δ = 1,
        MAD ≈ 1.590; fixed α: 1.695 at α = 1.5, 1.592 at 1.8, 1.745 at 1.9). Each evaluation is a
        calibration (~20 ms).

        Args:
            epsilon: Target ε > 0.
            sensitivity: Sensitivity Δ > 0 at which ε is attained.
            alpha_range: Search interval for α, inside [1.001, 1.9999].
            xatol: Absolute tolerance on α.

        Returns:
            The calibrated mechanism at the best α.

        Raises:
            InvalidParameterError: For a bad range or ε/Δ.

        Example:
            >>> m = SymmetricStable.min_mad(1.0, alpha_range=(1.7, 1.8), xatol=0.02)
            >>> 1.7 <= m.alpha <= 1.8 and m.mad() < 1.6
            True
        """
        owner = "SymmetricStable.min_mad"
        eps = check_real("epsilon", epsilon, owner=owner, gt=0.0)
        dl = check_real("sensitivity", sensitivity, owner=owner, gt=0.0)
        lo, hi = (float(a) for a in alpha_range)
        if not (ALPHA_MIN <= lo < hi <= ALPHA_MAX):
            raise InvalidParameterError(
                f"{owner}: alpha_range must satisfy {ALPHA_MIN} <= lo < hi <= {ALPHA_MAX}; got "
                f"{alpha_range!r}.\nHint: use e.g. alpha_range=(1.05, 1.99).")
        tol = check_real("xatol", xatol, owner=owner, gt=0.0)

        def mad(a: float) -> float:
            d = stable_shift_for_epsilon(a, eps, verify=False)
            return 2.0 * (dl / d) * math.gamma(1.0 - 1.0 / a) / math.pi

        res = minimize_scalar(mad, bounds=(lo, hi), method="bounded", options={"xatol": tol})
        return cls.for_epsilon(float(res.x), eps, dl)
