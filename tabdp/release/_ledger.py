"""The release workflow's lifetime ledger (``[ledger]``).

Opened before any data is read; committed once every output is written and every check of the
move into place has passed (the output folders free, old ones moved aside), just before the
renames (a crash between leaves the ledger charged for a release not published, never the
reverse; a failure there is reported in the confidential ``failure.json``,
`committed_since`). Opening warns the curator when the last release of the chain has this
run's name and spec hash (a probable rerun, charged again). ``tabdp compare`` opens it
read-only (`open_ledger` with ``read_only=True``): its DP side is filtered by the ledger as the
real run would be, and charges nothing.

Example:
    >>> from tabdp.release._ledger import open_ledger
    >>> open_ledger(None) is None
    True
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any

from tabdp._durable import fsync_dir, write_synced
from tabdp.exceptions import InvalidParameterError, LedgerError
from tabdp.release.curator_config import dataset_ledger_error, dataset_ledger_warnings

__all__ = ["open_ledger", "commit_release", "committed_since", "charged_failure", "RERUN_TEXT",
           "READ_ONLY_RERUN_TEXT"]

#: The start of the curator's warning of a probable rerun (`open_ledger`).
RERUN_TEXT = "this run looks like a rerun of the series' last release"
#: The start of the curator's note when a read-only run (``tabdp compare``) follows the release.
READ_ONLY_RERUN_TEXT = "the lifetime ledger already holds this release"


def open_ledger(spec: Any, read_only: bool = False,
                notices: list[tuple[type[Warning], str]] | None = None) -> Any:
    """The spec's lifetime ledger, locked and verified (``None`` without ``[ledger]``).

    Args:
        spec: The release spec (``None`` or a spec without ``[ledger]``: no ledger). Every
            engine uses the same ledger (Spark joins its totals to the units in Spark and
            charges it on the driver).
        read_only: Open it read-only (``tabdp compare``'s DP side): verified and locked as
            for a run, it filters units the same way, but is never committed and nothing in
            or next to it is written (`tabdp.Ledger.open`'s ``read_only``).
        notices: Given (``tabdp run``): an author-mode run's notices to its author (a
            dataset ledger's anchor notices, naming the dataset only) are appended here as
            ``(category, text)`` instead of warned, also when the ledger is then refused.

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
    notes: list[str] = []
    try:
        # an author's run: the ledger's anchor notices (its own, `open_warnings`, also those
        # of an open that fails after writing the anchor: `_notes`) are passed on naming the
        # dataset, never the ledger's path
        ledger = Ledger.open(led.path, series=led.series,
                             lifetime_budget=led.lifetime_budget, autocommit=False,
                             public=(out.public, out.confidential, out.plan),
                             read_only=read_only, _quiet=dataset is not None, _notes=notes)
    except (LedgerError, InvalidParameterError) as err:
        if dataset is None:  # the curator's: the notices were warned as they came
            raise
        refusal = dataset_ledger_error(dataset, err)
        dataset_ledger_warnings(dataset, notes, into=notices)
        raise refusal from None
    if dataset is not None:
        dataset_ledger_warnings(dataset, notes, into=notices)
    # the workflow closes without committing only when nothing was published (a failed run)
    ledger.allow_discard()
    if spec.input.mode == "curator":
        _warn_rerun(ledger, spec)
    return ledger


def _warn_rerun(ledger: Any, spec: Any) -> None:
    """Warn the curator when the chain's last release has this run's name and spec hash.

    A probable rerun (of a run that failed or was killed after its commit, or of a published
    release): it is charged again, as a release of its own. Curator mode only: the chain's
    contents are the curator's.
    """
    last = ledger.entries[-1]
    if (last.get("kind") != "release" or last.get("spec_hash") != spec.sha256
            or last.get("release") != spec.release.name):
        return
    from tabdp.exceptions import PrivacyWarning, TabdpWarning

    if getattr(ledger, "read_only", False):  # tabdp compare after the release: no charge
        warnings.warn(
            f"{READ_ONLY_RERUN_TEXT}: release {last['seq']} of series {ledger.series!r} in the "
            f"lifetime ledger {ledger.path} is {spec.release.name!r}, committed "
            f"{last.get('created')} with this spec's hash. The comparison reads the ledger "
            "as it is (it charges nothing), so its DP side counts that release's losses as "
            "past losses: it leaves out the units a rerun would, which may be more than that "
            "release left out. CONFIDENTIAL (the curator's).\nHint: to compare what that "
            "release published, run the comparison before its tabdp run.", TabdpWarning,
            stacklevel=3)
        return
    warnings.warn(
        f"{RERUN_TEXT}: release {last['seq']} of series {ledger.series!r} in the lifetime "
        f"ledger {ledger.path} is {spec.release.name!r}, committed {last.get('created')} with "
        "this spec's hash. If this run goes through it is charged again, as a release of its "
        "own: every unit it admits is charged its losses a second time against the series' "
        "lifetime budget (an over-charge: safe, but spent). CONFIDENTIAL (the curator's): do "
        "not publish.\nHint: if that release was published, do not rerun it (a new release "
        "gets a new release.name). If its run failed after the commit (its confidential "
        "failure.json says the ledger was committed) or was killed before its outputs were "
        "moved into place, it was charged but never published: rerunning is safe and spends "
        "its losses again; to avoid that, put back a copy of the ledger folder taken before "
        "that run and accept it (tabdp ledger accept-restore PATH), only if that release was "
        "never published.", PrivacyWarning, stacklevel=3)


def chain_entry(ledger: Any, seq: int) -> Path:
    """The file of the ledger's chain entry ``seq`` (written by the commit of release ``seq``).

    Example:
        >>> import types
        >>> chain_entry(types.SimpleNamespace(path="/l"), 2).as_posix()
        '/l/chain/00000002.json'
    """
    return Path(ledger.path) / "chain" / f"{seq:08d}.json"


def committed_since(ledger: Any, releases: int,
                    spec_hash: str | None = None) -> dict[str, Any] | None:
    """The chain entry this run committed since the ledger held ``releases`` releases.

    Read from the ledger's chain folder too: a commit whose entry is on disk counts even if
    the commit failed after its commit point (before the ledger recorded it in memory); such
    an entry counts only if it holds ``spec_hash`` (given), not another writer's.

    Args:
        ledger: The run's open ledger.
        releases: Its number of releases at open.
        spec_hash: The run's spec hash (``None``: not checked).

    Returns:
        The entry of release ``releases + 1``, or ``None`` if it was not committed.

    Example:
        >>> import tempfile, pathlib, tabdp
        >>> led = tabdp.Ledger.create(pathlib.Path(tempfile.mkdtemp()) / "l", series="s",
        ...                           lifetime_budget=1.0)
        >>> committed_since(led, 0) is None
        True
    """
    if len(ledger.entries) - 1 > releases:
        entry: dict[str, Any] = ledger.entries[releases + 1]
        return entry
    path = chain_entry(ledger, releases + 1)
    try:
        found: dict[str, Any] = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if spec_hash is not None and found.get("spec_hash") != spec_hash:
        return None
    return found


def commit_release(session: Any, spec: Any, public: Path, confidential: Path,
                   public_curve: dict[str, Any] | None = None) -> dict[str, Any]:
    """Commit the run's losses (after every output is written to the staging folders).

    The chain entry holds the spec's hash and the SHA-256 of the public ``manifest.json``;
    the confidential folder gets ``ledger.json`` (the entry's number and hash: keep the chain
    head outside the ledger), fsynced with its folder's entry.

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
        >>> from tabdp.privacy.lifetime import release_curve
        >>> commit_release(s, spec, d, d, release_curve([{"delta": 1.0, "rho": 0.5}]))["label"]
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
    target = confidential / "ledger.json"
    # the owner's only, like every confidential file; on disk (with its folder's entry) before
    # the renames into place, like the files synced before the commit (`_Staging`)
    write_synced(target, json.dumps(note, indent=2))
    os.chmod(target, 0o600)
    fsync_dir(confidential, strict=False)
    return entry


def charged_failure(details: dict[str, Any], ledger: Any, releases: int,
                    spec_hash: str | None = None) -> dict[str, Any] | None:
    """A run that failed after its ledger commit: say so in its ``failure.json`` details.

    The commit comes only once every check of the move into place has passed, so what fails
    after it is a rename (or writing ``ledger.json``): the ledger was charged for a release
    that was not published. The charge stands (an over-charge, which is safe); a rerun is
    charged again. CONFIDENTIAL: the curator's (``failure.json``).

    Args:
        details: The failure's details (``failure.json``): given a ``ledger`` entry and a
            sentence added to ``message`` when the ledger was charged.
        ledger: The run's open ledger.
        releases: Its number of releases at open.
        spec_hash: The run's spec hash (`committed_since`).

    Returns:
        The ``ledger`` entry added, or ``None`` (not charged: ``details`` unchanged).

    Example:
        >>> import tempfile, pathlib, tabdp
        >>> led = tabdp.Ledger.create(pathlib.Path(tempfile.mkdtemp()) / "l", series="s",
        ...                           lifetime_budget=1.0)
        >>> d = {"message": "boom"}
        >>> charged_failure(d, led, 0) is None, d
        (True, {'message': 'boom'})
    """
    entry = committed_since(ledger, releases, spec_hash)
    if entry is None:
        return None
    seq, series, head = entry.get("seq"), entry.get("series"), entry.get("hash")
    note: dict[str, Any] = {
        "committed": True, "ledger": str(ledger.path), "series": series, "release": seq,
        "entry_hash": head, "prev": entry.get("prev"),
        "note": (f"CONFIDENTIAL. The run failed AFTER its losses were committed to the "
                 f"lifetime ledger: the ledger was charged for this run as release {seq} of "
                 f"series {series!r} (chain head {head}), although nothing public was "
                 "written. The charge stands: an over-charge, which is safe. Keep this chain "
                 "head outside the ledger (`tabdp ledger show` ends with it). A rerun of this "
                 "release is charged again; to avoid that, put back a copy of the ledger "
                 "folder taken before this run and accept it (tabdp ledger accept-restore "
                 "PATH): this release was never published.")}
    details["ledger"] = note
    details["message"] = (f"{details.get('message', '')}\n(Nothing public was written, but "
                          "the lifetime ledger WAS charged for this run: see 'ledger'.)")
    return note
