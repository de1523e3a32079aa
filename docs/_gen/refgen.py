"""Generators of the reference pages that must not drift from the code.

* :func:`spec_reference` renders the TOML spec reference from :data:`tabdp.release.spec.SPEC_KEYS`
  (the table of keys the parser accepts), the schema in the docstring of
  :mod:`tabdp.release.spec` (one commented line per key) and :data:`MECHANISM_FAMILIES` (each
  family's constructor parameters, read from its signature).
* :func:`cli_reference` renders every subcommand's ``--help`` from the argparse parser of
  :mod:`tabdp.cli`.

Both raise :class:`ReferenceDriftError` when the code and its documentation disagree (a key the
parser accepts that the schema does not describe, or the reverse), which fails
``mkdocs build --strict``. The hook ``docs/_gen/hooks.py`` substitutes their output for the
markers ``<!-- tabdp:spec-reference -->`` and ``<!-- tabdp:cli-reference -->``.
"""

from __future__ import annotations

import argparse
import inspect
import re
from collections.abc import Iterator

__all__ = ["ReferenceDriftError", "schema_sections", "spec_reference", "cli_reference",
           "cli_subcommands"]


class ReferenceDriftError(RuntimeError):
    """The spec schema in the docstring and the parser's table of keys disagree."""


_HEADER = re.compile(r"^\s*\[\[?([A-Za-z_.]+)\]\]?")
_KEY = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=")


def _schema_lines() -> list[str]:
    from tabdp.release import spec

    doc = inspect.getdoc(spec) or ""
    start = doc.index("The TOML schema")
    lines = doc[start:].split("::", 1)[1].splitlines()
    base = min(len(ln) - len(ln.lstrip()) for ln in lines if ln.strip())
    return [ln[base:] for ln in lines]


def _section_path(header: str) -> str:
    """``tables.rollups`` -> ``tables[].rollups[]``; ``hierarchies.geo`` -> ``hierarchies.*``."""
    parts = header.split(".")
    if parts[0] == "tables":
        return "tables[]" + "".join(f".{p}[]" for p in parts[1:])
    if parts[0] in ("hierarchies", "domains") and len(parts) > 1:
        return f"{parts[0]}.*"
    return header


def schema_sections() -> dict[str, list[tuple[str, list[str]]]]:
    """The documented schema: section path -> [(key, its commented lines)], in order.

    Returns:
        Each ``[section]`` of the schema docstring with its keys; a key's lines are the one that
        sets it plus the indented comment lines that continue it.
    """
    out: dict[str, list[tuple[str, list[str]]]] = {}
    current: str | None = None
    for raw in _schema_lines():
        line = raw.rstrip()
        if not line.strip():
            continue
        head = _HEADER.match(line)
        if head and not _KEY.match(line):
            current = _section_path(head.group(1))
            out.setdefault(current, [])
            continue
        if current is None:
            continue
        key = _KEY.match(line)
        indent = len(line) - len(line.lstrip())
        if key and indent == 0:
            out[current].append((key.group(1), [line]))
        elif out[current]:
            out[current][-1][1].append(line)
    return out


def _check(documented: dict[str, list[tuple[str, list[str]]]]) -> None:
    from tabdp.release.spec import SPEC_KEYS

    problems = []
    for path, keys in SPEC_KEYS.items():
        if path == "":
            have = {p.split(".")[0].removesuffix("[]") for p in documented}
        elif path in documented:
            subtables = {p[len(path) + 1:].removesuffix("[]")  # keys with a [[sub-table]]
                         for p in documented if p.startswith(path + ".")}
            have = {k for k, _ in documented[path]} | subtables
            extra = sorted(have - set(keys))
            if extra:
                problems.append(f"[{path}] documents keys the parser refuses: {extra}")
        else:  # an inline table, described on its parent's line(s)
            parent, _, name = path.rpartition(".")
            lines = [ln for k, ls in documented.get(parent, []) if name in ("*", k) for ln in ls]
            if parent == "domains":
                lines = [ln for _, ls in documented.get("domains", []) for ln in ls]
            text = "\n".join(lines)
            have = {k for k in keys if re.search(rf"\b{k}\b", text)}
        missing = [k for k in keys if k not in have]
        if missing:
            problems.append(f"[{path}] accepts keys the schema does not describe: {missing}")
    for path in documented:
        if path not in SPEC_KEYS and path != "domains":
            problems.append(f"the schema documents a section [{path}] the parser does not accept")
    if problems:
        raise ReferenceDriftError("spec reference out of date with tabdp/release/spec/:\n"
                                  + "\n".join(problems))


