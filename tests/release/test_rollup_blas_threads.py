"""Rollup margins do not depend on the number of BLAS threads (the machine's cores).

The Gil-Pelaez sums of the laws of sums ran as ``np.dot`` on vectors of up to millions of
terms; OpenBLAS splits such a dot product between its threads, so a seeded release's rollup
margins differed in the last bits between machines with one core and with several (80 ``moe``
values of a 1,000-row run of the example, up to 7e-15 relative). They are now fixed-order
pairwise sums: the same bytes whatever ``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS``.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tabdp.mechanisms import ExpPolyLog, Laplace, Logistic
from tabdp.release import sum_error_law

ROOT = Path(__file__).resolve().parents[2]

#: Margins whose inversion sums have from about 20 to 160,000 terms (BLAS threads a dot
#: product above 10,000 terms); printed as the bytes of the float64 arrays.
SCRIPT = """
from tabdp.mechanisms import DiscreteLaplace, ExpPolyLog, Laplace, Logistic
from tabdp.release import sum_error_law
ns = [2, 7, 50, 300, 3000]
for mech in (ExpPolyLog(sigma=3.0, a=1.0, d=5.0), Laplace(scale=1.0), Logistic(scale=1.0),
             DiscreteLaplace(scale=30.0)):
    print(sum_error_law(mech, ns, level=0.9)[0].tobytes().hex())
"""


def _margins(threads: int) -> str:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads),
           "MKL_NUM_THREADS": str(threads),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_rollup_margins_are_the_same_bytes_with_one_or_two_blas_threads() -> None:
    if (os.cpu_count() or 1) < 2:  # pragma: no cover - OpenBLAS caps its threads at the cores
        pytest.skip("needs two cores: OpenBLAS uses at most one thread per core")
    one, two = _margins(1), _margins(2)
    assert one.count("\n") == 4
    assert one == two


def test_fixed_order_sums_are_as_accurate_as_the_dot_products_they_replace(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The inversion sums, against the exact sums (``math.fsum``) of the same products.

    Bound: 4e-16 of ``Σ|a_i·b_i|`` (measured: the pairwise sums at most 2.7e-16, the BLAS dot
    products they replace up to 6.9e-16).
    """
    mod = sys.modules["tabdp.release.rollup"]
    monkeypatch.setattr(mod, "_MEMO", type(mod._MEMO)())
    seen: list[tuple[np.ndarray, np.ndarray, float]] = []
    orig = mod._solve_coverage

    def spy(t: np.ndarray, w: np.ndarray, dt: float, level: float, x0: float,
            xmax: float) -> float:
        x = orig(t, w, dt, level, x0, xmax)
        seen.append((t, w, x))
        return x  # type: ignore[no-any-return]

    monkeypatch.setattr(mod, "_solve_coverage", spy)
    sum_error_law(ExpPolyLog(sigma=3.0, a=1.0, d=5.0), [2, 7, 300, 3000], level=0.9)
    sum_error_law(Laplace(scale=1.0), [2, 3000], level=0.9)
    sum_error_law(Logistic(scale=1.0), [50], level=0.9)
    assert max(t.size for t, _, _ in seen) > 100_000
    for t, w, x in seen:
        for a, b in ((w / t, np.sin(t * x)), (w, np.cos(t * x))):
            p = a * b
            exact = math.fsum(p.tolist())
            assert abs(mod._fixed_dot(a, b) - exact) <= 4e-16 * math.fsum(np.abs(p).tolist())
    # and the margin itself: P(|S| > x) = e^-x (1 + x/2) for two Laplace(1) draws
    for level in (0.5, 0.9, 0.99):
        x = float(sum_error_law(Laplace(scale=1.0), [2], level=level)[0][0])
        assert abs(math.exp(-x) * (1.0 + x / 2.0) - (1.0 - level)) < 1e-12
