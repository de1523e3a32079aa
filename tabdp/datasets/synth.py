"""Synthetic establishment microdata shaped like the County Business Patterns (CBP).

Nothing here is confidential or derived from real records: every value is drawn from a
documented parametric model, so the data can be shipped, regenerated and used in tests,
examples and benchmarks. The model reproduces the features that matter for differentially
private tables:

* **Geography** -- real 2-digit state FIPS codes; counties use the real FIPS convention (odd
  3-digit suffixes ``001, 003, ...``) nested in their state, with Zipf-like sizes (a few big
  "metro" counties, many small ones).
* **Industry** -- the 19 real 2-digit NAICS sectors covered by CBP (the ranges 31-33, 44-45 and
  48-49 are stored under their first code: ``"31"``, ``"44"``, ``"48"``) and a fixed list of 301
  synthetic but structurally plausible 6-digit codes built on the real 3-digit subsectors. A
  6-digit code starts with its subsector, so for manufacturing it may begin ``31``, ``32`` or
  ``33`` while its ``naics2`` is ``"31"``; use
  [`naics6_to_naics2`][tabdp.datasets.synth.naics6_to_naics2] (or
  [`naics2_of_prefix`][tabdp.datasets.synth.naics2_of_prefix]) to roll up.
* **Heavy tails** -- employment is a lognormal body spliced with a (truncated) Pareto tail, so the
  largest establishments are 10^4-10^5 times the median; a few percent have zero employment and
  zero payroll. Firms own a heavy-tailed number of establishments (chains).
* **Money** -- payroll = employment x a sector-dependent lognormal wage; revenue = payroll x a
  sector-dependent receipts/payroll ratio x lognormal noise; quarterly payrolls add up exactly
  to the annual payroll.

The *public domains* ([`state_domain`][tabdp.datasets.synth.state_domain],
[`county_domain`][tabdp.datasets.synth.county_domain],
[`naics2_domain`][tabdp.datasets.synth.naics2_domain],
[`naics6_domain`][tabdp.datasets.synth.naics6_domain],
[`size_class_domain`][tabdp.datasets.synth.size_class_domain], or all at once with
[`public_domains`][tabdp.datasets.synth.public_domains]) depend only on the generator parameters,
never on the drawn rows, so they are safe to use as public key sets. County and industry *weights*
are fixed by the structure (not by ``seed``): different seeds are different samples from the same
population model.

Example:
    >>> df = generate_establishments(2_000, seed=1)
    >>> df.shape
    (2000, 11)
    >>> set(df["county"].unique()) <= set(county_domain())
    True
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from tabdp.exceptions import InvalidParameterError

__all__ = [
    "ESTABLISHMENT_COLUMNS",
    "QUARTER_COLUMNS",
    "SIZE_CLASSES",
    "STATE_FIPS",
    "county_domain",
    "county_to_state",
    "generate_establishment_quarters",
    "generate_establishments",
    "naics2_domain",
    "naics2_of_prefix",
    "naics6_domain",
    "naics6_to_naics2",
    "public_domains",
    "size_class_domain",
    "size_class_of",
    "state_domain",
]

#: The 50 states and DC, by 2-digit FIPS code (numeric order). ``n_states=k`` uses the first k.
STATE_FIPS: tuple[str, ...] = (
    "01", "02", "04", "05", "06", "08", "09", "10", "11", "12", "13", "15", "16", "17", "18",
    "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31", "32", "33",
    "34", "35", "36", "37", "38", "39", "40", "41", "42", "44", "45", "46", "47", "48", "49",
    "50", "51", "53", "54", "55", "56",
)

#: CBP employment size classes, smallest first. ``"0"`` holds zero-employment establishments.
SIZE_CLASSES: tuple[str, ...] = (
    "0", "1-4", "5-9", "10-19", "20-49", "50-99", "100-249", "250-499", "500-999", "1000+",
)
_SIZE_EDGES = np.array([0, 1, 5, 10, 20, 50, 100, 250, 500, 1000], dtype=np.int64)

#: Columns of :func:`generate_establishments`, in order.
ESTABLISHMENT_COLUMNS: tuple[str, ...] = (
    "estab_id", "firm_id", "state", "county", "naics2", "naics6", "size_class",
    "employment", "payroll_q1", "payroll", "revenue",
)
#: Columns of :func:`generate_establishment_quarters` (``unit_rows=True``), in order.
QUARTER_COLUMNS: tuple[str, ...] = (
    "estab_id", "firm_id", "quarter", "state", "county", "naics2", "naics6", "size_class",
    "employment", "payroll", "revenue",
)

_MAX_COUNTIES_PER_STATE = 499  # odd suffixes 001..997

# Sector table. code: (3-digit subsectors, number of 6-digit codes, share of establishments,
# body median employment, median annual wage per employee ($), receipts/payroll ratio,
# relative weight of the Pareto tail).
_SECTORS: dict[str, tuple[tuple[str, ...], int, float, float, float, float, float]] = {
    "11": (("111", "112", "113", "114", "115"), 10, 0.004, 4.0, 38_000, 4.0, 0.8),
    "21": (("211", "212", "213"), 6, 0.004, 8.0, 85_000, 7.0, 1.3),
    "22": (("221",), 4, 0.002, 12.0, 105_000, 9.0, 1.5),
    "23": (("236", "237", "238"), 14, 0.100, 4.0, 62_000, 4.5, 0.7),
    "31": (("311", "312", "313", "314", "315", "316", "321", "322", "323", "324", "325", "326",
            "327", "331", "332", "333", "334", "335", "336", "337", "339"),
           84, 0.040, 14.0, 62_000, 6.0, 2.2),
    "42": (("423", "424", "425"), 24, 0.050, 6.0, 72_000, 14.0, 1.0),
    "44": (("441", "444", "445", "449", "455", "456", "457", "458", "459"),
           27, 0.120, 6.0, 32_000, 10.0, 1.0),
    "48": (("481", "482", "483", "484", "485", "486", "487", "488", "491", "492", "493"),
           16, 0.035, 5.0, 52_000, 3.5, 1.3),
    "51": (("512", "513", "516", "517", "518", "519"), 12, 0.022, 6.0, 105_000, 5.0, 1.2),
    "52": (("521", "522", "523", "524", "525"), 15, 0.060, 5.0, 95_000, 4.0, 1.0),
    "53": (("531", "532", "533"), 8, 0.050, 3.0, 55_000, 8.0, 0.5),
    "54": (("541",), 14, 0.125, 3.0, 90_000, 2.6, 0.7),
    "55": (("551",), 2, 0.007, 12.0, 115_000, 1.5, 2.0),
    "56": (("561", "562"), 14, 0.055, 5.0, 42_000, 2.2, 1.3),
    "61": (("611",), 8, 0.013, 8.0, 42_000, 2.5, 1.5),
    "62": (("621", "622", "623", "624"), 16, 0.115, 6.0, 52_000, 2.6, 1.5),
    "71": (("711", "712", "713"), 9, 0.020, 5.0, 32_000, 3.5, 0.8),
    "72": (("721", "722"), 6, 0.090, 11.0, 21_000, 3.3, 1.0),
    "81": (("811", "812", "813", "814"), 12, 0.090, 3.0, 36_000, 3.0, 0.5),
}
# 2-digit prefixes of 6-digit codes that belong to a sector stored under another code.
_PREFIX_TO_SECTOR = {"32": "31", "33": "31", "45": "44", "49": "48"}

# Fixed model constants (documented in data/README.md).
_STRUCTURE_KEY = 0xCB9_2026  # seeds the *structural* draws (weights), independent of `seed`
_COUNTY_ZIPF = 0.9           # county weight ~ 1 / rank**_COUNTY_ZIPF
_NAICS_ZIPF = 1.0            # 6-digit code weight within its sector ~ 1 / rank**_NAICS_ZIPF
_BODY_SIGMA = 1.1            # sd of log employment in the lognormal body
_TAIL_SHARE = 0.04           # average share of establishments drawn from the Pareto tail
_TAIL_XMIN = 25.0            # Pareto scale (employees)
_WAGE_SIGMA = 0.40           # sd of log wage around the industry x county median
_REVENUE_SIGMA = 0.50        # sd of log(revenue / (payroll x ratio))
_QUARTER_SIGMA = 0.08        # sd of log quarterly payroll weights
_QUARTER_EMP_SIGMA = 0.06    # sd of log quarterly employment around the reference employment
_ZERO_EMP_REVENUE = 40_000.0  # median annual revenue of a zero-employment establishment
_MULTI_UNIT_FIRM_SHARE = 0.08  # share of firms owning more than one establishment
_FIRM_ZIPF = 2.3             # extra establishments of multi-unit firms ~ Zipf(_FIRM_ZIPF)
_MAX_FIRM_SIZE = 20_000      # cap on establishments per firm
_SAME_INDUSTRY = 0.85        # chance an establishment has its firm's 6-digit industry
_CHUNK_ROWS = 1_000_000      # establishments per independently seeded chunk
# Contiguous spans of active quarters (first, last); index 0 is the full year.
_SPANS = np.array([(1, 4), (1, 1), (1, 2), (1, 3), (2, 2), (2, 3), (2, 4), (3, 3), (3, 4),
                   (4, 4)], dtype=np.int64)


# ----------------------------------------------------------------------------- validation


def _fail(owner: str, message: str, hint: str) -> InvalidParameterError:
    return InvalidParameterError(f"{owner}: {message}\nHint: {hint}")


def _check_int(owner: str, name: str, value: Any, *, ge: int, le: int | None = None,
               hint: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise _fail(owner, f"{name} must be an int; got {value!r} of type "
                           f"{type(value).__name__}.", hint)
    v = int(value)
    if v < ge or (le is not None and v > le):
        allowed = f">= {ge}" if le is None else f"between {ge} and {le}"
        raise _fail(owner, f"{name} must be an int {allowed}; got {v}.", hint)
    return v


def _check_float(owner: str, name: str, value: Any, *, lo: float, hi: float,
                 lo_open: bool = False, hi_open: bool = False, hint: str) -> float:
    ok_type = not isinstance(value, bool) and isinstance(value, (int, float, np.integer,
                                                                 np.floating))
    x = float(value) if ok_type else math.nan
    ok = ok_type and math.isfinite(x)
    ok = ok and (x > lo if lo_open else x >= lo) and (x < hi if hi_open else x <= hi)
    if not ok:
        interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise _fail(owner, f"{name} must be a real number in {interval}; got {value!r}.", hint)
    return x


def _check_bool(owner: str, name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise _fail(owner, f"{name} must be True or False; got {value!r}.",
                    f"pass {name}=True or {name}=False.")
    return bool(value)


def _check_seed(owner: str, seed: Any) -> int | None:
    if seed is None:
        return None
    return _check_int(owner, "seed", seed, ge=0,
                      hint="pass a non-negative int (e.g. seed=20261121) for reproducible "
                           "data, or seed=None for fresh randomness.")


def _check_geography(owner: str, n_states: Any,
                     counties_per_state: Any) -> tuple[int, tuple[int, ...]]:
    ns = _check_int(owner, "n_states", n_states, ge=1, le=len(STATE_FIPS),
                    hint=f"use 1..{len(STATE_FIPS)} (the 50 states and DC); the first "
                         "n_states FIPS codes in numeric order are used.")
    hint = (f"pass an int in 1..{_MAX_COUNTIES_PER_STATE} (same count in every state) or a "
            f"sequence of {ns} such ints (one per state).")
    if isinstance(counties_per_state, (int, np.integer)) and not isinstance(
            counties_per_state, bool):
        c = _check_int(owner, "counties_per_state", counties_per_state, ge=1,
                       le=_MAX_COUNTIES_PER_STATE, hint=hint)
        return ns, (c,) * ns
    if isinstance(counties_per_state, (str, bytes)) or not isinstance(counties_per_state,
                                                                      Sequence):
        raise _fail(owner, f"counties_per_state must be an int or a sequence of ints; got "
                           f"{counties_per_state!r}.", hint)
    counts = tuple(counties_per_state)
    if len(counts) != ns:
        raise _fail(owner, f"counties_per_state has {len(counts)} entries but n_states={ns}; "
                           f"got {counties_per_state!r}.", hint)
    return ns, tuple(_check_int(owner, f"counties_per_state[{i}]", c, ge=1,
                                le=_MAX_COUNTIES_PER_STATE, hint=hint)
                     for i, c in enumerate(counts))


# ----------------------------------------------------------------------------- structure


def _structural_rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([_STRUCTURE_KEY, *key]))


def _zipf_weights(n: int, exponent: float, gen: np.random.Generator) -> np.ndarray:
    """Weights 1/rank**exponent assigned to ``n`` items in a random (structural) order."""
    ranks = gen.permutation(n) + 1.0
    return ranks ** -exponent


def _alias_table(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Walker/Vose alias table for sampling indices with probability proportional to weights."""
    k = weights.size
    prob = weights / weights.sum() * k
    alias = np.arange(k, dtype=np.int64)
    small = [i for i in range(k) if prob[i] < 1.0]
    large = [i for i in range(k) if prob[i] >= 1.0]
    while small and large:
        lo, hi = small.pop(), large.pop()
        alias[lo] = hi
        prob[hi] -= 1.0 - prob[lo]
        (small if prob[hi] < 1.0 else large).append(hi)
    for i in small + large:  # leftovers are 1 up to rounding
        prob[i] = 1.0
    return prob, alias


