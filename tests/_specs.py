"""TOML blocks and the spec writer shared by the release suites (CLI, progress, publish, ...).

``from _specs import hierarchies`` (the tests folder is on ``sys.path``, see conftest.py).
A test that writes its own small release spec builds it with `release_spec` and `table`,
writes it beside its data with `write_release` and runs it with `run_quiet`.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl

import tabdp

#: The bundled public code lists (geography, NAICS).
HIER = Path(tabdp.__file__).resolve().parents[1] / "data" / "hierarchies"


def hierarchies(*names: str, files: Mapping[str, str] | None = None) -> str:
    """The ``[hierarchies.<name>]`` tables of the bundled lists ``names`` (none: both).

    Args:
        *names: ``"geo"`` (state > county) and/or ``"industry"`` (naics2 > naics3 > naics4 >
            naics6), in order.
        files: A hierarchy's file in place of the bundled one, by name (e.g. ``{"geo":
            "geo.csv"}``, a test's own code list with the same levels).

    Returns:
        TOML text.
    """
    file = {"geo": f"{HIER.as_posix()}/geography.csv", "industry": f"{HIER.as_posix()}/naics.csv",
            **(files or {})}
    blocks = {"geo": f"""[hierarchies.geo]
file = "{file["geo"]}"
levels = ["state", "county"]
""", "industry": f"""[hierarchies.industry]
file = "{file["industry"]}"
levels = ["naics2", "naics3", "naics4", "naics6"]
"""}
    return "\n".join(blocks[n] for n in names or ("geo", "industry"))


def table(name: str, by: Sequence[str], mechanism: str | None = None, *,
          measures: Sequence[str] | None = None, kind: str | None = None,
          extra: str = "") -> str:
    """One ``[[tables]]`` block of a release spec.

    Args:
        name: The table's name.
        by: Its ``by`` columns.
        mechanism: Its ``mechanism`` inline table (None: no such line).
        measures: Its ``measures`` (None: no such line; a count table).
        kind: Its ``kind`` (e.g. ``"count"``; None: no such line).
        extra: More lines of the table, after the mechanism (e.g. ``grid = 1.0``, a
            ``[[tables.rollups]]`` block).

    Returns:
        TOML text.
    """
    lines = ["[[tables]]", f'name = "{name}"']
    if kind is not None:
        lines.append(f'kind = "{kind}"')
    if measures is not None:
        lines.append(f"measures = {json.dumps(list(measures))}")
    lines.append(f"by = {json.dumps(list(by))}")
    if mechanism is not None:
        lines.append(f"mechanism = {mechanism}")
    return "\n".join(lines) + "\n" + (f"{extra}\n" if extra else "")


def rollups(*levels: Sequence[str], direct: bool = False) -> str:
    """The ``[[tables.rollups]]`` blocks of a table, one a level (a table's ``extra``).

    Args:
        *levels: Each rollup's ``by`` columns (``[]``: the national total), in order.
        direct: ``direct = true`` on each (noised from the input, not summed from the table).

    Returns:
        TOML text (no trailing newline, as `table` adds one).
    """
    return "\n".join(f"[[tables.rollups]]\nby = {json.dumps(list(by))}"
                     + ("\ndirect = true" if direct else "") for by in levels)


def release_spec(*tables: str, name: str = "r", path: str = "d.parquet",
                 release_extra: str = "", input_extra: str = "",
                 domains: Mapping[str, Sequence[object]] | None = None, budget: str = "",
                 seed: int | None = None, sections: str = "",
                 public: str = "out/public", confidential: str = "out/confidential",
                 input_table: str | None = None, output: bool = True) -> str:
    """A release spec reading ``path``, publishing under ``out/``, of ``tables`` (`table`).

    Args:
        *tables: The ``[[tables]]`` blocks, in order.
        name: ``release.name``.
        path: ``input.path``.
        release_extra: More lines of ``[release]`` (e.g. ``delta = 1e-9``).
        input_extra: More lines of ``[input]`` (e.g. ``unit = "id"``).
        domains: ``[domains]``: column -> its values (None: no such section).
        budget: The lines of ``[budget]`` (empty: no such section).
        seed: ``[randomness] seed`` (None: no such section).
        sections: More sections, before ``[output]`` (e.g. `hierarchies`, ``[plan]``).
        public: ``output.public``.
        confidential: ``output.confidential``.
        input_table: The whole ``[input]`` table, in place of ``path`` and ``input_extra``
            (e.g. `author_input`).
        output: False: no ``[output]`` section (an author-mode spec: the curator's root).

    Returns:
        TOML text (outputs under ``out/public`` and ``out/confidential`` unless told).
    """
    parts = [f'[release]\nname = "{name}"\n']
    if release_extra:
        parts.append(f"{release_extra}\n")
    if input_table is not None:
        parts.append(input_table if input_table.endswith("\n") else f"{input_table}\n")
    else:
        parts.append(f'[input]\npath = "{path}"\n')
    if input_extra:
        parts.append(f"{input_extra}\n")
    if domains is not None:
        parts.append("[domains]\n" + "".join(f"{c} = {json.dumps(list(v))}\n"
                                            for c, v in domains.items()))
    if budget:
        parts.append(f"[budget]\n{budget}\n")
    if seed is not None:
        parts.append(f"[randomness]\nseed = {seed}\n")
    if sections:
        parts.append(sections if sections.endswith("\n") else f"{sections}\n")
    if output:
        parts.append(f'[output]\npublic = "{public}"\nconfidential = "{confidential}"\n')
    return "".join(parts + list(tables))


def write_release(folder: Path, data: pl.DataFrame, spec: str) -> Path:
    """Write ``data`` to ``folder/d.parquet`` and ``spec`` to ``folder/s.toml`` (made if new).

    Returns:
        The spec's path.
    """
    folder.mkdir(parents=True, exist_ok=True)
    data.write_parquet(folder / "d.parquet")
    file = folder / "s.toml"
    file.write_text(spec, encoding="utf-8")
    return file


def run_quiet(spec: Path) -> None:
    """``tabdp run --test-seed --quiet spec``; asserts it exits 0 (else shows its stderr)."""
    from tabdp import cli

    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["run", "--test-seed", "--quiet", str(spec)], stdout=out, stderr=err)
    assert code == 0, err.getvalue()


def one_table_spec(mechanism: str, *, name: str = "r", seed: int | None = None,
                   table_extra: str = "") -> str:
    """A release of one sum table ``t`` of ``x`` by ``c`` (domain a, b) from ``d.parquet``.

    Args:
        mechanism: The table's ``mechanism`` inline table, e.g. ``{ family = "gaussian",
            sigma = 1.0 }``.
        name: ``release.name``.
        seed: ``[randomness] seed`` (None: no such section).
        table_extra: More lines of the table (e.g. ``grid = 1.0``).

    Returns:
        TOML text (outputs under ``out/``).
    """
    return release_spec(table("t", ["c"], mechanism, measures=["x"], extra=table_extra),
                        name=name, domains={"c": ["a", "b"]}, seed=seed)


def author_input(bounds: str, *, source: str = 'dataset = "d"', unit: str | None = "estab_id",
                 nulls: str = "drop", negatives: str = "zero", nonfinite: str = "drop",
                 unit_nulls: str | None = "drop", template: bool = False) -> str:
    """The ``[input]`` table of an author-mode spec (``mode = "author"``).

    Args:
        bounds: The inside of the ``bounds`` inline table, e.g. ``'v = [0, 100]'``.
        source: The line(s) naming the data, e.g. ``'dataset = "cbp"'``.
        unit: ``input.unit`` (None: no such line).
        nulls: ``input.nulls``.
        negatives: ``input.negatives``.
        nonfinite: ``input.nonfinite``.
        unit_nulls: ``input.unit_nulls`` (None: no such line).
        template: Double the braces, for a spec text that is ``str.format``-ted afterwards.

    Returns:
        TOML text, ending in a newline.
    """
    lines = ["[input]", source, 'mode = "author"']
    if unit is not None:
        lines.append(f'unit = "{unit}"')
    lines += [f'nulls = "{nulls}"', f'negatives = "{negatives}"', f'nonfinite = "{nonfinite}"']
    if unit_nulls is not None:
        lines.append(f'unit_nulls = "{unit_nulls}"')
    lines.append(f"bounds = {{ {bounds} }}")
    text = "\n".join(lines) + "\n"
    return text.replace("{", "{{").replace("}", "}}") if template else text


#: A one-table count release by state with a unit (format with ``data`` and ``hier``, the
#: folder of the bundled code lists): the comparison-kept and staging suites.
STATE_COUNT_SPEC = """
[release]
name = "kept"
[input]
path = "{data}"
unit = "estab_id"
[hierarchies.geo]
file = "{hier}/geography.csv"
levels = ["state", "county"]
[randomness]
seed = 3
[output]
public = "out/public"
confidential = "out/confidential"
[[tables]]
name = "estabs"
kind = "count"
by = ["state"]
mechanism = {{ family = "gaussian", sigma = 2.0 }}
"""


#: An author-mode spec of one count table by state (dataset "cbp", the curator's; seed 5).
AUTHOR_STATE_COUNT_SPEC = """
[release]
name = "rel"
[input]
dataset = "cbp"
mode = "author"
unit = "estab_id"
nulls = "drop"
negatives = "zero"
nonfinite = "drop"
unit_nulls = "drop"
[hierarchies.geo]
file = "geography.csv"
levels = ["state", "county"]
[randomness]
seed = 5
[[tables]]
name = "n"
kind = "count"
by = ["state"]
mechanism = { family = "gaussian", sigma = 2.0 }
"""

#: A ``tabdp`` CLI that is killed (exit 137) at the ``KILL_AT``-th rename of the staging swap
#: (0: never): written to a file and run as a script by the crash tests.
RENAME_KILLER = """
import os, sys, pathlib, traceback
K = int(os.environ["KILL_AT"])
n = [0]
orig = pathlib.Path.rename
def rename(self, target):
    if any(f.filename.endswith("_staging.py") and f.name == "__exit__"
           for f in traceback.extract_stack()):
        n[0] += 1
        if n[0] == K:
            os._exit(137)
    return orig(self, target)
pathlib.Path.rename = rename
from tabdp.cli import main
sys.exit(main(sys.argv[1:]))
"""
