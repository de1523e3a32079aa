"""Writing a run's folders atomically, and what a failed run leaves behind.

Outputs are built in staging folders next to their targets and renamed into place at the end
(`clean_stale_staging` removes those of a killed run, or puts them in place when that run had
committed, and then tells the curator: `RolledForwardWarning`, `ROLLED_FORWARD_LOG`); after a
failure, only ``failure.json`` in the confidential folder (`DataDependentFailure`). Output
folders that are symbolic links are refused (`_check_target`). A run with a lifetime
ledger commits it after every check of the swap and before the renames (`_Staging.commit`).
A run replaces only its own files (`RUN_FILES`) in the confidential folder: a comparison
(``tabdp compare``'s ``compare/``) and anything else there is carried over into the new
folder, never deleted (review r51); tabdp's own temporary files there are not (`_run_scratch`),
and an author-mode refusal names nothing in that folder (review r52).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tabdp._durable import fsync_dir, sync_tree, write_synced
from tabdp.exceptions import (
    DataValidationError,
    InvalidParameterError,
    RolledForwardWarning,
)
from tabdp.release.spec import ReleaseSpec, spec_keys_hint

# -- atomic output folders -------------------------------------------------------------------

#: The only file of a confidential folder written by a failed run (see :func:`run_release`).
FAILURE_FILE = "failure.json"
#: Marker file of the public folder of a run marked not for publication (a seeded test run,
#: ``tabdp compare``'s DP side): its text is `tabdp.release._plan.not_for_publication_text`.
NOT_FOR_PUBLICATION = "NOT_FOR_PUBLICATION.txt"


#: What a failed run may leave in its confidential folder besides `FAILURE_FILE`: the native
#: error stream of an author's run (``tabdp.cli``) and Spark's log.
FAILURE_LOGS = frozenset({"stderr.log", "spark.log"})


#: The confidential files of a release (`tabdp.release._tables`; ``ledger.json`` with a
#: lifetime ledger).
RELEASE_FILES = frozenset({"per_record_losses.parquet", "worst_cells.parquet",
                           "confidential.json", "confidential_report.html", "ledger.json"})
#: Every file a run writes into its confidential folder: the only entries a later run replaces
#: or removes there. Everything else (a comparison's ``compare/``, the curator's own files) is
#: carried over into the new folder (`_kept_entries`; review r51: ``run --overwrite`` deleted
#: a comparison without a word).
RUN_FILES = RELEASE_FILES | {FAILURE_FILE} | FAILURE_LOGS


#: Written into a confidential target's staging folder, before anything is carried over into
#: it, with the names of what is (`_Staging`): after a killed run, `clean_stale_staging` gives
#: back only those and deletes the rest of the folder (the run's own files and scratch). Removed
#: once the new folder is in place; tabdp's own name, never a user's (`_run_scratch`).
CARRIED_MANIFEST = ".tabdp-carried.json"

#: The curator's record of the releases of killed runs that a later run's clean-up put in place
#: (`_roll_forward`): one JSON object a line (when, the folders, the killed run's process and
#: its ledger entry), appended (0600) in each rolled-forward confidential folder, in curator
#: and author mode (an author-mode run tells the author nothing of it). A run neither replaces
#: nor removes it: like the curator's entries it is carried over into the new folder, but it
#: never needs ``--overwrite`` and is never called a file no tabdp run wrote.
ROLLED_FORWARD_LOG = "rolled_forward.jsonl"

#: The temporary names tabdp's writers give files inside a confidential (staging) folder, next
#: to the run file they become: ``_write_failure``'s ``.failure.json.<mkstemp>``, the streaming
#: report's ``.per_record_losses.parquet.<pid>.partial`` (`tabdp.frame._stream`) and Spark's
#: scratch folder ``.<file>.spark-<uuid>`` (`tabdp.frame._spark`): partial copies of run files.
_SCRATCH = re.compile(r"\.(?P<file>.+)\.(?:\d+\.partial|spark-[0-9a-f]+)")
_FAILURE_TMP = re.compile(rf"\.{re.escape(FAILURE_FILE)}\.[a-z0-9_]{{8}}")  # mkstemp's suffix


def _run_scratch(name: str) -> bool:
    """Whether a name in a confidential (staging) folder is tabdp's own temporary file.

    Such an entry is never the user's: a run deletes it with its old folder, and neither
    carries it over nor describes it as a file no run wrote (review r52).

    Example:
        >>> [_run_scratch(n) for n in (".per_record_losses.parquet.4242.partial",
        ...  ".per_record_losses.parquet.spark-" + "0" * 32, ".failure.json.k3j_x9a0",
        ...  CARRIED_MANIFEST, ".notes.txt.4242.partial", "compare")]
        [True, True, True, True, False, False]
    """
    if name == CARRIED_MANIFEST or _FAILURE_TMP.fullmatch(name):
        return True
    m = _SCRATCH.fullmatch(name)
    return m is not None and m["file"] in RUN_FILES


def _kept_entries(path: Path) -> list[Path]:
    """The entries of a confidential folder that no run wrote: a run keeps them.

    A run's files (`RUN_FILES`) and tabdp's temporary files (`_run_scratch`) are not among
    them; the clean-up's `ROLLED_FORWARD_LOG` is (a run keeps it too: see `_curators`).

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> (d / "compare").mkdir()
        >>> _ = (d / "confidential.json").write_text("{}")
        >>> _ = (d / ".failure.json.abcd1234").write_text("{}")
        >>> [p.name for p in _kept_entries(d)]
        ['compare']
    """
    try:
        return sorted(p for p in path.iterdir()
                      if p.name not in RUN_FILES and not _run_scratch(p.name))
    except OSError:
        return []


def _curators(path: Path) -> list[Path]:
    """`_kept_entries` without the clean-up's `ROLLED_FORWARD_LOG`: what is the curator's own."""
    return [p for p in _kept_entries(path) if p.name != ROLLED_FORWARD_LOG]


def _carried_names(staging: Path) -> list[str] | None:
    """The names a staging folder's `CARRIED_MANIFEST` lists (``None``: none readable)."""
    try:
        names = json.loads((staging / CARRIED_MANIFEST).read_text(encoding="utf-8"))["carried"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    return names


def _write_carried(staging: Path, names: Sequence[str]) -> None:
    """Write `CARRIED_MANIFEST` into a staging folder, on disk before anything is moved."""
    write_synced(staging / CARRIED_MANIFEST, json.dumps({"carried": list(names)}) + "\n")


def _is_comparison(path: Path) -> bool:
    """A folder ``tabdp compare`` wrote: its default ``compare/``, or one holding its outputs."""
    return path.is_dir() and (path.name == "compare" or (path / "compare.json").exists()
                              or (path / "dp_release").is_dir())


def _named(paths: Sequence[Path], limit: int = 6) -> str:
    """Entry names for a message: folders with a trailing slash, at most ``limit`` of them.

    Example:
        >>> _named([Path("a.txt")] * 8, limit=2)
        'a.txt, a.txt and 6 more'
    """
    names = [p.name + ("/" if p.is_dir() else "") for p in paths]
    more = len(names) - limit
    return ", ".join(names[:limit]) + (f" and {more} more" if more > 0 else "")


def _confidential_blockers(path: Path) -> tuple[list[Path], list[Path], list[Path]]:
    """An existing confidential folder's release files, comparisons and other entries.

    A failed run's ``failure.json`` and logs are none of them: the next run replaces them.
    Whether a log was written (native code's messages, Spark's log) never decides whether
    the next run may write there (review r36: it did, and a log's presence could follow the
    data).

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> for name in (FAILURE_FILE, "stderr.log", "spark.log", "confidential.json"):
        ...     _ = (d / name).write_text("x")
        >>> (d / "compare").mkdir()
        >>> [[p.name for p in group] for group in _confidential_blockers(d)]
        [['confidential.json'], ['compare'], []]
    """
    try:
        entries = sorted(path.iterdir())
    except OSError:
        return [], [], []
    release = [p for p in entries if p.name in RELEASE_FILES]
    kept = [p for p in entries if p.name not in RUN_FILES and not _run_scratch(p.name)
            and p.name != ROLLED_FORWARD_LOG]  # tabdp's record, kept: never a blocker
    comparisons = [p for p in kept if _is_comparison(p)]
    return release, comparisons, [p for p in kept if p not in comparisons]


def _confidential_free(path: Path) -> bool:
    """Whether a run may write into this confidential folder without ``--overwrite``.

    It holds no release and nothing but comparisons and what a failed run left.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> (d / "compare").mkdir()
        >>> _ = (d / FAILURE_FILE).write_text("{}")
        >>> _confidential_free(d)
        True
        >>> _ = (d / "notes.txt").write_text("mine")
        >>> _confidential_free(d)
        False
    """
    release, _, other = _confidential_blockers(path)
    return path.is_dir() and not release and not other


#: Author mode: what a refusal says of the confidential folder's other entries, always the
#: same (review r52: the author was shown the names of the curator's files and folders there).
_AUTHOR_KEPT = ("A run replaces only its own files in the confidential folder and keeps any "
                "others there (a comparison, the curator's files: the curator can see them), "
                "with or without --overwrite.")
#: Author mode: the hint of a refusal (the author names no output folder, only the release).
_AUTHOR_HINT = ("Hint: choose another release name (its folder under the curator's output "
                "root), or pass --overwrite.")


def _confidential_refusal(path: Path, author: bool = False) -> str:
    """Why an existing confidential folder needs ``--overwrite``: what it holds, exactly.

    ``author`` (an author-mode run): one fixed text that names nothing in the folder; the
    curator sees the folder itself.
    """
    if author:
        return (f"the confidential output folder {str(path)!r} already exists and holds "
                f"files; tabdp never overwrites a release silently. {_AUTHOR_KEPT}\n"
                f"{_AUTHOR_HINT}")
    release, comparisons, other = _confidential_blockers(path)
    compared = f"the comparison {_named(comparisons)} (tabdp compare)" if comparisons else ""
    if release:
        parts = [x for x in (compared, f"{_named(other)}, which no tabdp run wrote" if other
                             else "") if x]
        kept = (f" It also holds {' and '.join(parts)}: a run keeps "
                f"{'it' if len(comparisons) + len(other) == 1 else 'them'}, with or without "
                "--overwrite." if parts else "")
        return (f"the confidential output folder {str(path)!r} already exists and holds the "
                f"confidential files of an earlier release ({_named(release)}); tabdp never "
                f"overwrites a release silently.{kept}\nHint: choose a new folder in the spec's "
                "[output] section, remove the old one, or pass --overwrite (it replaces only "
                "the release's files).")
    return (f"the confidential output folder {str(path)!r} already exists and holds no "
            f"release, but {_named(other)}, which no tabdp run wrote: the spec's [output] "
            f"section may name the wrong folder.{f' It also holds {compared}.' if compared else ''}"
            "\nHint: choose a new folder in the "
            "spec's [output] section, or pass --overwrite to write the release beside them (a "
            "run replaces only its own files and keeps these).")


def _check_target(path: Path, overwrite: bool, what: str,
                  confidential: Path | None = None, author: bool = False) -> None:
    """Refuse an output folder a run must not write (``confidential``: the run's, if any).

    Args:
        path: The output folder.
        overwrite: ``--overwrite`` was given.
        what: ``"public"``, ``"confidential"`` or ``"plan"``.
        confidential: For the public folder, the run's confidential folder: a refusal names
            what a run keeps there (a comparison, say).
        author: An author-mode run: a refusal names nothing in the confidential folder
            (review r52).
    """
    _check_name_lengths(path, what, author)
    if path.is_symlink():
        # review r52: a run renames the folder aside, so it moved the curator's entries out of
        # the link's target into a new, local folder and left a .old-* link behind every run;
        # and a public (or plan) folder that is a link was replaced, under --overwrite, by
        # a new local folder, the link gone and the publication it pointed to left as it was
        raise InvalidParameterError(
            f"the {what} output folder {str(path)!r} is not a plain folder"
            + ("; the curator must make it one.\nHint: ask the curator." if author
               else " but a symbolic link; a run (with or without --overwrite) replaces the "
                    "folder itself, never what a link points to, so tabdp refuses it.\nHint: "
                    "name the link's target in the spec's [output] section"
                    + (" (or --out)" if what != "confidential" else "")
                    + ", or replace the link by a folder."))
    if what == "confidential" and path.is_dir():
        # the run replaces only its own files there (`RUN_FILES`): a folder holding nothing
        # but comparisons (tabdp compare's compare/) and a failed run's report needs no
        # --overwrite, and one that does is described (review r51), to the curator only
        # (review r52)
        if not overwrite and not _confidential_free(path):
            raise InvalidParameterError(_confidential_refusal(path, author))
    elif path.exists() and not overwrite:
        kept = _curators(confidential) if confidential is not None else []
        note = (f" {_AUTHOR_KEPT}" if author and confidential is not None else
                f" The confidential folder {str(confidential)!r} also holds {_named(kept)}, "
                "which no tabdp run wrote (a comparison of tabdp compare, say): a run keeps "
                f"{'it' if len(kept) == 1 else 'them'}, with or without --overwrite."
                if kept else "")
        hint = (_AUTHOR_HINT if author else "Hint: choose a new folder in the spec's [output] "
                "section" + (" (or another plan --out)" if what == "plan" else "")
                + ", remove the old one, or pass --overwrite.")
        raise InvalidParameterError(
            f"the {what} output folder {str(path)!r} already exists; tabdp never overwrites a "
            f"release silently.{note}\n{hint}")
    if path.exists() and not path.is_dir():
        raise InvalidParameterError(
            f"the {what} output path {str(path)!r} exists and is not a folder.\n"
            "Hint: point [output] at a folder path.")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InvalidParameterError(
                    f"the {what} output folder {str(path)!r} cannot be created: "
                    f"{str(parent)!r} is a file.\nHint: point [output] at a folder path.")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise InvalidParameterError(
                    f"the {what} output folder {str(path)!r} cannot be created: "
                    f"{str(parent)!r} is not writable.\nHint: choose a writable location.")
            # os.access says yes to root everywhere (/proc, /sys, read-only mounts): try it
            try:
                probe = tempfile.mkdtemp(prefix=".tabdp-probe-", dir=parent)
                os.rmdir(probe)
            except OSError as err:
                raise InvalidParameterError(
                    f"the {what} output folder {str(path)!r} cannot be created: a folder "
                    f"cannot be made in {str(parent)!r} ({err.strerror or type(err).__name__})."
                    "\nHint: choose a writable location on an ordinary file system.") from None
            break


def _check_name_lengths(path: Path, what: str, author: bool) -> None:
    """Refuse an output folder (or its staging folder) named longer than its file system allows.

    Review r74: such a name passed every check made before the data, and the run stopped when
    it made the folder, after reading the data (exit 4, no confidential folder for the
    details). Each name is checked against the limit of the deepest existing folder above it.
    """
    base, limit = Path(path.parts[0]), 255
    for i, part in enumerate(path.parts[1:], start=2):
        with contextlib.suppress(OSError, ValueError, AttributeError):  # no pathconf: 255
            limit = os.pathconf(base, "PC_NAME_MAX") if base.is_dir() else limit
        # the last name also has its staging folder beside it (mkdtemp adds 8 characters)
        last = i == len(path.parts)
        size = len(os.fsencode(_staging_name(path, "tmp") + "x" * 8 if last else part))
        if size > limit:
            raise InvalidParameterError(
                f"the {what} output folder {str(path)!r} cannot be created: the name "
                f"{part[:24]!r}... ({len(os.fsencode(part))} bytes"
                + (f"; {size} bytes for the run's staging folder beside it" if last else "")
                + f") is too long for its file system (at most {limit} bytes per name). "
                "Nothing was read or written.\nHint: "
                + ("give the release a shorter name (release.name)." if author else
                   "choose a shorter folder name in the spec's [output] section (or --out)."))
        base = base / part


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` may still be running: ``True`` whenever that cannot be told.

    POSIX: signal 0 (``os.kill(pid, 0)``), which only checks. Windows: ``os.kill`` would *end*
    the process (Python maps every signal but CTRL_C / CTRL_BREAK to ``TerminateProcess``), so
    the process is opened for a query and its exit code read (`_windows_pid_alive`). A
    process counted alive keeps its staging folder: the clean-up refuses it with a message
    (to remove it by hand if no run is going on), never deletes it.

    Example:
        >>> _pid_alive(os.getpid())
        True
    """
    if pid == os.getpid():
        return True
    if sys.platform == "win32":
        return _windows_pid_alive(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: a process of another user
        return True
    return True


#: Windows: the access right `_windows_pid_alive` asks for, the exit code of a running process
#: and the error of ``OpenProcess`` for a process id no process has.
_QUERY_LIMITED_INFORMATION = 0x1000
_STILL_ACTIVE = 259
_ERROR_INVALID_PARAMETER = 87


def _kernel32() -> Any:
    """Windows' ``kernel32`` through ctypes, its three calls typed (``None``: not there)."""
    try:
        import ctypes
    except ImportError:  # pragma: no cover - a Python without ctypes
        return None
    win_dll = getattr(ctypes, "WinDLL", None)
    if win_dll is None:
        return None
    try:
        k = win_dll("kernel32", use_last_error=True)
    except OSError:
        return None
    k.OpenProcess.argtypes = [ctypes.c_uint32, ctypes.c_int, ctypes.c_uint32]
    k.OpenProcess.restype = ctypes.c_void_p  # a HANDLE: pointer-sized
    k.GetExitCodeProcess.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)]
    k.GetExitCodeProcess.restype = ctypes.c_int
    k.CloseHandle.argtypes = [ctypes.c_void_p]
    k.CloseHandle.restype = ctypes.c_int
    return k


def _last_error() -> int:
    """Windows: the error code of the last ctypes call (``ctypes.get_last_error``)."""
    import ctypes

    get = getattr(ctypes, "get_last_error", None)
    return int(get()) if get is not None else 0


def _windows_pid_alive(pid: int) -> bool:
    """Windows: whether process ``pid`` runs, without touching it (``True``: cannot tell).

    ``OpenProcess`` with the least query right, then ``GetExitCodeProcess``: ``STILL_ACTIVE``
    (259) is running. No such process (``ERROR_INVALID_PARAMETER``) is gone; access denied (a
    process of another user, a protected one) and any other failure count as running. A
    process that ended with exit code 259 also counts as running: its staging folder is then
    refused, never deleted.
    """
    import ctypes

    k = _kernel32()
    if k is None:
        return True
    handle = k.OpenProcess(_QUERY_LIMITED_INFORMATION, 0, pid)
    if not handle:
        return _last_error() != _ERROR_INVALID_PARAMETER
    try:
        code = ctypes.c_uint32()
        if not k.GetExitCodeProcess(handle, ctypes.byref(code)):
            return True
        return int(code.value) == _STILL_ACTIVE
    finally:
        k.CloseHandle(handle)


#: Suffix of the swap record a run writes next to each of its staging folders just before its
#: commit (fsynced): the run's staging folders and targets, and how to tell whether its commit
#: happened (the lifetime ledger's chain entry it would write, or none). A run killed after
#: its commit is rolled forward by a later run's clean-up, as a whole (`clean_stale_staging`).
COMMITTED = ".swap"


def _write_swap(tmp: Path, record: Mapping[str, Any]) -> None:
    """Write ``<tmp>.swap`` (the run's swap record) next to a staging folder, on disk."""
    # a new file, never through a link planted at its name (review r54)
    write_synced(tmp.with_name(tmp.name + COMMITTED), json.dumps(dict(record)) + "\n",
                 exclusive=True)
    fsync_dir(tmp.parent, strict=False)


def _swap_committed(record: Mapping[str, Any]) -> bool:
    """Whether the run of a swap record did its commit (then its staging folders are the release).

    Without a ledger there is no commit to wait for: the record itself, written when every
    check had passed, says the folders are complete. With one, the run's own commit must be on
    disk: the chain entry at the record's position, and the ``ledger.json`` the commit wrote
    into the run's confidential staging folder naming that entry's hash (another run of the
    same spec committing that position is not this run's commit: review r54). A kill between
    the entry and ``ledger.json`` reads as not committed: the previous release is put back,
    the ledger over-charged (the safe side).
    """
    entry = record.get("entry")
    if entry is None:
        return True
    try:
        found = json.loads(Path(entry).read_bytes())
    except (OSError, ValueError):
        return False
    if not (isinstance(found, dict) and found.get("spec_hash") == record.get("spec_hash")):
        return False
    private = record.get("private") or []
    for tmp_name, conf in zip(record["tmps"], private, strict=False):
        if not conf:
            continue
        try:
            note = json.loads((Path(tmp_name) / "ledger.json").read_bytes())
        except (OSError, ValueError):
            continue
        if isinstance(note, dict) and note.get("entry_hash") == found.get("hash") \
                and note.get("release") == found.get("seq"):
            return True
    return False


def _valid_swap(record: Mapping[str, Any], mark: Path) -> bool:
    """A swap record whose paths are the staging names of its targets, this record's among them.

    Every staging folder is ``.<target>.tmp-…`` and every set-aside one ``.<target>.old-…``
    next to its target, the record is next to one of its staging folders, and the ledger entry
    is a ``chain/<8 digits>.json``: a record copied or planted elsewhere acts on nothing.
    """
    try:
        tmps = [Path(x) for x in record["tmps"]]
        targets = [Path(x) for x in record["targets"]]
        olds = [(Path(a), Path(b)) for a, b in record.get("olds") or []]
    except (TypeError, ValueError):
        return False
    if mark.with_name(mark.name[:-len(COMMITTED)]) not in tmps:
        return False
    for tmp, target in zip(tmps, targets, strict=False):
        if tmp.parent != target.parent or not tmp.name.startswith(f".{target.name}.tmp-"):
            return False
    for target, old in olds:
        if target not in targets or old.parent != target.parent \
                or not old.name.startswith(f".{target.name}.old-"):
            return False
    entry = record.get("entry")
    if entry is not None:
        e = Path(str(entry))
        if e.parent.name != "chain" or not re.fullmatch(r"\d{8}\.json", e.name):
            return False
    return True


def _staging_name(target: Path, kind: str) -> str:
    """Prefix of a staging (``tmp``) or set-aside (``old``) folder: names the run's process."""
    return f".{target.name}.{kind}-{os.getpid()}-"


def clean_stale_staging(targets: Sequence[Path], private: Sequence[bool] | None = None,
                        author: bool = False) -> list[Path]:
    """Remove the staging folders a killed run (``kill -9``, power loss) left next to targets.

    Staging folders are named ``.<target>.tmp-<pid>-<random>`` (and ``.<target>.old-<pid>-...``
    for a previous release set aside during the final swap). A folder whose process is gone is
    stale: a ``tmp`` one is deleted (it may hold confidential data); an ``old`` one is deleted
    when the target exists (the swap had finished), and otherwise refused with a message: it
    is the only copy of the previous release. A folder of a process that is still running (or
    without a process id: older tabdp versions) is refused with a message: tabdp does not
    remove what another run may still be writing. A stale folder of a confidential target
    (``private``) that holds entries the killed run was carrying over (`_give_back`: a
    comparison, say) first gives them back to the target, or is refused with a message when
    it cannot: they are never deleted. A stale ``old`` symbolic link (a confidential folder
    that was a link, before review r52) is removed, never what it points to. A stale ``tmp``
    folder with its run's swap record (``<tmp>.swap``, written before the run set anything
    aside) is decided for the run as a whole: if its commit happened (`_swap_committed`), every
    staging folder of the run whose target is missing is put in place (rolled forward,
    publishable outputs given the usual permissions) and the set-aside folders are then
    removed; if not, the set-aside previous release is put back where its target is missing,
    and the staging folders are removed as above. A roll-forward is never silent: an entry
    (when, the folders, the killed run's process and ledger entry) is appended to
    ``rolled_forward.jsonl`` (`ROLLED_FORWARD_LOG`) in each rolled-forward confidential folder,
    and in curator mode a `RolledForwardWarning` names the folders put in place and when.

    Args:
        targets: Output folders of the run.
        private: Per target, whether it is a confidential folder (default: none is).
        author: An author-mode run: a refusal names nothing in the confidential folder, and
            a roll-forward is recorded only in the confidential folder (no warning).

    Returns:
        The folders removed.

    Raises:
        InvalidParameterError: A staging folder that cannot safely be removed.

    Warns:
        RolledForwardWarning: Curator mode: a killed run's committed release was put in place.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> (d / ".public.tmp-999999999-abc").mkdir()
        >>> [p.name for p in clean_stale_staging([d / "public"])]
        ['.public.tmp-999999999-abc']
    """
    removed: list[Path] = []
    rolled: list[Path] = []
    privacy = list(private) if private is not None else [False] * len(targets)
    for t, conf in zip(targets, privacy, strict=True):
        t = Path(t)
        if not t.parent.is_dir():
            continue
        for kind in ("tmp", "old"):
            for p in sorted(t.parent.glob(f".{t.name}.{kind}-*")):
                if p.name.endswith(COMMITTED) and not p.is_dir():
                    if not p.with_name(p.name[:-len(COMMITTED)]).exists():
                        p.unlink(missing_ok=True)  # its folder is gone: nothing to roll forward
                    continue
                rest = p.name[len(f".{t.name}.{kind}-"):]
                pid_text = rest.split("-", 1)[0]
                pid = int(pid_text) if pid_text.isdigit() and "-" in rest else None
                if pid is not None and _pid_alive(pid):
                    raise InvalidParameterError(
                        f"{str(p)!r} is the staging folder of another tabdp run (process "
                        f"{pid}), which is still running; two runs must not write the same "
                        "outputs.\nHint: wait for the other run to finish; if no tabdp run is "
                        "going on (the process id was reused), remove that folder by hand.")
                if pid is None:
                    raise InvalidParameterError(
                        f"{str(p)!r} is a staging folder left by an earlier run that names no "
                        "process, so tabdp cannot tell whether it is still in use.\nHint: if "
                        "no tabdp run is going on, remove it by hand (it may hold "
                        "confidential data).")
                if kind == "old" and not t.exists():
                    raise InvalidParameterError(
                        f"{str(p)!r} holds the previous release of {str(t)!r}, set aside by a "
                        "run that was killed while replacing it; it is now the only copy.\n"
                        f"Hint: restore it (mv {str(p)!r} {str(t)!r}) or remove it, then rerun.")
                mark = p.with_name(p.name + COMMITTED)
                if kind == "tmp" and mark.exists() and not p.is_symlink():
                    record = _read_swap(mark)
                    if record is not None and not _valid_swap(record, mark):
                        record = None  # acts on nothing but its own staging folder
                    if record is not None and _swap_committed(record):
                        # killed after its commit: its staging folders are the release (its
                        # ledger charged), put in place together (rolled forward), never
                        # deleted; the set-aside old folders go next. Never silently:
                        # the curator is told what was put in place, and when
                        try:
                            marked_at: float | None = mark.stat().st_mtime
                        except OSError:
                            marked_at = None
                        placed = _roll_forward(record, author)
                        rolled += placed
                        _report_rolled(record, placed, pid, marked_at, author)
                        if not p.exists():
                            continue
                    elif record is not None:
                        # killed before its commit (the ledger as it was): the previous
                        # release goes back in place, as a failed run's swap restores it
                        _restore_olds(record)
                    _unmark_run(record, mark)
                mark.unlink(missing_ok=True)
                if p.is_symlink():  # only the link goes
                    p.unlink()
                    removed.append(p)
                    continue
                if conf:
                    _give_back(p, t, author)
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
    return removed


def _read_swap(mark: Path) -> dict[str, Any] | None:
    try:
        found = json.loads(mark.read_bytes())
    except (OSError, ValueError):
        return None
    ok = (isinstance(found, dict) and isinstance(found.get("tmps"), list)
          and isinstance(found.get("targets"), list)
          and len(found["tmps"]) == len(found["targets"]))
    return found if ok else None


def _roll_forward(record: Mapping[str, Any], author: bool = False) -> list[Path]:
    """Put a committed run's staging folders in place, all of them, or refuse and keep all.

    A staging folder whose target exists again (``tabdp compare`` made the confidential
    folder, say) is not put in place half-way: the clean-up refuses with a message, and
    nothing is moved or deleted (review r54).
    """
    umask = os.umask(0)
    os.umask(umask)
    pairs = [(Path(a), Path(b)) for a, b in zip(record["tmps"], record["targets"],
                                                 strict=False)]
    private = record.get("private") or [True] * len(pairs)
    for tmp, target in pairs:
        if tmp.is_dir() and not tmp.is_symlink() and target.exists():
            where = ("the release folder" if author else repr(str(target)))
            raise InvalidParameterError(
                f"a run killed after its commit left its release in a staging folder, but "
                f"{where} exists again, so it was not put in place; nothing was moved or "
                "deleted.\nHint: " + ("ask the curator to finish the killed run's release."
                                      if author else
                                      f"move what is in {str(target)!r} aside, then rerun (the "
                                      f"release is {str(tmp)!r})."))
    placed: list[Path] = []
    for (tmp, target), conf in zip(pairs, private, strict=False):
        if tmp.is_dir() and not tmp.is_symlink():
            if not conf:  # publishable outputs: the usual permissions
                tmp.chmod(0o777 & ~umask)
            tmp.rename(target)
            (target / CARRIED_MANIFEST).unlink(missing_ok=True)
            placed.append(target)
        tmp.with_name(tmp.name + COMMITTED).unlink(missing_ok=True)
    return placed


def _utc(t: float | None = None) -> str:
    """A time (POSIX seconds; default now) as UTC ISO 8601 text, to the second."""
    when = _dt.datetime.now(tz=_dt.UTC) if t is None else _dt.datetime.fromtimestamp(t, _dt.UTC)
    return when.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _append_log(folder: Path, entry: Mapping[str, Any]) -> bool:
    """Append one line to a folder's `ROLLED_FORWARD_LOG` (0600, on disk); ``False``: failed."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(folder / ROLLED_FORWARD_LOG, flags, 0o600)  # never through a link
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), 0o600)
            f.write(json.dumps(dict(entry)) + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        return False
    return True


def _report_rolled(record: Mapping[str, Any], placed: Sequence[Path], pid: int,
                   marked_at: float | None, author: bool) -> None:
    """Tell the curator that `_roll_forward` put a killed run's release in place.

    Both modes: one entry appended to `ROLLED_FORWARD_LOG` in each rolled-forward
    confidential folder. Curator mode also warns (`RolledForwardWarning`, printed by ``tabdp
    run`` as a ``WARNING (curator, do not publish)`` line) naming the folders; an author-mode
    run tells the author nothing (the folders are server paths, the curator's).
    """
    if not placed:
        return
    now = _utc()
    entry = record.get("entry")
    seq: int | None = None
    if entry is not None:
        try:
            found = json.loads(Path(str(entry)).read_bytes())
            seq = found.get("seq") if isinstance(found.get("seq"), int) else None
        except (OSError, ValueError, AttributeError):
            seq = None
    private = record.get("private") or [True] * len(record["targets"])
    confidential = {Path(t) for t, c in zip(record["targets"], private, strict=False) if c}
    charged = ("; its lifetime ledger was charged" + (f" as release {seq} of its series"
                                                      if seq is not None else "")
               if entry is not None else "")
    line = {"event": "rolled_forward", "at": now, "folders": [str(t) for t in placed],
            "killed_process": pid,
            "killed_run_swap_started_at": None if marked_at is None else _utc(marked_at),
            "ledger_entry": None if entry is None else str(entry), "ledger_release": seq,
            "by_process": os.getpid(), "mode": "author" if author else "curator",
            "note": f"a run killed after its commit point (every check passed{charged}) "
                    "left its complete release in staging folders; this clean-up put them in "
                    "place (rolled forward). Check that release before publishing it."}
    logged = [t for t in placed if t in confidential and _append_log(t, line)]
    if author:  # the curator reads the log; the author is told nothing
        return
    unlogged = [t for t in placed if t in confidential and t not in logged]
    where = (f" The record is in {', '.join(repr(str(t / ROLLED_FORWARD_LOG)) for t in logged)}."
             if logged else "")
    if unlogged:
        where += (f" It could not be written to {', '.join(repr(str(t)) for t in unlogged)}.")
    warnings.warn(RolledForwardWarning(
        f"a tabdp run (process {pid}) was killed after its commit point (every check of its "
        f"move into place passed{charged}) and before it had renamed all its output folders "
        f"into place; this run's clean-up put the staged folder{'s' if len(placed) > 1 else ''}"
        f" in place at {now} (rolled forward, not deleted): "
        f"{', '.join(repr(str(t)) for t in placed)}, completing that run's release.{where}"
        "\nHint: check that release before publishing it. A run without --overwrite now stops "
        "because its folders exist; one with --overwrite replaces it"
        + (" (the killed run's ledger charge stands)." if entry is not None else "."),
        folders=tuple(str(t) for t in placed), at=now,
        process=pid), stacklevel=3)


def _restore_olds(record: Mapping[str, Any]) -> None:
    """Put back the previous release a run that did not commit had set aside (target missing)."""
    for pair in record.get("olds") or []:
        target, old = Path(pair[0]), Path(pair[1])
        if not target.exists() and old.is_dir() and not old.is_symlink():
            old.rename(target)


def _unmark_run(record: Mapping[str, Any] | None, mark: Path) -> None:
    """Remove the swap records of a run that did not commit (all of them, with ``mark``)."""
    for tmp_name in (record or {}).get("tmps", []):
        Path(tmp_name).with_name(Path(tmp_name).name + COMMITTED).unlink(missing_ok=True)
    mark.unlink(missing_ok=True)


def _given_back(stale: Path) -> list[Path]:
    """What of a killed run's staging (or set-aside) folder is the curator's, not the run's.

    The names its `CARRIED_MANIFEST` lists (those still there): the run wrote that file before
    carrying anything over, so everything else in the folder is the run's own (its files,
    its scratch: Spark's, a partial report). Without a readable manifest (a folder set aside,
    or a run killed before it carried anything), every entry that is neither a run file nor
    tabdp's scratch (`_kept_entries`): what is not known to be the run's is kept.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> for name in ("compare", "per_record_losses.parquet.x", "notes"):
        ...     (d / name).mkdir()
        >>> [p.name for p in _given_back(d)]
        ['compare', 'notes', 'per_record_losses.parquet.x']
        >>> _write_carried(d, ["compare", "gone"])
        >>> [p.name for p in _given_back(d)]
        ['compare']
    """
    names = _carried_names(stale)
    if names is None:
        return _kept_entries(stale)
    return sorted(stale / n for n in set(names)
                  if n and "/" not in n and n not in (".", "..") and n not in RUN_FILES
                  and not _run_scratch(n) and (stale / n).exists())


def _give_back(stale: Path, target: Path, author: bool = False) -> None:
    """Move what a killed run was carrying over (a comparison, say) back into its target.

    ``author``: an author-mode run; a refusal names nothing in the folder (review r52).
    """
    entries = _given_back(stale)
    if not entries:
        return
    if not target.is_dir() or any((target / e.name).exists() for e in entries):
        what = ("entries" if author else _named(entries))
        raise InvalidParameterError(
            f"{str(stale)!r}, a staging folder of a run that was killed while replacing "
            f"{str(target)!r}, holds {what}, which that run was carrying over from the "
            "confidential folder (a comparison or the curator's files); tabdp does not delete "
            f"them.\nHint: {'the curator must ' if author else ''}move them back into "
            f"{str(target)!r} (if that folder is missing, first restore it from the "
            f".{target.name}.old-* folder next to it), remove {str(stale)!r}, then rerun.")
    for e in entries:
        e.rename(target / e.name)


def _set_tree(folder: Path, mtime: float | None, dir_mode: int | None,
              file_mode: int | None) -> None:
    """Set modes and modification times of a folder and everything in it."""
    for root, dirs, files in os.walk(folder):
        for f in files:
            fp = Path(root) / f
            if file_mode is not None:
                fp.chmod(file_mode)
            if mtime is not None:
                os.utime(fp, (mtime, mtime))
        for d in dirs:
            if dir_mode is not None:
                (Path(root) / d).chmod(dir_mode)
    for sub in [Path(r) for r, _, _ in os.walk(folder, topdown=False)]:
        if mtime is not None:
            os.utime(sub, (mtime, mtime))
    if dir_mode is not None:
        folder.chmod(dir_mode)


class _Staging:
    """Temporary sibling folders renamed onto the targets only if the block succeeds.

    Staging folders are named after the run's process (see `clean_stale_staging`), so a
    later run can tell a killed run's leftovers from a running one's.

    At the end of a successful block, in this order: every staged file and folder synced to
    disk (`sync_tree`); every check that can refuse the swap (a
    target that appeared meanwhile) and any old target moved aside (put back if anything
    later fails); then `commit` (set in the block: a lifetime ledger's commit point); then only
    the renames into place. A failure after `commit` returned is the caller's to report (its
    commit stands).

    A ``private`` (confidential) target's entries that no run wrote (`_kept_entries`: a
    comparison, the curator's files) are moved into its staging folder just before the old
    folder is moved aside, so they come out in the new folder; if anything fails, they are
    moved back into the old folder before anything is deleted (review r51). Their names are
    written into the staging folder first (`CARRIED_MANIFEST`, removed once the folder is in
    place): after a kill, only they are given back, and the rest (the run's files and
    scratch) deleted (review r52).
    """

    def __init__(self, targets: Sequence[Path], overwrite: bool,
                 private: Sequence[bool] | None = None) -> None:
        self.targets = [Path(t) for t in targets]
        self.overwrite = overwrite
        self.private = list(private) if private is not None else [False] * len(self.targets)
        self.tmps: list[Path] = []
        #: Called once the swap's checks passed, just before the renames (``None``: nothing).
        self.commit: Callable[[], None] | None = None
        #: How a later clean-up tells that the commit happened (`_swap_committed`): the chain
        #: entry the run's ledger commit writes and the spec hash it holds; None: no ledger.
        self.swap_check: dict[str, Any] | None = None

    def __enter__(self) -> list[Path]:
        self.created: list[Path] = []
        try:
            for t in self.targets:
                missing = [p for p in reversed(t.parents) if not p.exists()]
                t.parent.mkdir(parents=True, exist_ok=True)
                self.created += missing
                # mkdtemp makes a private (0700) folder, and it stays private while the
                # run writes: a release with a lifetime ledger is charged only when the block
                # ends (``__exit__``, `commit`), so its public tables must not be readable
                # before (a run killed in between would leave them behind, uncharged).
                # Publishable outputs get the usual permissions after the commit, as they are
                # moved into place.
                tmp = Path(tempfile.mkdtemp(prefix=_staging_name(t, "tmp"), dir=t.parent))
                self.tmps.append(tmp)
        except BaseException:
            self._cleanup()
            raise
        return self.tmps

    def _cleanup(self) -> None:
        for tmp in self.tmps:
            shutil.rmtree(tmp, ignore_errors=True)
        # parent folders this run created, if still empty
        for p in sorted(set(getattr(self, "created", [])), key=lambda q: len(q.parts),
                        reverse=True):
            try:
                p.rmdir()
            except OSError:
                pass

    def _unmark(self) -> None:
        """Remove the staging folders' commit marks (`COMMITTED`): the swap is over."""
        for tmp in self.tmps:
            tmp.with_name(tmp.name + COMMITTED).unlink(missing_ok=True)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self._cleanup()
            return
        # Swap in: every check first, and any old folder moved aside (a failure restores it);
        # then the commit (a lifetime ledger's: review B, a check failing after it left the
        # ledger charged for a run that said "nothing was written"); then only the renames.
        moved: list[tuple[Path, Path]] = []
        placed: list[Path] = []
        carried: list[tuple[Path, Path, str]] = []  # (target, its staging folder, entry name)
        umask = os.umask(0)
        os.umask(umask)
        try:
            for tmp in self.tmps:  # every staged file and folder on disk first, before the
                sync_tree(tmp)  # swap record, the commit and the renames rely on them
            for t, private in zip(self.targets, self.private, strict=True):
                if t.exists() and not (self.overwrite or (private and _confidential_free(t))):
                    raise InvalidParameterError(
                        f"the output folder {str(t)!r} appeared while the release was "
                        "running; nothing was written.\nHint: rerun, or pass --overwrite.")
            for t, tmp, private in zip(self.targets, self.tmps, self.private, strict=True):
                if private and t.is_dir():  # a comparison, the curator's files: kept
                    entries = _kept_entries(t)
                    if entries:  # what is carried, on disk first: after a kill, only that
                        _write_carried(tmp, [e.name for e in entries])  # is given back
                    for entry in entries:
                        entry.rename(tmp / entry.name)
                        carried.append((t, tmp, entry.name))
                    if entries:  # moved in, on disk before the swap record
                        fsync_dir(tmp, strict=False)
                        fsync_dir(t, strict=False)
            set_aside: list[tuple[Path, Path]] = []
            for t in self.targets:
                if t.exists():
                    old = Path(tempfile.mkdtemp(prefix=_staging_name(t, "old"), dir=t.parent))
                    old.rmdir()
                    set_aside.append((t, old))
            # the run's swap record next to each staging folder, on disk before anything is
            # set aside and before the commit: a run killed before its commit gets its previous
            # release put back, one killed after it is rolled forward, all its folders together
            record = {"tmps": [str(x) for x in self.tmps],
                      "targets": [str(x) for x in self.targets],
                      "olds": [[str(t), str(old)] for t, old in set_aside],
                      "private": list(self.private), **(self.swap_check or {"entry": None})}
            for tmp in self.tmps:
                _write_swap(tmp, record)
            for t, old in set_aside:
                t.rename(old)
                moved.append((t, old))
            if self.commit is not None:
                self.commit()
            for tmp, private in zip(self.tmps, self.private, strict=True):
                if not private:  # publishable outputs: the usual permissions, now (after the
                    tmp.chmod(0o777 & ~umask)  # commit: never readable uncharged)
            for t, tmp in zip(self.targets, self.tmps, strict=True):
                tmp.rename(t)
                placed.append(t)
            for t in self.targets:  # the renames on disk before the swap records go
                fsync_dir(t.parent, strict=False)
        except BaseException:
            self._unmark()  # first: a kill in this handler leaves the old release (review r54)
            # what was carried over goes back first, to where the old folder now is: nothing
            # of it is deleted (a folder it could not leave is left in place, for
            # `clean_stale_staging` to give back)
            aside = dict(moved)
            stuck: set[Path] = set()
            for t, tmp, name in reversed(carried):
                holder = t if t in placed else tmp
                try:
                    (holder / name).rename(aside.get(t, t) / name)
                except OSError:
                    stuck.add(holder)
            for t in placed:
                if t not in stuck:
                    shutil.rmtree(t, ignore_errors=True)
            for t, old in moved:
                if not t.exists():
                    old.rename(t)
            self.tmps = [tmp for tmp in self.tmps if tmp not in stuck]
            self._cleanup()
            raise
        self._unmark()
        for _, old in moved:
            shutil.rmtree(old, ignore_errors=True)
        for t, private in zip(self.targets, self.private, strict=True):
            if private:  # its work is done (left behind, it is a run file: `_run_scratch`)
                try:
                    (t / CARRIED_MANIFEST).unlink(missing_ok=True)
                except OSError:
                    pass


# -- running ---------------------------------------------------------------------------------

def _finite(x: Any) -> float | None:
    v = float(x)
    return v if np.isfinite(v) else None


def _json(obj: Any) -> str:
    """JSON text; infinite or NaN numbers are written as null (documented: null = infinite)."""
    return json.dumps(_finite_json(obj), indent=2, sort_keys=False, default=_json_default,
                      allow_nan=False) + "\n"


def _finite_json(obj: Any) -> Any:
    if isinstance(obj, float | np.floating):
        return _finite(obj)
    if isinstance(obj, Mapping):
        return {k: _finite_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite_json(v) for v in obj]
    return obj


def _json_default(x: Any) -> Any:
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return _finite(x)
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"not JSON serializable: {type(x).__name__}")


def _timestamp() -> str:
    """UTC time, or ``SOURCE_DATE_EPOCH`` when set (reproducible outputs)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is not None and epoch.strip().isdigit():
        t = _dt.datetime.fromtimestamp(int(epoch), tz=_dt.UTC)
    else:
        t = _dt.datetime.now(tz=_dt.UTC)
    return t.replace(microsecond=0).isoformat().replace("+00:00", "Z")


class DataDependentFailure(DataValidationError):
    """A run stopped after it had read the confidential data.

    Whatever the cause (a value the rules refuse, a schema problem, a budget, a bug triggered
    by a value), the message is always the same: it names no value, count, column or unit, so
    the failure tells its reader only that the run failed. The details are written to
    ``failure.json`` in the confidential folder (`failure_file`), readable by the owner
    only. Nothing public is written.

    Attributes:
        failure_file: Where the details were written, or ``None`` if they could not be.
        ledger_release: Curator mode: the release number a lifetime ledger was charged as
            although the run failed (after its commit: an over-charge, safe); else ``None``.

    Example:
        >>> err = DataDependentFailure(None, Path("conf"))
        >>> isinstance(err, DataValidationError), "data-dependent failure" in str(err)
        (True, True)
    """

    def __init__(self, failure_file: Path | None, confidential: Path) -> None:
        """Point to the confidential ``failure_file`` (``None``: it could not be written)."""
        self.failure_file = failure_file
        #: Curator mode: the release number the lifetime ledger was charged as, when the run
        #: failed after its commit (details in ``failure_file``); else ``None``.
        self.ledger_release: int | None = None
        where = (f"in {str(failure_file)!r}" if failure_file is not None else
                 f"nowhere: they could not be written to {str(confidential)!r}")
        super().__init__(
            "data-dependent failure: the run stopped after reading the confidential data; "
            "nothing public was written. The details (confidential: never publish them) are "
            f"only {where}.\nHint: the curator reads the cause and its fix there. (Misspelt "
            "or mistyped columns are spec errors that tabdp validate reports before any data "
            'is read; input.mode = "author" only keeps the data\'s values, such as nulls or '
            "negatives, from stopping a run.)")


def _start_time() -> tuple[str, float]:
    """The run's one timestamp: text for the manifest and POSIX seconds for file times."""
    text = _timestamp()
    t = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return text, t.timestamp()


def _spec_hints(text: str) -> str:
    r"""Rewrite the engine's Python hints (``nulls='zero'``) as spec keys.

    Example:
        >>> _spec_hints("nulls='error'.\nHint: pass nulls='zero' or negatives='drop'.")
        'input.nulls = "error".\nHint: set input.nulls = "zero" or input.negatives = "drop".'
    """
    import re

    text = text.replace(
        "fix or remove those rows before the release, or use Session(mode='author') where they "
        "count as missing values under the declared nulls= rule.",
        'set input.nonfinite = "drop", "zero" or "clamp" (with input.bounds).')
    text = text.replace("Session(mode='author')", 'input.mode = "author"')
    text = text.replace("the declared nulls= rule", "the declared input.nulls rule")
    text = re.sub(r"\bpass (nulls|negatives)=", r"set \1=", text)
    text = re.sub(r"\b(nulls|negatives|unit_nulls)='(\w+)'", r'input.\1 = "\2"', text)
    text = text.replace("create the session with unit='<id column>'",
                        'set input.unit = "<id column>" in the spec')
    text = text.replace("the session's unit=", "input.unit")
    text = text.replace("use an additive mechanism (Gaussian, ExpPolyLog)",
                        'use an additive family (e.g. family = "gaussian" or "exp_polylog")')
    text = text.replace("fill the ids or drop those rows first (author mode drops them by rule)",
                        'fill the ids, or set input.unit_nulls = "drop" to drop those rows')
    text = text.replace("by=", "the table's by")
    return spec_keys_hint(text)


def _failure_details(err: BaseException, phase: str) -> dict[str, Any]:
    import traceback

    return {
        "CONFIDENTIAL": "details of a failed run: may hold values of individual records; do "
                        "not publish",
        "phase": phase,
        "error": type(err).__name__,
        "message": _spec_hints(str(err)),
        "confidential": getattr(err, "confidential", None),
        "traceback": traceback.format_exception(type(err), err, err.__traceback__),
    }


def _write_failure(spec: ReleaseSpec, details: dict[str, Any], started: str) -> Path | None:
    """Write ``failure.json`` (0600) into the confidential folder (0700), creating it."""
    folder = spec.output.confidential
    try:
        made = not folder.exists()
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if made:
            folder.chmod(0o700)
        target = folder / FAILURE_FILE
        text = json.dumps(_finite_json({"release": spec.release.name, "started": started,
                                        **details}), indent=2, default=str) + "\n"
        fd, tmp = tempfile.mkstemp(prefix=f".{FAILURE_FILE}.", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, 0o600)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return target
    except Exception:  # noqa: BLE001 - the failure itself is reported generically
        return None


SPARK_LOG = "spark.log"


def _keep_spark_log(log: Path, confidential: Path) -> None:
    """Move the JVM's log into the confidential folder (if the run made one), else drop it."""
    try:
        if confidential.is_dir():
            shutil.move(log, confidential / SPARK_LOG)
            os.chmod(confidential / SPARK_LOG, 0o600)
        else:
            log.unlink(missing_ok=True)
    except OSError:
        log.unlink(missing_ok=True)