@functools.lru_cache(maxsize=1)
def _industry() -> dict[str, Any]:
    codes: list[str] = []
    sector_idx: list[int] = []
    sectors = list(_SECTORS)
    for s, (subsectors, n_codes, *_rest) in enumerate(_SECTORS.values()):
        base, extra = divmod(n_codes, len(subsectors))
        for i, sub in enumerate(subsectors):
            for j in range(base + (i < extra)):
                group, k = divmod(j, 6)  # 4th digit, then (5th, 6th) in 11,12,21,22,31,32
                codes.append(f"{sub}{group + 1}{k // 2 + 1}{k % 2 + 1}")
                sector_idx.append(s)
    order = np.argsort(codes, kind="stable")
    codes_sorted = [codes[i] for i in order]
    sec = np.asarray(sector_idx, dtype=np.int64)[order]
    table = np.array([v[2:] for v in _SECTORS.values()], dtype=np.float64)
    share, emp_med, wage_med, rev_ratio, tail_rel = table.T
    gen = _structural_rng(6)
    within = np.empty(len(codes_sorted))
    for s in range(len(sectors)):
        members = np.flatnonzero(sec == s)
        w = _zipf_weights(members.size, _NAICS_ZIPF, gen)
        within[members] = w / w.sum()
    weight = within * (share / share.sum())[sec]
    # Industry-level variation around the sector parameters (fixed, structural).
    emp_mult = np.exp(gen.normal(0.0, 0.30, len(codes_sorted)))
    wage_mult = np.exp(gen.normal(0.0, 0.15, len(codes_sorted)))
    tail = tail_rel[sec] * emp_mult
    tail_prob = _TAIL_SHARE * tail / float(np.dot(weight, tail))
    return {
        "codes": tuple(codes_sorted),
        "sectors": tuple(sectors),
        "sector_of_code": sec,
        "alias": _alias_table(weight),
        "log_emp": np.log(emp_med[sec] * emp_mult),
        "log_wage": np.log(wage_med[sec] * wage_mult),
        "log_rev_ratio": np.log(rev_ratio[sec]),
        "tail_prob": tail_prob,
    }


