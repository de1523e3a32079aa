"""The docs site covers the public API, the CLI and the spec, and the code cites only the docs.

These tests read the Markdown sources (no MkDocs needed); ``.ci/docs`` builds the site itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

#: Modules whose ``__all__`` is public API; every name in them must be in the API reference.
PUBLIC_MODULES = (
    "tabdp", "tabdp.mechanisms", "tabdp.noise", "tabdp.privacy", "tabdp.privacy.approx",
    "tabdp.privacy.conversions", "tabdp.privacy.accounting", "tabdp.release",
    "tabdp.release.spec", "tabdp.sensitivity", "tabdp.planning", "tabdp.calibrate",
    "tabdp.datasets", "tabdp.datasets.synth", "tabdp.plotting", "tabdp.report", "tabdp.rng",
    "tabdp.frame", "tabdp.exceptions", "tabdp.cli", "tabdp.compare",
)
_DIRECTIVE = re.compile(r"^:::\s+([\w.]+)\s*$", re.MULTILINE)


def _refgen() -> ModuleType:
    name = "tabdp_docs_refgen"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, DOCS / "_gen" / "refgen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _resolve(path: str) -> Any:
    """The object a ``:::`` path names, as mkdocstrings reads it (attributes before modules).

    ``tabdp.calibrate`` is the function (the package attribute), not the submodule.
    """
    parts = path.split(".")
    obj: Any = importlib.import_module(parts[0])
    for i, attr in enumerate(parts[1:], 1):
        try:
            obj = getattr(obj, attr)
        except AttributeError:  # a submodule not loaded yet, or one shadowed by a function
            try:
                obj = importlib.import_module(".".join(parts[: i + 1]))
            except ImportError:
                obj = getattr(importlib.import_module(".".join(parts[:i])), attr)
    return obj


def _documented() -> tuple[set[str], list[Any]]:
    """The ``::: path`` directives of the API pages, and the objects they resolve to."""
    paths = set()
    for page in (DOCS / "api").glob("*.md"):
        paths |= set(_DIRECTIVE.findall(page.read_text(encoding="utf-8")))
    return paths, [_resolve(p) for p in sorted(paths)]


def test_every_public_name_is_in_the_api_reference() -> None:
    """Each name of a public ``__all__`` is rendered by a ``:::`` directive (path or object)."""
    paths, objects = _documented()
    missing = []
    for mod_name in PUBLIC_MODULES:
        module = importlib.import_module(mod_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if f"{mod_name}.{name}" in paths or any(o is obj for o in objects):
                continue
            missing.append(f"{mod_name}.{name}")
    assert not missing, ("public names missing from docs/api/*.md (add a `::: path` line): "
                         f"{missing}")


def test_api_directives_resolve_and_pages_are_in_the_nav() -> None:
    """Every directive names a real object and every API page is reachable from the nav."""
    paths, _ = _documented()          # _resolve raises for a directive that names nothing
    assert "tabdp.Session" in paths and "tabdp.mechanisms.Gaussian" in paths
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in (DOCS / "api").glob("*.md"):
        assert f"api/{page.name}" in nav, f"docs/api/{page.name} is not in the mkdocs.yml nav"


def test_coverage_check_can_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """A public name without a directive is reported."""
    import tabdp.rng

    monkeypatch.setattr(tabdp.rng, "__all__", [*tabdp.rng.__all__, "_undocumented_probe"])
    monkeypatch.setattr(tabdp.rng, "_undocumented_probe", object(), raising=False)
    with pytest.raises(AssertionError, match="tabdp.rng._undocumented_probe"):
        test_every_public_name_is_in_the_api_reference()


def test_cli_reference_has_every_subcommand() -> None:
    """The CLI reference shows every subcommand's help and every option."""
    from tabdp.cli import _parser

    refgen = _refgen()
    text = refgen.cli_reference()
    commands = refgen.cli_subcommands()
    assert set(commands) >= {"validate", "plan", "run", "demo"}
    for name in commands:
        assert f"## `tabdp {name}`" in text
        assert f"usage: tabdp {name}" in text
    for action in _parser()._actions:
        for opt in action.option_strings:
            assert opt in text


