"""Entry points: read a ``release.toml`` (`load_spec`) or validate a parsed dict.

`parse_spec` runs the section parsers, then the cross-field checks.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tabdp.exceptions import SpecError
from tabdp.release.curator_config import CuratorConfig
from tabdp.release.spec.checks import (
    _check_currencies,
    _check_declared_columns,
    _check_global_round,
    _check_input_rules,
    _check_max_rho,
    _check_paths,
    _check_report_names,
    _check_tables,
)
from tabdp.release.spec.files import _AUTHOR
from tabdp.release.spec.model import (
    InputSpec,
    PlanSpec,
    Publication,
    ReleaseInfo,
    ReleaseSpec,
    TableSpec,
)
from tabdp.release.spec.schema import _ROOT_KEYS, _ROOT_REQUIRED, _fail, _show, _table, _tname
from tabdp.release.spec.sections import (
    _author_mode,
    _author_output,
    _dataset_ledger,
    _parse_budget,
    _parse_domains,
    _parse_hierarchies,
    _parse_input,
    _parse_ledger,
    _parse_output,
    _parse_plan,
    _parse_publication,
    _parse_release,
    _parse_seed,
    _with_defaults,
)
from tabdp.release.spec.tables import _parse_table


def load_spec(path: str | Path, *, curator: CuratorConfig | None = None) -> ReleaseSpec:
    """Read and validate a ``release.toml``.

    The file's SHA-256 is recorded (``spec.sha256``) so the outputs can name the exact spec
    they come from; relative paths inside are resolved against the file's folder.

    Args:
        path: The spec file.
        curator: The curator's configuration (`load_curator_config()`):
            required by an author-mode spec, optional otherwise (``input.dataset``).

    Returns:
        The validated [`ReleaseSpec`][tabdp.release.ReleaseSpec].

    Raises:
        SpecError: The file is missing, not valid TOML, or breaks the schema (the message names
            the key path and the fix).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> folder = Path(tempfile.mkdtemp())
        >>> text = '''
        ... [release]
        ... name = "demo"
        ... [input]
        ... path = "data.parquet"
        ... [domains]
        ... region = ["north", "south"]
        ... [output]
        ... public = "out/public"
        ... confidential = "out/confidential"
        ... [[tables]]
        ... name = "units"
        ... kind = "count"
        ... by = ["region"]
        ... '''
        >>> _ = (folder / "release.toml").write_text(text)
        >>> spec = load_spec(folder / "release.toml")
        >>> spec.output.public == folder / "out" / "public", spec.tables[0].mechanism
        (True, DiscreteGaussian(sigma=2.0))
        >>> len(spec.sha256)
        64
        >>> _ = (folder / "typo.toml").write_text(text.replace("kind", "knd"))
        >>> try:
        ...     load_spec(folder / "typo.toml")
        ... except SpecError as err:
        ...     error = err
        >>> error.path, "Did you mean 'kind'?" in str(error)
        ('tables[0].knd', True)
        >>> import shutil
        >>> shutil.rmtree(folder)
    """
    file = _spec_path(path, curator)
    if "\x00" in str(file):  # no file has such a name (the system refuses to look it up)
        raise spec_not_found(file)
    try:
        content = (_read_author_only(file, curator) if curator is not None
                   and curator.author_only else file.read_bytes())
    except FileNotFoundError:
        raise spec_not_found(file) from None
    except OSError as err:
        raise SpecError("", f"cannot read the release spec {str(file)!r}: {err}\nHint: fix the "
                            "path; it must name a readable TOML file.") from None
    _refuse_data_file(file, content)
    try:
        data = tomllib.loads(content.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise SpecError("", f"{str(file)!r} is not UTF-8 text ({err}).\nHint: save the spec as "
                            "UTF-8.") from None
    except tomllib.TOMLDecodeError as err:
        raise SpecError("", f"{str(file)!r} is not valid TOML: {err}.\nHint: fix the syntax at "
                            "that line and column (strings need quotes, tables [name], arrays of "
                            "tables [[tables]]).") from None
    return parse_spec(data, file.parent, path=file, sha256=hashlib.sha256(content).hexdigest(),
                      curator=curator)


def _spec_path(path: str | os.PathLike[str], curator: CuratorConfig | None) -> Path:
    """The spec's absolute path; under ``[policy] author_only`` exactly as written (no ``~``).

    Review rev64s: ``~user`` was expanded from the server's user database, so the message
    named a server folder (``~root/x.toml``: "not found: '/root/x.toml'") and an unknown user
    stopped the command as an internal error (exit 70) where a known one was "not found"
    (exit 2); elsewhere an unknown ``~user`` is left as written (then not found).

    Example:
        >>> import os
        >>> _spec_path("~no-such-user-xyz/s.toml", None) == Path(
        ...     os.path.abspath("~no-such-user-xyz/s.toml"))
        True
    """
    given = Path(path)
    if curator is not None and curator.author_only:
        return Path(os.path.abspath(given))
    try:
        return Path(os.path.abspath(given.expanduser()))
    except RuntimeError:  # ~user of no known user: the path as written
        return Path(os.path.abspath(given))


def _read_author_only(file: Path, config: CuratorConfig) -> bytes:
    """Under ``[policy] author_only``: the spec's bytes; a confidential server path is missing.

    A path in a dataset, a ledger (or its anchor) or the curator's output root is missing.

    Review rev62a: the spec file's errors (not found, a directory, a Parquet data file, not
    TOML) told whether a server path exists, and a file of a partition folder exists exactly
    when some record is in it. Decided from the path (symbolic links resolved) and the
    configuration alone; such a path is never read. Review rev62b: the file read is the real
    path that was checked, opened without following any link (every folder on its way too),
    so a name swapped for a link into a dataset after the check is refused, never read.

    With ``[policy] author_specs`` (stop 64), a spec is read only if its real path is a regular
    file with one name inside that folder: any other path is missing whether or not it exists
    (``/proc/<pid>/fd/2``, a concurrent run's log, answered "not valid TOML (line, column)"),
    and a path outside the folder, as written or resolved, is not even looked up.

    Raises:
        FileNotFoundError: The path is in a dataset, a ledger (or is its anchor) or the output
            root (whether it exists or not), or missing; with ``author_specs``, any path but a
            regular file inside that folder.
        OSError: Another path that cannot be read (a link swapped in since the check, a
            folder), without ``author_specs``.
    """
    from tabdp.release.spec.files import _open_below

    if config.author_specs is not None:
        return _read_author_specs(file, config.author_specs, config)
    real = Path(os.path.realpath(file))
    if _confidential(real, config) or not real.parts[1:]:
        raise FileNotFoundError(str(file))
    try:
        fd, parent = _open_below(Path(real.anchor), real.parts[1:])
    except OSError as err:
        # named as written (review rev64t: the error named a part of the real path, a link's
        # target the author never wrote: "not a regular file: 'hidden_dir'")
        raise OSError(err.errno, err.strerror, str(file)) from None
    if parent >= 0:
        os.close(parent)
    with os.fdopen(fd, "rb") as fh:  # a regular file (`_open_below` checks it)
        return fh.read()


def _confidential(real: Path, config: CuratorConfig) -> bool:
    """Whether a real path is in a dataset, a ledger (or is its anchor) or the output root."""
    from tabdp.privacy.lifetime import ledger_anchor
    from tabdp.release.curator_config import data_locations

    places = [p for d in config.datasets.values() if d.path is not None
              for p in data_locations(d.path)]
    places += [Path(os.path.realpath(d.ledger)) for d in config.datasets.values()
               if d.ledger is not None]
    # review rev64a: a ledger's anchor (next to its folder) is the ledger's; the output root
    # holds the releases' confidential folders, some of whose files exist only on some data
    # (stderr.log: native output while the data was read), so read as a spec they told an
    # author whether (and, by a parse error's line and column, how) they exist
    places += [Path(os.path.realpath(ledger_anchor(d.ledger)))
               for d in config.datasets.values() if d.ledger is not None]
    if config.output_root is not None:
        places.append(Path(os.path.realpath(config.output_root)))
    return any(real == p or p in real.parents for p in places)


def _read_author_specs(file: Path, folder: Path, config: CuratorConfig) -> bytes:
    """``[policy] author_specs``: the spec's bytes if it is a plain file of that folder.

    Decided from the path and the configuration: a path that does not name the folder as
    written (its configured or real form) is missing at once, nothing on it looked up; one
    that does is resolved and must still be inside the folder's real path (a link inside
    pointing out, a ``..`` through a link: missing). The file is then opened below the
    folder's real path without following any link (nor any on the way to it), and must be a
    regular file with one name, still the file of that name once open (as a public file,
    `tabdp.release.spec.files._public_bytes`); anything else is missing too.

    Raises:
        FileNotFoundError: Any path but such a file (whether it exists or not).
    """
    from tabdp.release.spec.files import _open_below

    top = Path(os.path.realpath(folder))
    if not any(p in file.parents for p in {Path(folder), top}):
        raise FileNotFoundError(str(file))
    real = Path(os.path.realpath(file))
    if top not in real.parents:
        raise FileNotFoundError(str(file))
    if _confidential(real, config):  # e.g. a dataset's link into the folder added since
        raise FileNotFoundError(str(file))
    parts = real.relative_to(top).parts
    try:
        fd, parent = _open_below(top, parts)
    except OSError:
        raise FileNotFoundError(str(file)) from None
    try:
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            named = (os.stat(parts[-1], dir_fd=parent, follow_symlinks=False) if parent >= 0
                     else os.stat(real, follow_symlinks=False))
            if st.st_nlink != 1 or named.st_nlink != 1 or \
                    (named.st_dev, named.st_ino) != (st.st_dev, st.st_ino):
                # a hard link has no real path to check: its other name may be a data file
                raise FileNotFoundError(str(file))
            return fh.read()
    except OSError:
        raise FileNotFoundError(str(file)) from None
    finally:
        if parent >= 0:
            os.close(parent)


def spec_not_found(file: Path) -> SpecError:
    """The error of a spec file that is not there (also what a refused location gets).

    Args:
        file: The spec's absolute path.

    Returns:
        The `SpecError` (path ``""``).

    Example:
        >>> str(spec_not_found(Path("/x/s.toml"))).splitlines()[0]
        "release spec file not found: '/x/s.toml'."
    """
    return SpecError("", f"release spec file not found: {str(file)!r}.\nHint: fix the path "
                         "to the release.toml (relative paths start from the current folder).")


#: Suffixes of data files (never a spec): ``tabdp validate data.parquet`` says so plainly.
_DATA_SUFFIXES = (".parquet", ".pq", ".csv", ".tsv", ".arrow", ".feather", ".ipc", ".orc",
                  ".avro", ".xlsx", ".xls", ".gz", ".zip")


def _refuse_data_file(file: Path, content: bytes) -> None:
    r"""A data file or another binary file given where a spec is expected: say so plainly.

    Example:
        >>> try:
        ...     _refuse_data_file(Path("data.parquet"), b"PAR1\x15\x04")
        ... except SpecError as err:
        ...     print(str(err).splitlines()[0])
        'data.parquet' is a Parquet data file, not a release spec (a TOML text file).
    """
    if content[:4] == b"PAR1":
        what = "a Parquet data file"
    elif file.suffix.lower() in _DATA_SUFFIXES:
        what = f"a data file ({file.suffix.lower()})"
    elif b"\x00" in content[:8192]:
        what = "a binary file"
    else:
        return
    raise SpecError("", f"{str(file)!r} is {what}, not a release spec (a TOML text file)."
                        "\nHint: pass the release spec (e.g. tabdp validate release.toml); the "
                        "spec names its data in [input] path = \"...\".")


def parse_spec(data: Mapping[str, Any], base_dir: str | Path, *,
               path: Path | None = None, sha256: str | None = None,
               curator: CuratorConfig | None = None) -> ReleaseSpec:
    """Validate an already parsed spec (a dict as ``tomllib`` returns it).

    Nothing of the confidential input is read (it need not exist yet); the public metadata
    files it names (hierarchies, domain files, allowed keys) are read and checked.

    Args:
        data: The parsed TOML.
        base_dir: Folder that relative paths are resolved against.
        path: The spec file, if any.
        sha256: Hash of the file bytes, if any (else computed from canonical JSON of ``data``).
        curator: The curator's configuration: required in author mode (which then reads only
            the curator's datasets and public files, by name), optional otherwise.

    Returns:
        The validated [`ReleaseSpec`][tabdp.release.ReleaseSpec].

    Raises:
        SpecError: Any schema violation, with its key path.

    Example:
        >>> from pathlib import Path
        >>> import tabdp
        >>> data_dir = Path(tabdp.__file__).parents[1] / "data"
        >>> spec = parse_spec({
        ...     "release": {"name": "demo"},
        ...     "input": {"path": "cbp_sample.parquet", "unit": "estab_id"},
        ...     "hierarchies": {"geo": {"file": "hierarchies/geography.csv",
        ...                             "levels": ["state", "county"]}},
        ...     "output": {"public": "/tmp/demo/public", "confidential": "/tmp/demo/conf"},
        ...     "tables": [{"name": "estabs", "kind": "count", "by": ["county"],
        ...                 "rollups": [{"by": ["state"]}, {"by": [], "direct": True}]}],
        ... }, base_dir=data_dir)
        >>> spec.input.path == data_dir / "cbp_sample.parquet"
        True
        >>> table = spec.tables[0]
        >>> table.mechanism, [r.label for r in table.rollups], table.rollups[0].maps
        (DiscreteGaussian(sigma=2.0), ['state', 'national'], {'state': ('geo', 'county')})
        >>> spec.domains["state"].len(), spec.domains["county"].len()
        (10, 300)
        >>> data = dict(spec.raw, release={"name": "demo", "level": 1.5})
        >>> parse_spec(data, base_dir=data_dir)
        Traceback (most recent call last):
        ...
        tabdp.exceptions.SpecError: release.level: the confidence level must be a finite ...
        Hint: e.g. level = 0.9 for 90% margins of error.
    """
    base = Path(os.path.abspath(Path(base_dir).expanduser()))
    if not isinstance(data, Mapping):
        _fail("", f"a release spec must be a table; got {_show(data)} ({_tname(data)}).",
              "pass the dict tomllib returns.")
    if sha256 is None:
        canonical = json.dumps(data, sort_keys=True, default=str)
        sha256 = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    author = _author_mode(data)
    if curator is not None and curator.author_only and not author:
        _fail("input.mode", "must be \"author\": the curator configuration allows author-mode "
                            "specs only ([policy] author_only = true).",
              'set input.mode = "author" and name a dataset of the configuration '
              '(dataset = "<name>").')
    if author and curator is not None:
        data = _with_defaults(data, curator)
    d = _table(data, "", allowed=_ROOT_KEYS,
               required=[k for k in _ROOT_REQUIRED if not (author and k == "output")])
    release = _parse_release(d["release"])
    inp = _parse_input(d["input"], base, curator)
    token = _AUTHOR.set((curator, {}) if author and curator is not None else None)
    try:
        return _parse_rest(data, d, base, release, inp, path, sha256, curator)
    finally:
        _AUTHOR.reset(token)


def _parse_rest(data: Mapping[str, Any], d: Mapping[str, Any], base: Path,
                release: ReleaseInfo, inp: InputSpec, path: Path | None, sha256: str,
                curator: CuratorConfig | None) -> ReleaseSpec:
    """`parse_spec()` after ``[release]`` and ``[input]`` (author mode: names only)."""
    domains = _parse_domains(d["domains"], base) if "domains" in d else {}
    hierarchies = (_parse_hierarchies(d["hierarchies"], base, domains)
                   if "hierarchies" in d else {})
    budget = _parse_budget(d["budget"]) if "budget" in d else None
    seed = _parse_seed(d["randomness"]) if "randomness" in d else None
    if inp.mode == "author" and "randomness" in d and not getattr(
            curator, "seeded_author_runs", False):
        # a seed the author chooses lets them redraw the run's noise at home and subtract it:
        # the exact confidential sums (review R12)
        _fail("randomness", "an author-mode spec may not set the randomness: a seed chosen by "
                            "the author would let them reproduce the noise and remove it.",
              "remove [randomness] (author-mode runs always use secure randomness).")
    if inp.mode == "author":
        assert curator is not None  # _parse_input refuses author mode without it
        output = _author_output(d.get("output"), curator, release)
    else:
        output = _parse_output(d["output"], base)
    ledger = _parse_ledger(d["ledger"], base, output, inp) if "ledger" in d else None
    if ledger is not None and ledger.max_left_out is not None and budget is not None \
            and budget.max_left_out is not None:
        _fail("ledger.max_left_out", "max_left_out is set in both [budget] and [ledger]; it "
              "limits one share (what the budget and the lifetime budget leave out together), "
              f"so it is set once (got {budget.max_left_out:g} and {ledger.max_left_out:g}).",
              "keep max_left_out in one of the two sections.")
    ledger = _dataset_ledger(curator, inp, output, ledger)
    publication = (_parse_publication(d["publication"], "publication", Publication())
                   if "publication" in d else Publication())
    plan = _parse_plan(d["plan"]) if "plan" in d else PlanSpec()
    raw_tables = d.get("tables")
    if not isinstance(raw_tables, list) or not raw_tables:
        got = "nothing" if raw_tables is None else f"{_show(raw_tables)} ({_tname(raw_tables)})"
        _fail("tables", f"a release needs at least one [[tables]] entry; got {got}.",
              'add [[tables]] with name = "...", measures = [...], by = [...] and a mechanism.')
    tables: list[TableSpec] = []
    names: dict[str, int] = {}
    for i, raw in enumerate(raw_tables):
        table = _parse_table(raw, i, base, release, inp, domains, hierarchies, publication)
        if table.name.lower() in names:
            k = names[table.name.lower()]
            case = ("" if tables[k].name == table.name else
                    f" ({tables[k].name!r}, in another letter case: table names name the "
                    "output files and the per-record report's columns, which case-insensitive "
                    "file systems and Spark do not tell apart)")
            _fail(f"tables[{i}].name", f"table name {table.name!r} is already used by "
                                       f"tables[{k}]{case}.",
                  "give every table a unique name (it names the output files).")
        names[table.name.lower()] = i
        tables.append(table)
    _check_tables(tables, inp, budget)
    _check_global_round(tables, raw_tables, publication, plan, release.level)
    _check_currencies(tables, budget)
    _check_max_rho(tables, budget, inp, getattr(curator, "max_rho", None))
    _check_input_rules(tables, inp, budget, raw_tables)
    _check_report_names(tables, inp, ledger)
    if inp.mode == "author":
        _check_declared_columns(tables, inp)
    _check_paths(output, inp, hierarchies, d.get("domains") or {}, domains, tables, base, path)
    return ReleaseSpec(path=path, sha256=sha256, raw=copy.deepcopy(dict(data)), release=release,
                       input=inp, domains=domains, hierarchies=hierarchies, budget=budget,
                       seed=seed, output=output, publication=publication, plan=plan,
                       tables=tuple(tables), ledger=ledger)