@functools.lru_cache(maxsize=16)
def _geography(counts: tuple[int, ...]) -> dict[str, Any]:
    states = STATE_FIPS[: len(counts)]
    counties = tuple(f"{st}{2 * j + 1:03d}"
                     for st, c in zip(states, counts, strict=True) for j in range(c))
    state_of_county = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    gen = _structural_rng(5, *counts)
    w = _zipf_weights(len(counties), _COUNTY_ZIPF, gen)
    log_wage = gen.normal(0.0, 0.10, len(counties)) + 0.05 * np.log(w / w.mean())
    return {
        "states": states,
        "counties": counties,
        "state_of_county": state_of_county,
        "alias": _alias_table(w),
        "log_wage": log_wage,
    }


# ----------------------------------------------------------------------------- domains


def _str_series(name: str, values: Sequence[str], categorical: bool) -> pl.Series:
    dtype = pl.Enum(list(values)) if categorical else pl.String
    return pl.Series(name, list(values), dtype=dtype)


def state_domain(n_states: int = 10) -> list[str]:
    """Return the public list of state FIPS codes for a generator configuration.

    Args:
        n_states: Number of states used by the generator (1..51); the first ``n_states`` of
            [`STATE_FIPS`][tabdp.datasets.synth.STATE_FIPS] in numeric order.

    Returns:
        Sorted 2-digit FIPS codes.

    Raises:
        InvalidParameterError: If ``n_states`` is not an int in 1..51.

    Example:
        >>> state_domain(5)
        ['01', '02', '04', '05', '06']
    """
    ns = _check_int("state_domain", "n_states", n_states, ge=1, le=len(STATE_FIPS),
                    hint=f"use 1..{len(STATE_FIPS)}.")
    return list(STATE_FIPS[:ns])