def test_spec_reference_has_every_key() -> None:
    """The spec reference lists every accepted key and every mechanism family."""
    from tabdp.release.spec import MECHANISM_FAMILIES, SPEC_KEYS

    text = _refgen().spec_reference()
    for path, keys in SPEC_KEYS.items():
        for key in keys:
            assert f"`{key}`" in text, (path, key)
    for family, cls in MECHANISM_FAMILIES.items():
        assert f'`"{family}"`' in text and f"`{cls}`" in text


def test_spec_reference_detects_drift(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key the parser accepts but the schema does not describe fails the generator."""
    from tabdp.release import spec

    refgen = _refgen()
    keys = dict(spec.SPEC_KEYS)
    keys["input"] = (*keys["input"], "undocumented_key")
    monkeypatch.setattr(spec, "SPEC_KEYS", keys)
    with pytest.raises(refgen.ReferenceDriftError, match="undocumented_key"):
        refgen.spec_reference()


def test_parser_uses_spec_keys() -> None:
    """The parser accepts the keys of ``SPEC_KEYS`` and refuses others."""
    from tabdp.exceptions import SpecError
    from tabdp.release.spec import SPEC_KEYS, parse_spec

    base = {"release": {"name": "x"}, "input": {"path": "in.parquet"},
            "output": {"public": "pub", "confidential": "conf"},
            "tables": [{"name": "t", "measures": ["m"], "by": [],
                        "mechanism": {"family": "gaussian", "sigma": 1.0}}]}
    parse_spec(base, base_dir=Path("/tmp"))
    assert "nonfinite" in SPEC_KEYS["input"]
    bad = {**base, "input": {"path": "in.parquet", "colour": "red"}}
    with pytest.raises(SpecError, match="colour"):
        parse_spec(bad, base_dir=Path("/tmp"))


def test_code_cites_the_docs_not_outside_files() -> None:
    """No comment, docstring or docs page cites files that are not in the repository."""
    pattern = re.compile(r"MATH\.md|seeds/|\bseeds? 00\d", re.IGNORECASE)
    hits = []
    files = [*(ROOT / "tabdp").rglob("*.py"), *DOCS.rglob("*.md"), ROOT / "README.md"]
    for path in sorted(files):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not hits, "cite docs/math/*.md instead:\n" + "\n".join(hits[:20])


def test_docs_math_pointers_exist() -> None:
    """Every ``docs/<page>.md`` the code points to exists (and its § section, when given)."""
    pointer = re.compile(r"docs/((?:math/)?[\w-]+\.md)(?:\s*§\s*(\d+(?:\.\d+)?))?")
    bad = []
    for path in sorted((ROOT / "tabdp").rglob("*.py")):
        for page, section in pointer.findall(path.read_text(encoding="utf-8")):
            target = DOCS / page
            if not target.is_file():
                bad.append(f"{path.name}: docs/{page}")
            elif section and not re.search(rf"^#+ {re.escape(section)}\.? ",
                                           target.read_text(encoding="utf-8"), re.MULTILINE):
                bad.append(f"{path.name}: docs/{page} §{section}")
    assert not bad, f"pointers to missing docs pages or sections: {sorted(set(bad))}"


def test_every_page_is_in_the_nav() -> None:
    """Every Markdown page of docs/ (outside the generator's folder) is reachable from the nav."""
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = [p.relative_to(DOCS).as_posix() for p in sorted(DOCS.rglob("*.md"))
             if not p.relative_to(DOCS).as_posix().startswith("_gen/")]
    missing = [p for p in pages if f": {p}" not in nav]
    assert pages and not missing, f"pages missing from the mkdocs.yml nav: {missing}"
