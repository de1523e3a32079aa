"""Test helper: a curator configuration for author-mode specs (docs/reference/curator.md)."""

from __future__ import annotations

import io
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl
from _specs import author_input, release_spec, table

#: Polars dtype -> the configuration's dtype name (a test's frame decides its declared schema).
_NAMES = {pl.String: "String", pl.Categorical: "String", pl.Boolean: "Boolean",
          pl.Int8: "Int8", pl.Int16: "Int16", pl.Int32: "Int32", pl.Int64: "Int64",
          pl.UInt8: "UInt8", pl.UInt16: "UInt16", pl.UInt32: "UInt32", pl.UInt64: "UInt64",
          pl.Float32: "Float32", pl.Float64: "Float64", pl.Date: "Date"}
_INT = re.compile(r"^-?(0|[1-9][0-9]*)$")


def _dtype_name(dtype: pl.DataType) -> str | None:
    if isinstance(dtype, pl.Datetime):
        return "Datetime"
    if isinstance(dtype, pl.Enum):
        return "String"
    if isinstance(dtype, pl.Decimal):
        return "Float64"
    return _NAMES.get(dtype.base_type() if hasattr(dtype, "base_type") else dtype)


def schema_of(frame: pl.DataFrame, **more: str) -> dict[str, str]:
    """A declared schema (column -> dtype name) from a test's own frame, plus ``more``."""
    out = {c: n for c, t in frame.schema.items() if (n := _dtype_name(t)) is not None}
    return {**out, **more}


def derive_schema(path: Path) -> dict[str, str]:
    """The declared schema a test's dataset implies: its files' columns, then partition levels.

    File columns take the first file's dtype holding them (a column of nulls only is skipped
    unless no file has it typed: then ``String``). Hive partition levels (``name=value``
    folders) are ``Int64`` when every value is a plain integer, else ``String``; a level
    also stored in the files keeps the files' dtype. Empty when ``path`` does not exist.
    """
    if not path.exists():
        return {}
    files = ([path] if not path.is_dir() else
             sorted((Path(r) / f for r, _, fs in os.walk(path) for f in fs
                     if f.endswith(".parquet")), key=lambda p: p.as_posix()))
    out: dict[str, str] = {}
    untyped: list[str] = []
    levels: dict[str, list[str]] = {}
    for f in files:
        try:
            schema = pl.scan_parquet(f, hive_partitioning=False).collect_schema()
        except Exception:  # noqa: BLE001 - a test's deliberately broken file
            continue
        for c, t in schema.items():
            name = _dtype_name(t)
            if name is not None:
                out.setdefault(c, name)
            elif c not in untyped:
                untyped.append(c)
        if path.is_dir():
            for part in f.relative_to(path).parts[:-1]:
                if "=" in part:
                    k, v = part.split("=", 1)
                    levels.setdefault(k, []).append(v)
    for c in untyped:
        out.setdefault(c, "String")
    for k, values in levels.items():
        real = [v for v in values if v != "__HIVE_DEFAULT_PARTITION__"]
        out.setdefault(k, "Int64" if real and all(_INT.fullmatch(v) for v in real)
                       else "String")
    return out


def write_curator(folder: Path, datasets: Mapping[str, Path | str], *,
                  public: Sequence[Path] = (), root: Path | str = "releases",
                  extra: str = "", name: str = "curator.toml",
                  seeded: bool = True,
                  schemas: Mapping[str, Mapping[str, str]] | None = None,
                  dataset_extra: Mapping[str, str] | None = None) -> Path:
    """Write ``folder/curator.toml``: datasets (name -> path), public folders, output root.

    Relative paths are relative to ``folder``. ``seeded``: ``[testing] seeded_author_runs``
    (author-mode test specs set seeds to compare neighbouring runs). ``schemas``: dataset
    name -> declared schema (column -> dtype name); a dataset not in it gets the schema its
    files imply (`derive_schema`, read when the helper is called: write the data first), as
    author mode requires a declared schema. ``{}`` declares none. ``dataset_extra``: more
    lines of a dataset's table (e.g. ``'unit = "firm"'``, ``'ledger = "..."'``), by name.
    Returns the file's path.
    """
    lines = []
    for ds, path in datasets.items():
        lines += [f"[datasets.{ds}]", f"path = {Path(path).as_posix()!r}".replace("'", '"')]
        given = (schemas or {}).get(ds)
        full = Path(path) if Path(path).is_absolute() else folder / path
        schema = dict(given) if given is not None else derive_schema(full)
        if schema:
            decl = ", ".join(f'"{c}" = "{t}"' for c, t in schema.items())
            lines.append(f"schema = {{ {decl} }}")
        lines += [(dataset_extra or {}).get(ds, ""), ""]
    folders = ", ".join(f'"{Path(p).as_posix()}"' for p in public)
    lines += ["[public]", f"folders = [{folders}]", "", "[output]",
              f'root = "{Path(root).as_posix()}"', "", extra]
    if seeded:
        lines += ["", "[testing]", "seeded_author_runs = true", ""]
    file = folder / name
    file.write_text("\n".join(lines), encoding="utf-8")
    return file