def county_domain(n_states: int = 10, counties_per_state: int | Sequence[int] = 30) -> list[str]:
    """Return the public list of county FIPS codes for a generator configuration.

    County codes are the state code followed by odd 3-digit suffixes ``001, 003, ...`` (the real
    FIPS convention). The list is the full universe, including counties a sample never hits.

    Args:
        n_states: Number of states (1..51).
        counties_per_state: Counties in every state (1..499), or one count per state.

    Returns:
        Sorted 5-digit FIPS codes.

    Raises:
        InvalidParameterError: If the arguments are out of range.

    Example:
        >>> county_domain(2, 3)
        ['01001', '01003', '01005', '02001', '02003', '02005']
        >>> len(county_domain())
        300
    """
    _, counts = _check_geography("county_domain", n_states, counties_per_state)
    return list(_geography(counts)["counties"])


def naics2_domain() -> list[str]:
    """Return the 19 NAICS sector codes covered by CBP (public administration, 92, is not).

    The ranges 31-33 (manufacturing), 44-45 (retail) and 48-49 (transportation) are stored
    under their first code: ``"31"``, ``"44"``, ``"48"``.

    Returns:
        Sorted 2-digit sector codes.

    Example:
        >>> naics2_domain()[:5]
        ['11', '21', '22', '23', '31']
        >>> len(naics2_domain())
        19
    """
    return list(_industry()["sectors"])


def naics6_domain() -> list[str]:
    """Return the fixed list of 301 six-digit industry codes used by the generator.

    The codes are synthetic but built on the real 3-digit NAICS subsectors (e.g. ``722...`` for
    food services); they do not depend on any parameter.

    Returns:
        Sorted 6-digit codes.

    Example:
        >>> codes = naics6_domain()
        >>> len(codes), codes[0]
        (301, '111111')
    """
    return list(_industry()["codes"])


def size_class_domain() -> list[str]:
    """Return the CBP employment size classes, smallest first.

    Returns:
        ``["0", "1-4", "5-9", ..., "1000+"]``; ``"0"`` is for zero-employment establishments.

    Example:
        >>> size_class_domain()[:3]
        ['0', '1-4', '5-9']
    """
    return list(SIZE_CLASSES)


def public_domains(n_states: int = 10,
                   counties_per_state: int | Sequence[int] = 30) -> dict[str, list[str]]:
    """Return every public key domain, ready for ``tabdp.KeySet.from_dict``.

    Args:
        n_states: Number of states (1..51).
        counties_per_state: Counties in every state (1..499), or one count per state.

    Returns:
        A dict with keys ``state``, ``county``, ``naics2``, ``naics6`` and ``size_class``.

    Raises:
        InvalidParameterError: If the arguments are out of range.

    Example:
        >>> doms = public_domains(3, 4)
        >>> {k: len(v) for k, v in doms.items()}
        {'state': 3, 'county': 12, 'naics2': 19, 'naics6': 301, 'size_class': 10}
    """
    _, counts = _check_geography("public_domains", n_states, counties_per_state)
    geo = _geography(counts)
    return {
        "state": list(geo["states"]),
        "county": list(geo["counties"]),
        "naics2": naics2_domain(),
        "naics6": naics6_domain(),
        "size_class": size_class_domain(),
    }


