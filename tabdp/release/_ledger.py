"""The release workflow's lifetime ledger (``[ledger]``).

Opened before any data is read; committed once every output is written, before the outputs
are moved into place (a crash between leaves the ledger charged for a release not published,
never the reverse).

Example:
    >>> from tabdp.release._ledger import open_ledger
    >>> open_ledger(None, "polars") is None
    True
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from tabdp.exceptions import SpecError
from tabdp.planning import upper_3g

__all__ = ["open_ledger", "commit_release", "public_lifetime", "lifetime_in_words"]


def open_ledger(spec: Any, engine: str) -> Any:
    """The spec's lifetime ledger, locked and verified (``None`` without ``[ledger]``).

    Args:
        spec: The release spec (``None`` or a spec without ``[ledger]``: no ledger).
        engine: ``"polars"`` or ``"spark"``.

    Returns:
        The open [`tabdp.Ledger`][tabdp.Ledger] (``autocommit=False``), or ``None``.

    Raises:
        SpecError: ``[ledger]`` with the Spark engine (not supported yet).
        LedgerError: In use by another run, does not verify, another series or budget.

    Example:
        >>> open_ledger(None, "spark") is None
        True
    """
    led = getattr(spec, "ledger", None)
    if led is None:
        return None
    if engine == "spark":
        raise SpecError(
            "ledger", "a lifetime ledger is not supported with the Spark engine yet (its "
            "releases would not see the series' past losses). Nothing was read or written."
            "\nHint: run with --engine polars (the default), or remove [ledger].")
    from tabdp.privacy.lifetime import Ledger

    out = spec.output
    ledger = Ledger.open(led.path, series=led.series, lifetime_budget=led.lifetime_budget,
                         autocommit=False, public=(out.public, out.confidential, out.plan))
    # the workflow closes without committing only when nothing was published (a failed run)
    ledger._discard_ok = True
    return ledger


def public_lifetime(spec: Any, total_curve: list[dict[str, Any]] | None = None,
                    unit: str = "unit") -> dict[str, Any]:
    """PUBLIC: the series, its lifetime budget and the lifetime guarantee in words.

    Computed from the spec alone (``[ledger]``'s series and lifetime budget, the release's
    public policy curves), never from the ledger's contents: ``tabdp validate`` and
    ``tabdp plan`` state it before any run, and a release's ``summary.json`` /
    ``summary.html`` state the same words whatever the records and the ledger hold.

    Args:
        spec: The release spec (with ``[ledger]``).
        total_curve: The release's total policy curve (rows ``{"delta": size, "rho": ...}``:
            a unit's worst-case ρ in one release like this one); ``None``: computed.
        unit: What a unit is called.

    Returns:
        ``{"series", "lifetime_budget", "guarantee_in_words", "enforcement"}``.

    Example:
        >>> import types
        >>> spec = types.SimpleNamespace(
        ...     ledger=types.SimpleNamespace(series="cbp", lifetime_budget=2.0),
        ...     release=types.SimpleNamespace(name="cbp_2026", delta=None))
        >>> pub = public_lifetime(spec, [{"delta": 1e3, "rho": 0.5}], "establishment")
        >>> pub["series"], pub["guarantee_in_words"][1][-60:]
        ('cbp', 'leaves it out of the tables that would take it past rho = 2.')
    """
    from tabdp.privacy.budget import Budget

    led = spec.ledger
    budget = Budget.coerce(led.lifetime_budget)
    assert budget is not None
    if total_curve is None:
        from tabdp.release._plan import plan_summary

        total_curve = plan_summary(spec)["total_policy_curve"]
    return {"series": led.series, "lifetime_budget": budget.to_dict(),
            "guarantee_in_words": lifetime_in_words(spec, total_curve, unit),
            "enforcement": "individual filter over the series' releases"}


def lifetime_in_words(spec: Any, total_curve: list[dict[str, Any]],
                      unit: str = "unit") -> list[str]:
    """PUBLIC: the lifetime guarantee of the spec's release series, in sentences.

    From the lifetime budget and the release's total policy curve only (bounds rounded up;
    release counts rounded down).

    Args:
        spec: The release spec (with ``[ledger]``).
        total_curve: The release's total policy curve (``{"delta": size, "rho": ...}`` rows).
        unit: What a unit is called.

    Returns:
        The sentences: the bound over the series, then, at a few record sizes, how many
        releases like this one a unit is charged in full before the filter leaves it out.

    Example:
        >>> import types
        >>> spec = types.SimpleNamespace(
        ...     ledger=types.SimpleNamespace(series="cbp", lifetime_budget=2.0),
        ...     release=types.SimpleNamespace(name="cbp_2026", delta=None))
        >>> w = lifetime_in_words(spec, [{"delta": 1e3, "rho": 0.5}], "establishment")
        >>> w[0]
        "Over the releases of the series 'cbp' (this one, 'cbp_2026', included), every \
establishment loses at most rho = 2 in all (zCDP): the series' lifetime budget."
        >>> w[1][:78]
        'an establishment of size 1,000 (at most rho = 0.5 in one release like this one'
    """
    from tabdp.privacy.budget import Budget
    from tabdp.release._plan import _eps_words, _few, _size_text

    led = spec.ledger
    b = Budget.coerce(led.lifetime_budget)
    assert b is not None
    delta = spec.release.delta
    a = "an" if unit[:1].lower() in "aeio" else "a"  # "a unit", "an establishment"
    head = (f"Over the releases of the series {led.series!r} (this one, "
            f"{spec.release.name!r}, included), ")
    rows = [r for r in total_curve if r.get("rho") is not None]
    sizes = _few([float(r["delta"]) for r in rows])
    lines = []
    if b.constant is not None:
        lines.append(f"{head}every {unit} {_eps_words(float(b.constant), None, delta)} in all "
                     "(zCDP): the series' lifetime budget.")
    else:
        lines.append(f"{head}{a} {unit} of a given size loses at most the lifetime budget "
                     "curve at that size (zCDP):")
    for r in rows:
        s, rho = float(r["delta"]), float(r["rho"])
        if s not in sizes:
            continue
        cap = float(b.constant) if b.constant is not None else float(b.limit([s])[0])
        if not (math.isfinite(rho) and rho > 0):
            continue
        # releases charged in full: k·rho <= cap (rounded down, with room for rounding)
        k = math.floor(cap / rho * (1 - 1e-12))
        what = (f"{a} {unit} of size {_size_text(s)} (at most rho = {upper_3g(rho)} in one "
                "release like this one, contributing that size to a cell of every table)")
        over = "" if b.constant is not None else (
            f" loses at most rho = {upper_3g(cap)} over the series, and")
        if k >= 1:
            lines.append(f"{what}{over} is charged in full in at least {k} release(s) like "
                         "this one; after that, the filter leaves it out of the tables that "
                         f"would take it past rho = {upper_3g(cap)}.")
        else:
            lines.append(f"{what}{over} would pass its lifetime budget in one such release: "
                         "the filter leaves it out of the tables that would take it past "
                         f"rho = {upper_3g(cap)}.")
    if b.total is not None:
        lines.append(f"and every {unit} loses at most rho = {upper_3g(b.total)} in all.")
    lines.append(f"An individual filter (Feldman and Zrnic, arXiv:2008.11193) enforces it: a "
                 f"{unit} is left out of any table that would take its loss over the series "
                 "past its lifetime budget, however many releases it is in. Stated from the "
                 "public budget and curves alone.")
    return lines


def commit_release(session: Any, spec: Any, public: Path, confidential: Path) -> dict[str, Any]:
    """Commit the run's losses (after every output is written to the staging folders).

    The chain entry holds the spec's hash and the SHA-256 of the public ``manifest.json``;
    the confidential folder gets ``ledger.json`` (the entry's number and hash: keep the chain
    head outside the ledger).

    Args:
        session: The run's session (its ledger open, ``autocommit=False``).
        spec: The release spec.
        public: The public (staging) folder, holding ``manifest.json``.
        confidential: The confidential (staging) folder.

    Returns:
        The chain entry.

    Example:
        >>> import tempfile, pathlib, tabdp, types
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "manifest.json").write_text("{}")
        >>> led = tabdp.Ledger.create(d / "l", series="s", lifetime_budget=2.0, autocommit=False)
        >>> s = tabdp.Session(unit="id", ledger=led)
        >>> spec = types.SimpleNamespace(sha256="0" * 64,
        ...                              release=types.SimpleNamespace(name="r2026"))
        >>> commit_release(s, spec, d, d)["label"]
        'r2026'
    """
    manifest = hashlib.sha256((public / "manifest.json").read_bytes()).hexdigest()
    entry: dict[str, Any] = session.commit_ledger(spec_hash=spec.sha256, manifest_hash=manifest,
                                                  label=spec.release.name)
    note = {"ledger": str(session.lifetime.path), "series": entry["series"],
            "release": entry["seq"], "entry_hash": entry["hash"], "prev": entry["prev"],
            "manifest_sha256": manifest,
            "note": "CONFIDENTIAL. Keep the entry hash (the chain head) outside the ledger: "
                    "`tabdp ledger show` must end with it."}
    (confidential / "ledger.json").write_text(json.dumps(note, indent=2), encoding="utf-8")
    return entry
