"""What tabdp's Spark engine runs in PySpark's Python workers, and the numpy policy it shares.

A pandas UDF (or ``mapInPandas`` function) is pickled on the driver and unpickled in each new
Python worker, which imports every module the function's code refers to by reference. Spark
starts new workers often (one per core at the first Python task, again after a worker has been
idle for a minute), so these functions live here, in a module that imports NumPy and pandas
only (and, by reference, the mechanism's own module and its noise law's, which load neither
SciPy's special functions nor mpmath until a noise table needs them): not Polars, not tabdp's
frame engine, not `tabdp.release`. The per-row policy (`tabdp._policy`: `Policy`, `magnitudes_up`,
`size_and_delta`, `policy_values`) is the one the Polars engine uses, so both engines charge
identical losses; it lives apart, in NumPy only, so that the Polars engine (a `tabdp run`)
does not load pandas.

Example:
    >>> import numpy as np, pandas as pd
    >>> from tabdp.mechanisms import Laplace
    >>> charge, curs = charge_fn(Laplace(scale=1.0), ["x"], "sum", {"x": 0}, "in_")
    >>> curs
    [('x', ['x'])]
    >>> out = charge(pd.DataFrame({"in_a:x": [2.0], "in_s:x": [1.0]}))
    >>> out[["r0", "e0", "s0"]].round(6).values.tolist()
    [[1.523188, 2.0, 2.0]]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from tabdp._numeric import add_up, engine_thread
from tabdp._policy import Policy, magnitudes_up, policy_values, size_and_delta
from tabdp._quantile_cells import cell_quantiles

if TYPE_CHECKING:
    from tabdp.mechanisms import Mechanism

def charge_fn(mechanism: Mechanism, measures: list[str], kind: str, bits: dict[str, int],
              prefix: str) -> tuple[Callable[[pd.DataFrame], pd.DataFrame],
                                    list[tuple[str, list[str]]]]:
    """The per-(unit, cell) charges of a batch, by the same numpy code as the Polars engine's.

    Per row: each currency's ρ, ε (ε_a, δ_a) and size (``r<i>``, ``e<i>``, ``s<i>``
    (``ea<i>``, ``da<i>``)), and the row's total ρ and size (``cell_rho``, ``cell_size``).
    Input columns: ``<prefix>rows_in`` (counts), ``<prefix>a:<m>`` and ``<prefix>s:<m>`` (a
    measure's fixed-point magnitude as a float and its sign, sums).

    Args:
        mechanism: The release's mechanism.
        measures: The summed measures (ignored for counts).
        kind: ``"count"`` or ``"sum"``.
        bits: Each measure's fixed point's fractional bits.
        prefix: The reserved prefix of the input columns.

    Returns:
        The batch function and the release's currencies.

    Example:
        >>> from tabdp.mechanisms import Laplace
        >>> f, curs = charge_fn(Laplace(scale=1.0), [], "count", {}, "in_")
        >>> f(pd.DataFrame({"in_rows_in": [1.0, 3.0]}))["e0"].tolist()
        [1.0, 3.0]
    """
    policy = Policy(mechanism, measures if kind == "sum" else [])
    curs = policy.currencies()

    def charge(inp: pd.DataFrame) -> pd.DataFrame:
        with engine_thread():  # a Spark worker: NumPy's errors off, no thread pools of ours
            return _charged(policy, curs, kind, bits, prefix, inp)

    return charge, curs


def _charged(pol: Policy, curs: list[tuple[str, list[str]]], kind: str, bits: dict[str, int],
             prefix: str, inp: pd.DataFrame) -> pd.DataFrame:
    n = len(inp)
    out: dict[str, np.ndarray] = {}
    cell_rho = np.zeros(n)
    cell_size = np.zeros(n)
    for i, (_, ms) in enumerate(curs):
        if kind == "count":
            size = inp[f"{prefix}rows_in"].to_numpy(dtype=np.float64)
            delta = size
        else:
            mags = {}
            for m in ms:
                mags[m] = magnitudes_up(inp[f"{prefix}a:{m}"].to_numpy(dtype=np.float64),
                                        bits[m])
            size, delta = size_and_delta(
                pol, ms, mags, lambda m: inp[f"{prefix}s:{m}"].to_numpy(dtype=np.float64))
        vals = policy_values(pol, kind, delta)
        # a (unit, cell)'s ρ over currencies, rounded up as the Polars engine's (`add_up`;
        # review R18-6: a plain sum was below it)
        cell_rho = np.array(vals[0], dtype=np.float64) if i == 0 else add_up(cell_rho, vals[0])
        np.maximum(cell_size, size, out=cell_size)
        out[f"r{i}"], out[f"e{i}"], out[f"s{i}"] = vals[0], vals[1], size
        if pol.approx:
            out[f"ea{i}"], out[f"da{i}"] = vals[2], vals[3]
    out["cell_rho"], out["cell_size"] = cell_rho, cell_size
    return pd.DataFrame(out)


def quantile_cell_fn(cell: str, x: str, q: float, gamma: float,
                     bounds: tuple[float, float]) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """An ``applyInPandas`` function: one cell's exact quantile and smooth sensitivity.

    The group's values (column ``x``) go through `tabdp._quantile_cells.cell_quantiles`, the
    computation of every engine (before stop 68 this function was a closure in the frame
    engine's module, and a new worker unpickling it imported Polars and the frame engine).

    Args:
        cell: The cell column (one value per group).
        x: The values' column.
        q: Quantile level.
        gamma: Smoothness γ.
        bounds: Public ``(lo, hi)``.

    Returns:
        The function: a cell's rows in, one row out (``cell``, ``truth``, ``ss``, ``n`` and the
        CONFIDENTIAL count ``clipped``).

    Example:
        >>> f = quantile_cell_fn("c", "v", 0.5, 1.0, (0.0, 10.0))
        >>> f(pd.DataFrame({"c": [4, 4, 4], "v": [1.0, 2.0, 30.0]}))[["c", "truth", "n",
        ...                                                          "clipped"]].values.tolist()
        [[4.0, 2.0, 3.0, 1.0]]
    """

    def per_cell(pdf: pd.DataFrame) -> pd.DataFrame:
        v = pdf[x].to_numpy(dtype=np.float64)
        with engine_thread():  # a Spark worker: NumPy's errors off, no pools of ours
            t, ss, clipped = cell_quantiles(np.zeros(v.size, dtype=np.int64), v, 1, q, gamma,
                                            bounds)
        return pd.DataFrame({cell: [int(pdf[cell].iloc[0])], "truth": [float(t[0])],
                             "ss": [float(ss[0])], "n": [int(v.size)], "clipped": [clipped]})

    return per_cell


def eps_delta_fn(delta: float) -> Callable[[pd.DataFrame], pd.Series]:
    """Each row's ε at ``delta`` from its accounting components (a batch function).

    Args:
        delta: The δ of the (ε, δ) statement.

    Returns:
        A function of a batch of the components' columns.

    Example:
        >>> f = eps_delta_fn(1e-4)
        >>> r = 0.5 / 3.18570299**2  # one Gaussian release: exactly eps = 1 at delta = 1e-4
        >>> comps = pd.DataFrame({"rho": [r], "epsilon": [np.inf], "size": [1.0],
        ...                       "rho_z": [r], "rho_g": [r], "eps_a": [0.0],
        ...                       "delta_a": [0.0]})
        >>> round(float(f(comps)[0]), 6)
        1.0
    """

    def eps(comps: pd.DataFrame) -> pd.Series:
        from tabdp.privacy.accounting import COMPONENTS, epsilon_at

        c = {k: comps[k].to_numpy(dtype=np.float64) for k in COMPONENTS}
        with engine_thread():  # a Spark worker: NumPy's errors off, no thread pools of ours
            return pd.Series(epsilon_at(delta, c["rho_z"], c["rho_g"], c["eps_a"],
                                        c["delta_a"], c["epsilon"]))

    return eps


def admit_batch(budget: Any, curs: list[str], guarantee: str, b: pd.DataFrame,
                prefix: str, lifetime: Any = None) -> dict[str, np.ndarray]:
    """The one individual filter on a batch of units (charges and ``<prefix>led:`` columns).

    With a lifetime budget (``lifetime``), the same filter again over the units' lifetime
    totals (``<prefix>life:`` columns: the series' stored losses plus this run's), ANDed, as
    ``Session.admit`` does on the other engines.

    Args:
        budget: The session's budget.
        curs: The release's currencies.
        guarantee: ``"zcdp"`` or ``"approx"``.
        b: The batch: ``r<i>``, ``e<i>``, ``s<i>`` per currency and the ledger's columns.
        prefix: The reserved prefix of the ledger's columns.
        lifetime: The lifetime budget, if any.

    Returns:
        Each currency's admitted rows.

    Example:
        >>> from tabdp.privacy import Budget
        >>> b = pd.DataFrame({"r0": [0.5, 2.0], "e0": [1.0, 2.0], "s0": [1.0, 1.0],
        ...                   "in_led:rho": [0.0, 0.0]})
        >>> admit_batch(Budget(rho=1.0), ["rows"], "zcdp", b, "in_")["rows"].tolist()
        [True, False]
    """
    from tabdp.privacy.filter import individual_filter
    from tabdp.privacy.ledger import Charges

    n = len(b)
    ch = Charges(np.arange(n),
                 {c: b[f"r{i}"].to_numpy(dtype=np.float64) for i, c in enumerate(curs)},
                 {c: b[f"e{i}"].to_numpy(dtype=np.float64) for i, c in enumerate(curs)},
                 {c: b[f"s{i}"].to_numpy(dtype=np.float64) for i, c in enumerate(curs)},
                 guarantee)
    out = individual_filter(budget, ch, lambda units, cols: {
        c: b[f"{prefix}led:{c}"].to_numpy(dtype=np.float64).copy() for c in cols})
    if lifetime is not None:
        life = individual_filter(lifetime, ch, lambda units, cols: {
            c: b[f"{prefix}life:{c}"].to_numpy(dtype=np.float64).copy() for c in cols})
        out = {c: out[c] & life[c] for c in out}
    return out


def admit_fn(budget: Any, curs: list[str], guarantee: str, prefix: str, uid: str,
             lifetime: Any = None) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """A ``mapInPandas`` function: the session's own individual filter on batches of units.

    Args:
        budget: The session's budget.
        curs: The release's currencies.
        guarantee: ``"zcdp"`` or ``"approx"``.
        prefix: The reserved prefix of the ledger's columns.
        uid: The unit column, passed through.
        lifetime: The lifetime budget, if any.

    Returns:
        The function: batches of units in, ``uid`` and ``ok<i>`` per currency out.

    Example:
        >>> from tabdp.privacy import Budget
        >>> f = admit_fn(Budget(rho=1.0), ["rows"], "zcdp", "in_", "u")
        >>> b = pd.DataFrame({"u": [7], "r0": [0.5], "e0": [1.0], "s0": [1.0],
        ...                   "in_led:rho": [0.0]})
        >>> next(f(iter([b]))).values.tolist()
        [[7, True]]
    """

    def admit(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for b in batches:
            with engine_thread():  # a Spark worker: NumPy's errors off, no pools of ours
                ok = admit_batch(budget, curs, guarantee, b, prefix, lifetime)
            yield pd.DataFrame({uid: b[uid], **{f"ok{i}": ok[c] for i, c in enumerate(curs)}})

    return admit


def admit_rows_fn(budget: Any, curs: list[str], guarantee: str, need: list[str],
                  prefix: str) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """A scalar pandas UDF's function: the individual filter row by row.

    Input: a struct of ``r<i>``, ``e<i>``, ``s<i>`` per currency and ``l<k>``, the unit's
    earlier total of ``need[k]``; output: a struct of ``ok<i>`` per currency.

    Args:
        budget: The session's budget.
        curs: The release's currencies.
        guarantee: ``"zcdp"`` or ``"approx"``.
        need: The ledger columns the filter reads, in the order of the ``l<k>`` fields.
        prefix: The reserved prefix of the ledger's columns.

    Returns:
        The batch function.

    Example:
        >>> from tabdp.privacy import Budget
        >>> f = admit_rows_fn(Budget(rho=1.0), ["rows"], "zcdp", ["rho"], "in_")
        >>> f(pd.DataFrame({"r0": [2.0], "e0": [2.0], "s0": [1.0], "l0": [0.0]}))["ok0"].tolist()
        [False]
    """

    def admit(b: pd.DataFrame) -> pd.DataFrame:
        b = b.rename(columns={f"l{k}": f"{prefix}led:{c}" for k, c in enumerate(need)})
        with engine_thread():  # a Spark worker: NumPy's errors off, no thread pools of ours
            ok = admit_batch(budget, curs, guarantee, b, prefix)
        return pd.DataFrame({f"ok{i}": ok[c] for i, c in enumerate(curs)})

    return admit