def naics2_of_prefix(prefix: str) -> str:
    """Map the first two digits of a 6-digit code to its sector code.

    Args:
        prefix: Two digits, e.g. ``"33"``.

    Returns:
        The sector code (``"31"`` for 31-33, ``"44"`` for 44-45, ``"48"`` for 48-49, else the
        prefix itself).

    Raises:
        InvalidParameterError: If ``prefix`` is not a known sector prefix.

    Example:
        >>> naics2_of_prefix("33"), naics2_of_prefix("54")
        ('31', '54')
    """
    sector = _PREFIX_TO_SECTOR.get(prefix, prefix) if isinstance(prefix, str) else None
    if sector not in _SECTORS:
        valid = sorted([*_SECTORS, *_PREFIX_TO_SECTOR])
        raise _fail("naics2_of_prefix", f"prefix must be a 2-digit NAICS sector prefix; got "
                                        f"{prefix!r}.", f"use one of {valid}.")
    return str(sector)


def naics6_to_naics2(*, categorical: bool = False) -> pl.DataFrame:
    """Return the industry hierarchy: one row per 6-digit code with its sector.

    Args:
        categorical: If True, columns are ``pl.Enum`` over the public domains (matching
            ``generate_establishments(categorical=True)``); otherwise ``pl.String``.

    Returns:
        A frame with columns ``naics6`` and ``naics2`` (301 rows).

    Example:
        >>> h = naics6_to_naics2()
        >>> h.shape, h.columns
        ((301, 2), ['naics6', 'naics2'])
        >>> h.filter(h["naics6"].str.starts_with("33"))["naics2"].unique().to_list()
        ['31']
    """
    _check_bool("naics6_to_naics2", "categorical", categorical)
    ind = _industry()
    sectors = ind["sectors"]
    return pl.DataFrame([
        _str_series("naics6", ind["codes"], categorical),
        _str_series("naics2", sectors, categorical).gather(ind["sector_of_code"]),
    ])


def county_to_state(n_states: int = 10, counties_per_state: int | Sequence[int] = 30, *,
                    categorical: bool = False) -> pl.DataFrame:
    """Return the geography hierarchy: one row per county with its state.

    Args:
        n_states: Number of states (1..51).
        counties_per_state: Counties in every state (1..499), or one count per state.
        categorical: If True, columns are ``pl.Enum`` over the public domains (matching
            ``generate_establishments(categorical=True)``); otherwise ``pl.String``.

    Returns:
        A frame with columns ``county`` and ``state``.

    Raises:
        InvalidParameterError: If the arguments are out of range.

    Example:
        >>> county_to_state(2, 2).rows()
        [('01001', '01'), ('01003', '01'), ('02001', '02'), ('02003', '02')]
    """
    _check_bool("county_to_state", "categorical", categorical)
    _, counts = _check_geography("county_to_state", n_states, counties_per_state)
    geo = _geography(counts)
    return pl.DataFrame([
        _str_series("county", geo["counties"], categorical),
        _str_series("state", geo["states"], categorical).gather(geo["state_of_county"]),
    ])


def size_class_of(employment: Any) -> np.ndarray:
    """Map employment counts to CBP size-class labels.

    Args:
        employment: Non-negative integer counts (scalar or array-like).

    Returns:
        A numpy array of labels from [`size_class_domain`][tabdp.datasets.synth.size_class_domain].

    Raises:
        InvalidParameterError: If any count is negative.

    Example:
        >>> size_class_of([0, 4, 5, 999, 1000]).tolist()
        ['0', '1-4', '5-9', '500-999', '1000+']
    """
    emp = np.asarray(employment)
    if emp.size and np.min(emp) < 0:
        raise _fail("size_class_of", f"employment must be >= 0; got min {np.min(emp)!r}.",
                    "pass non-negative employment counts.")
    return np.asarray(SIZE_CLASSES, dtype=object)[_size_class_index(emp)]


def _size_class_index(emp: np.ndarray) -> np.ndarray:
    return np.searchsorted(_SIZE_EDGES, emp, side="right") - 1


# ----------------------------------------------------------------------------- generation


def _draw_index(gen: np.random.Generator, table: tuple[np.ndarray, np.ndarray],
                n: int) -> np.ndarray:
    """Draw ``n`` category indices (int64) from an alias table."""
    prob, alias = table
    k = gen.integers(0, prob.size, n)
    return np.where(gen.random(n) < prob[k], k, alias[k])


def _firm_of_row(gen: np.random.Generator, n: int) -> np.ndarray:
    """Assign ``n`` establishments to firms with heavy-tailed sizes; firm indices from 0."""
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    sizes_parts: list[np.ndarray] = []
    total = 0
    while total < n:
        m = max(16, int((n - total) / 1.2) + 16)
        s = np.ones(m, dtype=np.int64)
        multi = np.flatnonzero(gen.random(m) < _MULTI_UNIT_FIRM_SHARE)
        s[multi] += np.minimum(gen.zipf(_FIRM_ZIPF, multi.size), _MAX_FIRM_SIZE - 1)
        sizes_parts.append(s)
        total += int(s.sum())
    sizes = np.concatenate(sizes_parts)
    n_firms = int(np.searchsorted(np.cumsum(sizes), n)) + 1
    firm = np.repeat(np.arange(n_firms, dtype=np.int64), sizes[:n_firms])[:n]
    return firm[gen.permutation(n)]


