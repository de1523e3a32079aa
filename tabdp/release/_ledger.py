"""The release workflow's lifetime ledger (``[ledger]``).

Opened before any data is read; committed once every output is written, before the outputs
are moved into place (a crash between leaves the ledger charged for a release not published,
never the reverse).

Example:
    >>> from tabdp.release._ledger import open_ledger
    >>> open_ledger(None) is None
    True
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any

from tabdp.exceptions import InvalidParameterError, LedgerError
from tabdp.release.curator_config import dataset_ledger_error, dataset_ledger_warnings

__all__ = ["open_ledger", "commit_release"]


def open_ledger(spec: Any) -> Any:
    """The spec's lifetime ledger, locked and verified (``None`` without ``[ledger]``).

    Args:
        spec: The release spec (``None`` or a spec without ``[ledger]``: no ledger). Every
            engine uses the same ledger (Spark joins its totals to the units in Spark and
            charges it on the driver).

    Returns:
        The open [`tabdp.Ledger`][tabdp.Ledger] (``autocommit=False``), or ``None``.

    Raises:
        LedgerError: In use by another run, does not verify, another series or budget.

    Example:
        >>> open_ledger(None) is None
        True
    """
    led = getattr(spec, "ledger", None)
    if led is None:
        return None
    from tabdp.privacy.lifetime import Ledger

    out = spec.output
    dataset = getattr(led, "dataset", None)
    try:
        # an author's run: the ledger's warnings name the dataset, never the ledger's path
        with (contextlib.nullcontext() if dataset is None else
              dataset_ledger_warnings(dataset)):
            ledger = Ledger.open(led.path, series=led.series,
                                 lifetime_budget=led.lifetime_budget, autocommit=False,
                                 public=(out.public, out.confidential, out.plan))
    except (LedgerError, InvalidParameterError) as err:
        if dataset is None:
            raise
        raise dataset_ledger_error(dataset, err) from None
    # the workflow closes without committing only when nothing was published (a failed run)
    ledger.allow_discard()
    return ledger


def commit_release(session: Any, spec: Any, public: Path, confidential: Path,
                   public_curve: dict[str, Any] | None = None) -> dict[str, Any]:
    """Commit the run's losses (after every output is written to the staging folders).

    The chain entry holds the spec's hash and the SHA-256 of the public ``manifest.json``;
    the confidential folder gets ``ledger.json`` (the entry's number and hash: keep the chain
    head outside the ledger).

    Args:
        session: The run's session (its ledger open, ``autocommit=False``).
        spec: The release spec.
        public: The public (staging) folder, holding ``manifest.json``.
        confidential: The confidential (staging) folder.
        public_curve: The release's public curves (the plan's, `lifetime_curve`), recorded in
            the entry with the release's name; ``None``: the session's releases'.

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
                                                  label=spec.release.name,
                                                  release=spec.release.name,
                                                  public_curve=public_curve)
    note = {"ledger": str(session.lifetime.path), "series": entry["series"],
            "release": entry["seq"], "entry_hash": entry["hash"], "prev": entry["prev"],
            "manifest_sha256": manifest,
            "note": "CONFIDENTIAL. Keep the entry hash (the chain head) outside the ledger: "
                    "`tabdp ledger show` must end with it."}
    (confidential / "ledger.json").write_text(json.dumps(note, indent=2), encoding="utf-8")
    return entry
