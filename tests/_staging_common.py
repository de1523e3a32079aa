"""Helpers shared by the staging suites (carried entries, notices).

A CLI call, a folder's names, a curator-mode spec and an author-mode server of one count table
by state (their data is the ``staging_data`` fixture of tests/release/conftest.py).
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import polars as pl

import tabdp
from tabdp import cli

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _curator import schema_of, write_curator  # noqa: E402
from _specs import AUTHOR_STATE_COUNT_SPEC, STATE_COUNT_SPEC  # noqa: E402

HIER = Path(tabdp.__file__).resolve().parents[1] / "data" / "hierarchies"


def run(*args: str) -> tuple[int, str, str]:
    """``tabdp ARGS`` in this process: the exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(args), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def names(folder: Path) -> set[str]:
    """The names of a folder's entries."""
    return {p.name for p in folder.iterdir()}


def curator_spec(folder: Path, data: Path) -> str:
    """The curator-mode state count spec (`STATE_COUNT_SPEC`) written in ``folder``."""
    path = folder / "s.toml"
    path.write_text(STATE_COUNT_SPEC.format(data=data.as_posix(), hier=HIER.as_posix()),
                    encoding="utf-8")
    return str(path)


def server(root: Path, data: Path) -> Path:
    """An author-mode server in ``root``: the dataset, a public folder, an output root."""
    (root / "data").mkdir(parents=True)
    (root / "data" / "d.parquet").write_bytes(data.read_bytes())
    (root / "meta").mkdir()
    (root / "meta" / "geography.csv").write_bytes((HIER / "geography.csv").read_bytes())
    write_curator(root, {"cbp": "data/d.parquet"}, public=[root / "meta"], root="releases",
                  schemas={"cbp": schema_of(pl.read_parquet(data))})
    (root / "s.toml").write_text(AUTHOR_STATE_COUNT_SPEC, encoding="utf-8")
    return root / "releases" / "rel"