class _Params:
    """Validated model parameters shared by the chunks of one call."""

    def __init__(self, zero_share: float, part_year_share: float, tail_alpha: float,
                 max_employment: int, unit_rows: bool, categorical: bool) -> None:
        self.zero_share = zero_share
        self.part_year_share = part_year_share
        self.tail_alpha = tail_alpha
        self.max_employment = max_employment
        self.unit_rows = unit_rows
        self.categorical = categorical


def _employment(gen: np.random.Generator, ind: dict[str, Any], code: np.ndarray,
                prm: _Params) -> np.ndarray:
    """Lognormal body spliced with a truncated Pareto tail; a share of exact zeros."""
    n = code.size
    u = gen.random(n)
    emp = ind["log_emp"][code] + _BODY_SIGMA * gen.standard_normal(n)
    np.exp(emp, out=emp)
    tail = np.flatnonzero(u < ind["tail_prob"][code] * (1.0 - prm.zero_share))
    # Pareto(x_min, alpha) truncated to [x_min, max_employment], by inverse CDF.
    c = 1.0 - (_TAIL_XMIN / prm.max_employment) ** prm.tail_alpha
    emp[tail] = _TAIL_XMIN * (1.0 - gen.random(tail.size) * c) ** (-1.0 / prm.tail_alpha)
    np.rint(emp, out=emp)
    np.clip(emp, 1, prm.max_employment, out=emp)
    emp[u >= 1.0 - prm.zero_share] = 0.0
    return emp.astype(np.int64)


def _chunk(gen: np.random.Generator, firm: np.ndarray, firm_code: np.ndarray,
           ind: dict[str, Any], geo: dict[str, Any], prm: _Params) -> dict[str, np.ndarray]:
    """Draw the establishments owned by ``firm`` (one chunk); return their columns as arrays."""
    n = firm.size
    county = _draw_index(gen, geo["alias"], n)
    code = _draw_index(gen, ind["alias"], n)
    same = gen.random(n) < _SAME_INDUSTRY
    code[same] = firm_code[firm[same]]
    del same

    emp = _employment(gen, ind, code, prm)
    has_emp = emp > 0

    # Activity over the year: a contiguous span of quarters; quarterly weights sum to 1.
    span = np.where(gen.random(n) < prm.part_year_share, gen.integers(1, len(_SPANS), n), 0)
    first_q, last_q = _SPANS[span, 0], _SPANS[span, 1]
    del span
    quarters = np.arange(1, 5, dtype=np.int64)[:, None]
    active = (quarters >= first_q) & (quarters <= last_q)  # (4, n)
    qw = gen.standard_normal((4, n))
    qw *= _QUARTER_SIGMA
    np.exp(qw, out=qw)
    qw *= active
    qw /= qw.sum(axis=0)
    year_frac = active.sum(axis=0) / 4.0

    # Money, in whole dollars; annual values are exact sums of the quarterly ones.
    wage = ind["log_wage"][code] + geo["log_wage"][county]
    wage += _WAGE_SIGMA * gen.standard_normal(n)
    np.exp(wage, out=wage)
    annual_pay = emp * wage * year_frac
    del wage
    rev_noise = np.exp(_REVENUE_SIGMA * gen.standard_normal(n))
    annual_rev = np.where(has_emp,
                          annual_pay * np.exp(ind["log_rev_ratio"][code]) * rev_noise,
                          _ZERO_EMP_REVENUE * rev_noise ** 2 * year_frac)
    del rev_noise, year_frac
    q_pay = np.rint(qw * annual_pay)
    np.maximum(q_pay, active & has_emp, out=q_pay)  # an employer's active quarter pays >= $1
    q_rev = np.rint(qw * annual_rev)
    del annual_pay, annual_rev, qw

    out = {
        "county": county.astype(np.int32),
        "code": code.astype(np.int32),
        "employment": emp,
        "payroll_q1": q_pay[0].copy(),
        "payroll": q_pay.sum(axis=0),
        "revenue": q_rev.sum(axis=0),
    }
    if not prm.unit_rows:
        return out

    # Establishment-quarter rows. Drawn last, so the establishments match unit_rows=False.
    q_emp = emp * np.exp(_QUARTER_EMP_SIGMA * gen.standard_normal((4, n)))
    np.rint(q_emp, out=q_emp)
    np.maximum(q_emp, has_emp, out=q_emp)
    q_emp *= has_emp
    q_emp[first_q - 1, np.arange(n)] = emp  # the first active quarter keeps `employment`
    flat = active.T.ravel()  # establishment-major, quarter-minor
    out["q_row"] = np.repeat(np.arange(n, dtype=np.int64), 4)[flat]
    out["q_quarter"] = np.tile(np.arange(1, 5, dtype=np.int8), n)[flat]
    out["q_employment"] = q_emp.T.ravel()[flat].astype(np.int64)
    out["q_payroll"] = q_pay.T.ravel()[flat]
    out["q_revenue"] = q_rev.T.ravel()[flat]
    return out