def _title(path: str) -> str:
    if path.endswith("[]"):
        return f"[[{path.replace('[]', '')}]]"
    return f"[{path.replace('.*', '.<name>')}]"


def _mechanism_rows() -> Iterator[str]:
    from tabdp import mechanisms
    from tabdp.release.spec import MECHANISM_FAMILIES

    yield "| `family` | class | parameters (keys of the `mechanism` table besides `family`) |"
    yield "|---|---|---|"
    for family, cls_name in MECHANISM_FAMILIES.items():
        cls = getattr(mechanisms, cls_name)
        params = [p for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
                  if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        shown = ", ".join(f"`{p.name}`" if p.default is p.empty else f"`{p.name}` = `{p.default!r}`"
                          for p in params)
        yield (f'| `"{family}"` | [`{cls_name}`](../api/mechanisms.md#tabdp.mechanisms.{cls_name})'
               f" | {shown} |")


def spec_reference() -> str:
    """Markdown of the spec reference (checked against the parser first).

    Returns:
        One section per spec table: the accepted keys and the schema's description of each,
        then the mechanism families with their parameters.

    Raises:
        ReferenceDriftError: The schema docstring and ``SPEC_KEYS`` disagree.
    """
    from tabdp.release.spec import CALIBRATION_FAMILIES, SPEC_KEYS

    documented = schema_sections()
    _check(documented)
    out = ["Every key a spec accepts, by table; any other key is refused before data is read. "
           "This page is generated from `tabdp.release.spec.SPEC_KEYS` (the table the parser "
           "uses) and the schema in the docstring of `tabdp.release.spec`; the build fails when "
           "they disagree.", ""]
    out += ["## Top level", "", "Tables: " + ", ".join(f"`{k}`" for k in SPEC_KEYS[""]) + ".", ""]
    for path, keys in SPEC_KEYS.items():
        if path == "":
            continue
        out += [f"## `{_title(path)}`", ""]
        entries = dict(documented.get(path, []))
        out.append("Keys: " + ", ".join(f"`{k}`" for k in keys) + ".")
        out.append("")
        if entries:
            out.append("```toml")
            for key in keys:
                out.extend(entries.get(key, []))
            out.append("```")
        else:
            parent, _, name = path.rpartition(".")
            where = "a domain" if parent == "domains" else f"the `{name}` line"
            out.append(f"An inline table: see {where} of `{_title(parent)}` above.")
        out.append("")
    out += ["## Mechanism families", "",
            "A table's `mechanism = { family = ..., ... }` names a family and the keyword "
            "arguments of its class (read from the constructor's signature):", ""]
    out.extend(_mechanism_rows())
    out += ["", "Families `calibrate.family` accepts: "
            + ", ".join(f'`"{f}"`' for f in CALIBRATION_FAMILIES) + ".", ""]
    return "\n".join(out)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def cli_subcommands() -> list[str]:
    """The subcommands of ``tabdp`` as the parser defines them.

    Returns:
        Their names, in the parser's order.
    """
    from tabdp.cli import _parser

    return list(_subparsers(_parser()))


def cli_reference() -> str:
    """Markdown of the CLI reference: ``tabdp --help`` and every ``tabdp COMMAND --help``.

    Returns:
        One section per command with its help text as argparse prints it.
    """
    import os

    from tabdp import cli

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        parser = cli._parser()
        out = ["Generated from the argparse parser of `tabdp.cli`, so it always matches "
               "`tabdp --help`.", "", "## `tabdp`", "", "```text", parser.format_help().rstrip(),
               "```", ""]
        for name, sub in _subparsers(parser).items():
            out += [f"## `tabdp {name}`", "", "```text", sub.format_help().rstrip(), "```", ""]
        doc = inspect.getdoc(cli) or ""
        if "Exit codes:" in doc:
            out += ["## Exit codes and usage notes", "", "From the docstring of `tabdp.cli`:", "",
                    "```text", doc.strip(), "```", ""]
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    return "\n".join(out)