#: The public table columns that carry noise (everything else must match on neighbours).
NOISY = ("estimate", "lower", "upper", "cv")


def assert_public_alike(pubs: Sequence[Path], table: str = "t.parquet") -> list[pl.DataFrame]:
    """Two neighbouring servers' public folders: the same files, equal but for the noise.

    The same file names; ``table`` equal once the noisy columns are dropped; every other file
    byte for byte, but Parquet tables, HTML and the manifest (times and output hashes).
    Returns the two ``table`` frames.
    """
    names = [sorted(p.relative_to(pub).as_posix() for p in pub.rglob("*") if p.is_file())
             for pub in pubs]
    assert names[0] == names[1], names
    tables = [pl.read_parquet(pub / table) for pub in pubs]
    assert tables[0].drop(NOISY, strict=False).equals(tables[1].drop(NOISY, strict=False))
    for name in names[0]:
        if name.endswith((".parquet", "manifest.json", ".html", ".csv")):
            continue  # tables compared above; the manifest holds times and output hashes
        assert (pubs[0] / name).read_bytes() == (pubs[1] / name).read_bytes(), name
    return tables


#: The spec of review R15's server runs (author mode: a county table and a count, one dataset
#: ``cbp``, read from ``s.toml`` beside ``curator.toml``).
R15_SPEC = release_spec(
    table("t", ["state"], '{ family = "gaussian", sigma = 3 }', measures=["v"]),
    table("n", ["state"], kind="count"),
    name="r15", input_table=author_input("v = [0, 100]", source='dataset = "cbp"', unit=None),
    domains={"state": ["01", "02"]}, seed=7, output=False)


def run_cli(root: Path, command: str) -> tuple[int, str, str]:
    """``tabdp <command> s.toml --curator curator.toml`` run in ``root`` (the working folder).

    ``run`` adds ``--overwrite --test-seed``. Returns the exit code, stdout and stderr. The
    caller changes into ``root`` first (``monkeypatch.chdir``).
    """
    from tabdp import cli

    out, err = io.StringIO(), io.StringIO()
    args = [command, "s.toml", "--curator", "curator.toml"]
    if command == "run":
        args += ["--overwrite", "--test-seed"]
    code = cli.main(args, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def cli_as_author(root: Path, monkeypatch: object, *args: str) -> tuple[int, str, str]:
    """``tabdp <args>`` run in ``root`` with ``TABDP_CURATOR`` set to its curator.toml.

    As an author runs it under a server's configuration (no ``--curator``). Returns the exit
    code, stdout and stderr.
    """
    from tabdp import cli

    monkeypatch.chdir(root)  # type: ignore[attr-defined]
    monkeypatch.setenv("TABDP_CURATOR", str(root / "curator.toml"))  # type: ignore[attr-defined]
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(args), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def not_found(command: str, spec: str = "<SPEC>") -> tuple[int, str, str]:
    """What ``tabdp <command>`` shows for a spec path ``spec`` it does not read (as written)."""
    return (2, "", f"tabdp {command}: spec/usage error: release spec file not found: "
                   f"{spec!r}.\nHint: fix the path to the release.toml (relative paths "
                   "start from the current folder).\n")


def count_data_locations(monkeypatch: object) -> list[object]:
    """Record each call of ``curator_config.data_locations`` (a dataset walked) in a list."""
    from tabdp.release import curator_config

    calls: list[object] = []
    locations = curator_config.data_locations

    def counted(path: object) -> list[Path]:
        calls.append(path)
        return locations(path)  # type: ignore[arg-type]

    monkeypatch.setattr(curator_config, "data_locations", counted)  # type: ignore[attr-defined]
    return calls


def warn_from_another_thread(monkeypatch: object, text: str) -> None:
    """From now on, while a ledger opens (its tree checked), another thread warns ``text``.

    A `PrivacyWarning`, warned and joined before the check itself runs (the warning of another
    session of the same process, perhaps about its own data).
    """
    import threading
    import warnings

    from tabdp.exceptions import PrivacyWarning
    from tabdp.privacy import lifetime

    check = lifetime._check_tree

    def check_and_warn(root: Path) -> None:
        other = threading.Thread(target=lambda: warnings.warn(text, PrivacyWarning,
                                                              stacklevel=1))
        other.start()
        other.join()
        check(root)

    monkeypatch.setattr(lifetime, "_check_tree", check_and_warn)  # type: ignore[attr-defined]