def generate_establishments(
    n_rows: int,
    *,
    seed: int | None = None,
    n_states: int = 10,
    counties_per_state: int | Sequence[int] = 30,
    unit_rows: bool = False,
    zero_share: float = 0.03,
    part_year_share: float = 0.10,
    tail_alpha: float = 1.1,
    max_employment: int = 250_000,
    categorical: bool = False,
) -> pl.DataFrame:
    """Generate synthetic CBP-like establishment microdata.

    One row per establishment (or, with ``unit_rows=True``, one row per active
    establishment-quarter). Columns (``categorical=False``):

    * ``estab_id`` (Int64): unique establishment id, ``1..n_rows``.
    * ``firm_id`` (Int64): owning firm; heavy-tailed number of establishments per firm.
    * ``state`` (String): 2-digit FIPS code; ``county`` (String): 5-digit FIPS code whose first
      two digits are ``state``.
    * ``naics2`` (String): sector code (31-33 as ``"31"``, 44-45 as ``"44"``, 48-49 as ``"48"``);
      ``naics6`` (String): 6-digit code of that sector (see
      [`naics6_to_naics2`][tabdp.datasets.synth.naics6_to_naics2]).
    * ``size_class`` (String): CBP size class of ``employment``
      ([`size_class_domain`][tabdp.datasets.synth.size_class_domain]).
    * ``employment`` (Int64 >= 0): reference employment (mid-March; for establishments opening
      after the first quarter, their first active quarter). Median about 5, max 10^4-10^5+.
    * ``payroll_q1`` (Float64): first-quarter payroll in whole dollars (0 if inactive in Q1).
    * ``payroll`` (Float64): annual payroll, exactly the sum of the quarterly payrolls.
    * ``revenue`` (Float64): annual revenue (receipts) in whole dollars.

    With ``unit_rows=True`` each establishment has one row per active quarter (1 to 4; about 90%
    are active all year): ``payroll_q1`` is dropped, a ``quarter`` column (Int8, 1..4) follows
    ``firm_id``, and ``employment``, ``payroll`` and ``revenue`` hold the *quarter's* values.
    Quarterly payroll and revenue add up exactly to the annual values of the one-row-per-
    establishment frame, and the first active quarter's employment equals its ``employment``;
    the establishments are identical to those of ``unit_rows=False`` with the same seed.

    Rows are generated in chunks of 1,000,000 establishments, each from its own child of
    ``numpy.random.SeedSequence(seed)``, so memory stays bounded and output depends only on
    the arguments.

    Args:
        n_rows: Number of establishments (privacy units) to generate, >= 0. With
            ``unit_rows=True`` the frame has between ``n_rows`` and ``4 * n_rows`` rows.
        seed: Non-negative int for reproducible output, or None for fresh OS entropy.
        n_states: Number of states, 1..51 (the first ``n_states`` of
            [`STATE_FIPS`][tabdp.datasets.synth.STATE_FIPS]).
        counties_per_state: Counties per state, 1..499, as one int or one int per state.
        unit_rows: If True, return establishment-quarter rows (see above).
        zero_share: Share of establishments with zero employment and zero payroll, in [0, 1).
        part_year_share: Share of establishments active only part of the year, in [0, 1].
        tail_alpha: Pareto tail index of employment, in [0.5, 5]; smaller is heavier.
        max_employment: Largest possible employment (truncation of the Pareto tail), >= 100.
        categorical: If True, the text columns are ``pl.Enum`` whose categories are the public
            domains (compact, fast to group); if False (default) they are ``pl.String``.

    Returns:
        A Polars DataFrame with columns
        [`ESTABLISHMENT_COLUMNS`][tabdp.datasets.synth.ESTABLISHMENT_COLUMNS] (or
        [`QUARTER_COLUMNS`][tabdp.datasets.synth.QUARTER_COLUMNS] with ``unit_rows=True``), sorted
        by ``estab_id`` (then ``quarter``). Call ``.to_pandas()`` for pandas.

    Raises:
        InvalidParameterError: If an argument has the wrong type or is out of range.

    Example:
        >>> df = generate_establishments(1_000, seed=7)
        >>> df.columns == list(ESTABLISHMENT_COLUMNS), df.height
        (True, 1000)
        >>> bool((df["county"].str.slice(0, 2) == df["state"]).all())
        True
        >>> q = generate_establishments(1_000, seed=7, unit_rows=True)
        >>> q["estab_id"].n_unique(), q.height > 3_000
        (1000, True)
        >>> annual = q.group_by("estab_id").agg(pl.col("payroll").sum()).sort("estab_id")
        >>> annual["payroll"].equals(df["payroll"])
        True
    """
    owner = "generate_establishments"
    n = _check_int(owner, "n_rows", n_rows, ge=0,
                   hint="pass the number of establishments to generate, e.g. n_rows=100_000.")
    seed_v = _check_seed(owner, seed)
    _, counts = _check_geography(owner, n_states, counties_per_state)
    prm = _Params(
        zero_share=_check_float(owner, "zero_share", zero_share, lo=0.0, hi=1.0, hi_open=True,
                                hint="use a small share such as 0.03 (3% zero-employment)."),
        part_year_share=_check_float(owner, "part_year_share", part_year_share, lo=0.0,
                                     hi=1.0, hint="use a share such as 0.10; 0 makes every "
                                                  "establishment active in all four quarters."),
        tail_alpha=_check_float(owner, "tail_alpha", tail_alpha, lo=0.5, hi=5.0,
                                hint="use about 1.1 (CBP-like); larger values thin the tail."),
        max_employment=_check_int(owner, "max_employment", max_employment, ge=100,
                                  hint="use e.g. 250_000; it caps the Pareto tail."),
        unit_rows=_check_bool(owner, "unit_rows", unit_rows),
        categorical=_check_bool(owner, "categorical", categorical),
    )
    ind = _industry()
    geo = _geography(counts)
    n_chunks = max(1, -(-n // _CHUNK_ROWS))
    firm_seq, *chunk_seqs = np.random.SeedSequence(seed_v).spawn(1 + n_chunks)
    firm_gen = np.random.default_rng(firm_seq)
    firm = _firm_of_row(firm_gen, n)
    firm_code = _draw_index(firm_gen, ind["alias"], int(firm.max()) + 1 if n else 0)

    # Establishment-level columns are written into preallocated arrays (wrapped by Polars
    # without a copy); quarter-level pieces are collected per chunk.
    cols: dict[str, np.ndarray] = {
        "county": np.empty(n, np.int32), "code": np.empty(n, np.int32),
        "employment": np.empty(n, np.int64), "payroll_q1": np.empty(n, np.float64),
        "payroll": np.empty(n, np.float64), "revenue": np.empty(n, np.float64),
    }
    pieces: dict[str, list[np.ndarray]] = {}
    for i, seq in enumerate(chunk_seqs):
        lo, hi = i * _CHUNK_ROWS, min(n, (i + 1) * _CHUNK_ROWS)
        part = _chunk(np.random.default_rng(seq), firm[lo:hi], firm_code, ind, geo, prm)
        for name, arr in part.items():
            if name.startswith("q_"):
                pieces.setdefault(name, []).append(arr + lo if name == "q_row" else arr)
            else:
                cols[name][lo:hi] = arr
        del part
    del firm_code
    firm += 1
    county, code, emp = cols["county"], cols["code"], cols["employment"]
    size = _size_class_index(emp).astype(np.int8)
    state = geo["state_of_county"][county].astype(np.int8)
    sector = ind["sector_of_code"][code].astype(np.int8)

    def text(name: str, values: Sequence[str], idx: np.ndarray) -> pl.Series:
        return _str_series(name, values, prm.categorical).gather(idx)

    if not prm.unit_rows:
        return pl.DataFrame([
            pl.Series("estab_id", np.arange(1, n + 1, dtype=np.int64)),
            pl.Series("firm_id", firm),
            text("state", geo["states"], state),
            text("county", geo["counties"], county),
            text("naics2", ind["sectors"], sector),
            text("naics6", ind["codes"], code),
            text("size_class", SIZE_CLASSES, size),
            pl.Series("employment", emp),
            pl.Series("payroll_q1", cols["payroll_q1"]),
            pl.Series("payroll", cols["payroll"]),
            pl.Series("revenue", cols["revenue"]),
        ])
    del cols
    q = {name: np.concatenate(parts) for name, parts in pieces.items()}
    del pieces
    row = q.pop("q_row")
    return pl.DataFrame([
        pl.Series("estab_id", row + 1),
        pl.Series("firm_id", firm[row]),
        pl.Series("quarter", q.pop("q_quarter")),
        text("state", geo["states"], state[row]),
        text("county", geo["counties"], county[row]),
        text("naics2", ind["sectors"], sector[row]),
        text("naics6", ind["codes"], code[row]),
        text("size_class", SIZE_CLASSES, size[row]),
        pl.Series("employment", q.pop("q_employment")),
        pl.Series("payroll", q.pop("q_payroll")),
        pl.Series("revenue", q.pop("q_revenue")),
    ])


def generate_establishment_quarters(n_establishments: int, *, seed: int | None = None,
                                    **kwargs: Any) -> pl.DataFrame:
    """Generate establishment-quarter rows: ``generate_establishments(..., unit_rows=True)``.

    Each establishment (the privacy unit, ``estab_id``) has one row per active quarter, 1 to 4.

    Args:
        n_establishments: Number of establishments, >= 0.
        seed: Non-negative int for reproducible output, or None.
        **kwargs: Any other keyword argument of
            [`generate_establishments`][tabdp.datasets.synth.generate_establishments] except
            ``unit_rows``.

    Returns:
        A Polars DataFrame with columns [`QUARTER_COLUMNS`][tabdp.datasets.synth.QUARTER_COLUMNS].

    Raises:
        InvalidParameterError: If an argument is invalid (including ``unit_rows``).

    Example:
        >>> q = generate_establishment_quarters(500, seed=3)
        >>> q.columns == list(QUARTER_COLUMNS)
        True
        >>> rows_per_unit = q.group_by("estab_id").len()["len"]
        >>> int(rows_per_unit.min()) >= 1, int(rows_per_unit.max())
        (True, 4)
    """
    if "unit_rows" in kwargs:
        raise _fail("generate_establishment_quarters", f"unit_rows cannot be passed; got "
                                                       f"unit_rows={kwargs['unit_rows']!r}.",
                    "call generate_establishments(..., unit_rows=False) for one row per "
                    "establishment.")
    return generate_establishments(n_establishments, seed=seed, unit_rows=True, **kwargs)
