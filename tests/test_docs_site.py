"""The docs site covers the public API, the CLI and the spec, and the code cites only the docs.

Most tests read the Markdown sources (no MkDocs needed). The ``built_site`` tests build the site
with ``mkdocs build --strict`` (skipped without the ``docs`` extra) and check the HTML: no raw
Sphinx roles, no asset loaded from the network, and formulas typeset by the vendored KaTeX in a
headless Chromium cut off the network (skipped without Chromium).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
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
    "tabdp.frame", "tabdp.exceptions", "tabdp.cli", "tabdp.compare", "tabdp.hierarchy",
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


def _fence_errors(text: str) -> list[str]:
    """Fence lines that open or close nothing: a fence is ``` alone or ```<language>."""
    bad, inside = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if not line.startswith("```"):
            continue
        if inside and line.rstrip() == "```":
            inside = False
        elif not inside and re.fullmatch(r"```[\w+-]*\s*", line):
            inside = True
        else:
            bad.append(f"{n}: {line}")
    return bad + (["an unclosed fence at the end"] if inside else [])


def test_code_fences_open_and_close() -> None:
    """Every code block of the docs and the README is closed by a bare fence (rev67w).

    docs/hierarchy.md closed a TOML block with "``` Measured bias": not a closing fence, so
    the site showed the spec and the paragraph after it as one line of inline code.
    """
    assert _fence_errors("```toml\na = 1\n``` text\n") and not _fence_errors("```toml\n```\n")
    bad = {p.name: e for p in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
           if (e := _fence_errors(p.read_text(encoding="utf-8")))}
    assert not bad, bad


# -- the built site ------------------------------------------------------------------------------

#: A Sphinx role as it appears when mkdocstrings leaves it raw (``:meth:`x``` / ``:meth:<code>``).
_RAW_ROLE = re.compile(r":(?:py:)?(?:meth|class|func|data|attr|mod|exc|obj|ref|doc|term):"
                       r"(?:`|<code)")


#: ``mkdocs build --strict`` takes about 40 s of CPU: the tests of the built site run in CI
#: (``make test``, marker ``slow``); the local loop keeps the checks of the sources above
SITE = pytest.mark.slow


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as ``mkdocs build --strict`` writes it (a warning fails the build)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def _docstring_roles() -> list[str]:
    hits = []
    for path in sorted((ROOT / "tabdp").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str)):
                for m in _RAW_ROLE.finditer(node.value.value):
                    hits.append(f"{path.relative_to(ROOT)}:{node.lineno}: {m.group(0)}")
    return hits


@pytest.mark.slow  # CI only: a costly case the local loop leaves out (2-4 s)
def test_docstrings_use_cross_references_not_sphinx_roles() -> None:
    """Docstrings link with ``[`name`][tabdp.path]`` (mkdocstrings), never ``:meth:`name```."""
    assert _RAW_ROLE.search(":meth:`Session.report`") and _RAW_ROLE.search(":class:<code>x")
    hits = _docstring_roles()
    assert not hits, ("Sphinx roles are not rendered by mkdocstrings; write "
                      "[`Name`][tabdp.full.path] (documented) or `name`:\n" + "\n".join(hits))


@SITE
def test_built_site_has_no_raw_roles(built_site: Path) -> None:
    pages = sorted(built_site.rglob("*.html"))
    assert len(pages) > 30
    hits = [f"{p.relative_to(built_site)}: {m.group(0)}" for p in pages
            for m in _RAW_ROLE.finditer(p.read_text(encoding="utf-8"))]
    assert not hits, hits[:20]
    # the cross-references became links
    api = (built_site / "api" / "tabdp" / "index.html").read_text(encoding="utf-8")
    assert 'href="../../api/tabdp/#tabdp.KeySet.from_data"' in api or \
        'href="#tabdp.KeySet.from_data"' in api


@SITE
def test_built_site_loads_nothing_from_the_network(built_site: Path) -> None:
    """Scripts, stylesheets and fonts are all in the site (links to papers may stay remote)."""
    remote = re.compile(r"<(?:script|link)\b[^>]*\b(?:src|href)=\"(?:https?:)?//[^\"]*\"[^>]*>")
    hits = []
    for page in sorted(built_site.rglob("*.html")):
        for tag in remote.findall(page.read_text(encoding="utf-8")):
            if "<link" in tag and not re.search(r'rel="(?:stylesheet|preconnect|preload)"', tag):
                continue  # a link to another site (rel="canonical" etc.), not an asset
            hits.append(f"{page.relative_to(built_site)}: {tag}")
    assert not hits, hits[:10]
    css = (built_site / "vendor" / "katex" / "katex.min.css").read_text(encoding="utf-8")
    fonts = re.findall(r"url\((fonts/[^)]+)\)", css)
    assert len(fonts) == 20 and all((built_site / "vendor" / "katex" / f).is_file() for f in fonts)
    assert "MIT" in (built_site / "vendor" / "katex" / "LICENSE").read_text(encoding="utf-8")


class _MathText(HTMLParser):
    """Per ``arithmatex`` element: its text (KaTeX's TeX annotation left out) and KaTeX marks."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[dict[str, Any]] = []
        self._depth = 0          # > 0 inside an arithmatex element
        self._skip = 0           # > 0 inside an <annotation>

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if self._depth:
            self._depth += 1
            if tag == "annotation" or self._skip:
                self._skip += 1
            cur = self.elements[-1]
            cur["katex"] |= "katex" in classes
            cur["error"] |= "katex-error" in classes
        elif "arithmatex" in classes:
            self._depth = 1
            self.elements.append({"text": "", "katex": False, "error": False})

    def handle_endtag(self, tag: str) -> None:
        if self._depth:
            self._depth -= 1
            if self._skip:
                self._skip -= 1

    def handle_data(self, data: str) -> None:
        if self._depth and not self._skip:
            self.elements[-1]["text"] += data


def _math_elements(html: str) -> list[dict[str, Any]]:
    parser = _MathText()
    parser.feed(html)
    return parser.elements


_TEX_DELIMITERS = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$\$")


@SITE
@pytest.mark.parametrize("page", ["math/policies/index.html", "math/stable/index.html"])
def test_math_is_typeset_offline_in_chromium(built_site: Path, page: str) -> None:
    """Headless Chromium, cut off the network, typesets every formula of the page with KaTeX."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        import _browser as browser  # tests/_browser.py: headless Chromium, test-only
    finally:
        sys.path.remove(str(ROOT / "tests"))
    if browser.find_chromium() is None:
        pytest.skip("no Chromium (apt-get install chromium, or set TABDP_CHROMIUM)")
    path = built_site / page
    # before the scripts run, every formula is raw TeX: what the check below must not find
    raw = _math_elements(path.read_text(encoding="utf-8"))
    assert len(raw) >= 10
    assert all(_TEX_DELIMITERS.search(e["text"]) and not e["katex"] for e in raw)
    dom = browser.dump_dom(path, offline=True)
    shown = _math_elements(dom)
    assert len(shown) == len(raw)
    untypeset = [e["text"][:80] for e in shown if not e["katex"] or e["error"]
                 or _TEX_DELIMITERS.search(e["text"])]
    assert not untypeset, untypeset[:5]
    assert "katex-display" in dom  # display formulas too


def test_cli_module_usage_is_one_code_block_naming_every_subcommand() -> None:
    """The ``tabdp.cli`` docstring's usage lines render as one code block (rev67w).

    A paragraph in the middle of the block, with no blank line before the next usage lines,
    made the API reference show ``tabdp run``, ``demo`` and ``ledger`` as running text; the
    block left out ``tabdp compare``.
    """
    import tabdp.cli

    lines = (tabdp.cli.__doc__ or "").split("Usage::\n\n", 1)[1].splitlines()
    end = next(i for i, line in enumerate(lines) if line and not line.startswith("    "))
    block, rest = lines[:end], lines[end:]
    assert not any(line.startswith("    tabdp ") for line in rest)
    commands = {line.split()[1] for line in block if line.startswith("    tabdp ")}
    assert set(_refgen().cli_subcommands()) <= commands, commands


def test_install_pages_name_every_extra() -> None:
    """README's and Getting started's lists of extras name every extra but ``test`` (rev67w).

    Getting started named neither ``sdc`` nor ``ledger``, the README not ``ledger``.
    """
    import tomllib

    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
                 ["project"]["optional-dependencies"]) - {"test"}
    for page in (ROOT / "README.md", DOCS / "getting-started.md"):
        text = page.read_text(encoding="utf-8")
        listed = text[text.index("Optional extras:"):].split("\n\n", 1)[0]
        assert extras <= set(re.findall(r"`tabdp\[(\w+)\]`", listed)), page.name
