"""Layering of tabdp.noise: the rounding layer imports no law, and no import cycle in the package.

Imports are read from the source (``ast``), module level and inside functions alike: a lazy import
that breaks a cycle at run time still counts as a cycle here.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "tabdp"


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(src: str, name: str, is_pkg: bool, mods: dict[str, Path]) -> set[str]:
    """Modules of tabdp that ``src`` imports (``from a import b``: a.b when it is a module)."""
    pkg = name if is_pkg else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in mods}
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            subs = {f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in mods}
            found |= subs if len(subs) == len(node.names) else subs | ({mod} & mods.keys())
    found.discard(name)
    return found


def _graph(prefix: str) -> dict[str, set[str]]:
    mods = _modules()
    return {m: {d for d in _imports(p.read_text(), m, p.name == "__init__.py", mods)
                if d.startswith(prefix)}
            for m, p in mods.items() if m.startswith(prefix)}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_noise_package_has_no_import_cycle() -> None:
    """No cycle among tabdp.noise modules (as were _base <-> exact, stable <-> _stable_arb)."""
    assert _cycles(_graph("tabdp.noise")) == []


def test_rounding_layer_imports_no_law() -> None:
    """tabdp.noise.rounding depends on itself and tabdp's utilities only, never on a law."""
    graph = _graph("tabdp.noise")
    bad = {m: sorted(d for d in deps if not d.startswith("tabdp.noise.rounding"))
           for m, deps in graph.items() if m.startswith("tabdp.noise.rounding")}
    assert not any(bad.values()), bad


def test_cycle_check_has_power() -> None:
    """The detector finds a two-module cycle and a lazy (function-level) import."""
    mods = {"tabdp.a": Path("a.py"), "tabdp.b": Path("b.py")}
    a = _imports("def f():\n    from tabdp import b\n", "tabdp.a", False, mods)
    b = _imports("import tabdp.a\n", "tabdp.b", False, mods)
    assert _cycles({"tabdp.a": a, "tabdp.b": b}) == [["tabdp.a", "tabdp.b"]]
