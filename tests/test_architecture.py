"""Architecture rules of tabdp/, checked on the source with ``ast`` (see docs/architecture.md).

* No import cycle between modules, counting module-level and function-level imports (imports
  under ``if TYPE_CHECKING:`` are for type checkers only and are not counted).
* A private name (one leading underscore, not a dunder) is used only inside its own package:
  neither imported from another package (``from tabdp.x.y import _z``) nor read as an attribute
  of a module imported from another package (``y._z`` after ``from tabdp.x import y``). A
  subpackage may use the private names of the packages above it (``tabdp._validation`` is
  shared by all of tabdp).
* The same for private modules (a package is a directory under tabdp/): no module imports a
  module of another package whose name has a private part (``tabdp.frame._spark``), however it
  is spelt (``import tabdp.frame._spark``, ``from tabdp.frame import _spark``,
  ``from tabdp.frame._spark import x``); the owning package gives the names a public home.
* No ``types.SimpleNamespace`` stand-ins in tabdp/'s code (issue 29).
* No module of tabdp/release/ is longer than `MAX_RELEASE_LINES` lines; the runner and the
  spec are split by stage.
* One module decides the engine (`tabdp.frame.backends`); the release workflow compares no
  engine name, tests no engine handle (``spark is None``) and asks for its run's engine once
  (`run_engine`); the CLI takes its list of engines from `tabdp.frame.backends`.
* No attribute is planted on a ledger from another package; a replay ledger's report comes
  from one declared, typed `ReportSource`, and its report methods and kept values are typed.
* The individual filter is one pure function (`tabdp.privacy.filter`) that every engine uses.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "tabdp"

#: Private names still crossing a package boundary, to be emptied. Each entry is
#: (importing module, owning module, name). Only the frame layer's use of Session internals is
#: listed: the lead engineer is giving Session public methods for them (issue 17).
ALLOWED_PRIVATE: frozenset[tuple[str, str, str]] = frozenset()

#: Imports of another package's private module: none is left (issue 29 emptied the list; the
#: names shared across packages have public homes: `tabdp.frame.backends` for the backend
#: decision and the Spark helpers, `tabdp.frame.keys.check_cell_keys` for the key set against a
#: schema, `tabdp._numeric.integer_dtype` for the output model's integer dtypes). Keep it empty.
ALLOWED_PRIVATE_MODULES: frozenset[tuple[str, str]] = frozenset()

#: ``SimpleNamespace`` in tabdp/'s code (docstring examples are not code), to be emptied: the
#: Spark engine's budget filter runs on a namespace pretending to be a Session; the one
#: pipeline's pure individual filter removes it (issue 29).
ALLOWED_SIMPLE_NAMESPACE: frozenset[str] = frozenset()

#: The longest a module of tabdp/release/ may be (issue 29: split by stage, not by growth).
MAX_RELEASE_LINES = 1200


@dataclass(frozen=True)
class _Module:
    name: str
    path: Path
    is_package: bool

    @property
    def package(self) -> str:
        """The package the module belongs to (itself for a package's ``__init__``)."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


def _modules() -> dict[str, _Module]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        name = ".".join(parts)
        out[name] = _Module(name, path, is_package)
    return out


MODULES = _modules()


@functools.cache
def _parse(source: str) -> ast.Module:
    """``ast.parse`` of a source text, parsed once per text (the checks only read the trees)."""
    return ast.parse(source)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """The ids of the nodes inside ``if TYPE_CHECKING:`` blocks."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
                (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
                or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")):
            for stmt in node.body:
                skip.update(id(n) for n in ast.walk(stmt))
    return skip


@dataclass(frozen=True)
class _Import:
    module: str  # the module imported from (absolute)
    name: str | None  # the name imported from it (None for ``import a.b``)
    alias: str  # the local name bound
    line: int


def _imports(mod: _Module) -> list[_Import]:
    tree = _parse(mod.path.read_text(encoding="utf-8"))
    skip = _type_checking_nodes(tree)
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.name if mod.is_package else mod.package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            if source == "tabdp" or source.startswith("tabdp."):
                out += [_Import(source, a.name, a.asname or a.name, node.lineno)
                        for a in node.names]
        elif isinstance(node, ast.Import):
            out += [_Import(a.name, None, a.asname or a.name, node.lineno) for a in node.names
                    if a.name == "tabdp" or a.name.startswith("tabdp.")]
    return out


@functools.cache
def _all_imports() -> dict[str, list[_Import]]:
    """Module -> its imports of tabdp, read when a test first asks (not when pytest collects)."""
    return {name: _imports(mod) for name, mod in MODULES.items()}


def _target(imp: _Import) -> str:
    """The module an import loads: ``from a import b`` loads ``a.b`` when that is a module."""
    if imp.name is not None and f"{imp.module}.{imp.name}" in MODULES:
        return f"{imp.module}.{imp.name}"
    return imp.module


def _owner_package(module: str) -> str:
    mod = MODULES.get(module)
    if mod is None:
        return module.rpartition(".")[0]
    return mod.package


def _crosses(importer: str, owner_module: str) -> bool:
    """Whether ``importer`` is outside the package of ``owner_module`` (and not below it)."""
    mine, theirs = MODULES[importer].package, _owner_package(owner_module)
    return not (mine == theirs or mine.startswith(theirs + "."))


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for m, imps in _all_imports().items():
        for imp in imps:
            t = _target(imp)
            if t in MODULES and t != m:
                graph[m].add(t)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _private_uses() -> set[tuple[str, str, str, int]]:
    """(importer, owning module, private name, line) for every use across a package boundary."""
    found = set()
    for m, imps in _all_imports().items():
        module_aliases: dict[str, str] = {}
        for imp in imps:
            t = _target(imp)
            if imp.name is not None and t == imp.module and _private(imp.name) \
                    and _crosses(m, imp.module):
                found.add((m, imp.module, imp.name, imp.line))
            if t in MODULES and (imp.name is not None or imp.alias != imp.module):
                module_aliases[imp.alias] = t
        if not module_aliases:
            continue
        for node in ast.walk(_parse(MODULES[m].path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and _private(node.attr) \
                    and isinstance(node.value, ast.Name) and node.value.id in module_aliases:
                owner = module_aliases[node.value.id]
                if _crosses(m, owner):
                    found.add((m, owner, node.attr, node.lineno))
    return found


def _private_module(name: str) -> bool:
    """Whether a module's dotted name has a private part below ``tabdp``."""
    return any(_private(part) for part in name.split(".")[1:])


def _private_module_imports() -> set[tuple[str, str, int]]:
    """(importer, private module of another package, line) for every such import."""
    found = set()
    for m, imps in _all_imports().items():
        for imp in imps:
            t = _target(imp)
            if t in MODULES and _private_module(t) and _crosses(m, t):
                found.add((m, t, imp.line))
    return found


def _simple_namespaces() -> dict[str, list[int]]:
    """Module -> lines where its code (not its docstrings) names ``SimpleNamespace``."""
    found: dict[str, list[int]] = {}
    for name, mod in MODULES.items():
        for node in ast.walk(_parse(mod.path.read_text(encoding="utf-8"))):
            hit = ((isinstance(node, ast.Name) and node.id == "SimpleNamespace")
                   or (isinstance(node, ast.Attribute) and node.attr == "SimpleNamespace")
                   or (isinstance(node, ast.alias) and node.name == "SimpleNamespace"))
            if hit:
                found.setdefault(name, []).append(getattr(node, "lineno", 0))
    return found


@pytest.mark.slow  # CI only: a costly case the local loop leaves out (3-4 s)
def test_the_parser_sees_the_package() -> None:
    """The scan covers every module and finds the imports it should (guards the test itself)."""
    assert {"tabdp", "tabdp.registry", "tabdp.mechanisms._base", "tabdp.frame._engine"} \
        <= set(MODULES)
    targets = {_target(i) for i in _all_imports()["tabdp.release.spec.tables"]}
    assert {"tabdp.registry", "tabdp.mechanisms", "tabdp.calibrate"} <= targets
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.slow  # import cycles: a whole-package import graph (3.5 s), in CI
def test_no_import_cycles() -> None:
    """No two modules of tabdp/ import each other, directly or through others."""
    cycles = _cycles(_graph())
    assert not cycles, "import cycles between modules:\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


def test_private_names_stay_in_their_package() -> None:
    """No private name crosses a package boundary, but for the commented allow-list."""
    uses = _private_uses()
    bad = sorted(u for u in uses if u[:3] not in ALLOWED_PRIVATE)
    assert not bad, "private names used outside their package:\n" + "\n".join(
        f"{m}:{line} uses {owner}.{name}" for m, owner, name, line in bad)
    stale = ALLOWED_PRIVATE - {u[:3] for u in uses}
    assert not stale, f"allow-list entries no longer needed (remove them): {sorted(stale)}"


def test_private_modules_stay_in_their_package() -> None:
    """No module imports another package's private module, but for the commented allow-list."""
    uses = _private_module_imports()
    bad = sorted(u for u in uses if u[:2] not in ALLOWED_PRIVATE_MODULES)
    assert not bad, "private modules imported from another package:\n" + "\n".join(
        f"{m}:{line} imports {owner}" for m, owner, line in bad)
    stale = ALLOWED_PRIVATE_MODULES - {u[:2] for u in uses}
    assert not stale, f"allow-list entries no longer needed (remove them): {sorted(stale)}"


def test_private_module_imports_are_found_however_spelt(tmp_path: Path) -> None:
    """The scan sees ``import a._b``, ``from a import _b`` and ``from a._b import c``."""
    code = ("import tabdp.frame._spark\nfrom tabdp.frame import _release\n"
            "from tabdp.mechanisms._base import Mechanism\nfrom tabdp.frame import KeySet\n")
    path = tmp_path / "probe.py"
    path.write_text(code, encoding="utf-8")
    imps = _imports(_Module("tabdp.release.probe", path, False))
    MODULES["tabdp.release.probe"] = _Module("tabdp.release.probe", path, False)
    try:
        found = sorted(_target(i) for i in imps
                       if _private_module(_target(i)) and _crosses("tabdp.release.probe",
                                                                   _target(i)))
    finally:
        del MODULES["tabdp.release.probe"]
    assert found == ["tabdp.frame._release", "tabdp.frame._spark", "tabdp.mechanisms._base"]
    assert not _crosses("tabdp.release.spec.load", "tabdp.release._input")  # a subpackage


def test_no_simple_namespace_stand_ins() -> None:
    """No ``SimpleNamespace`` in tabdp/'s code, but for the commented allow-list."""
    found = _simple_namespaces()
    bad = {m: lines for m, lines in found.items() if m not in ALLOWED_SIMPLE_NAMESPACE}
    assert not bad, f"SimpleNamespace stand-ins in tabdp/ (module: lines): {bad}"
    stale = ALLOWED_SIMPLE_NAMESPACE - set(found)
    assert not stale, f"allow-list entries no longer needed (remove them): {sorted(stale)}"


def test_release_modules_stay_short() -> None:
    """Every module of tabdp/release/ (and its subpackages) has at most MAX_RELEASE_LINES."""
    long = {str(p.relative_to(ROOT)): n for p in sorted((PKG / "release").rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_RELEASE_LINES}
    assert not long, f"modules of tabdp/release/ over {MAX_RELEASE_LINES} lines: {long}"


@pytest.mark.parametrize(("importer", "owner", "crosses"), [
    ("tabdp.calibrate", "tabdp.mechanisms.additive", True),
    ("tabdp.noise.gaussian", "tabdp._cache", False),      # a subpackage uses tabdp's privates
    ("tabdp.frame._quantiles", "tabdp.frame._engine", False),
    ("tabdp.mechanisms.discrete", "tabdp.noise.discrete", True),
])
def test_package_boundaries(importer: str, owner: str, crosses: bool) -> None:
    """What counts as crossing a package boundary."""
    assert _crosses(importer, owner) is crosses


def test_frame_and_release_layers_use_only_the_sessions_public_methods() -> None:
    """The frame engines, the release workflow and the reports use the Session's public API.

    ``sess._ledger`` and the like stay inside tabdp.privacy.
    """
    pattern = re.compile(r"\b(?:sess|session)\._[a-z]\w*")
    bad = []
    for sub in ("frame", "release", "report"):
        for path in sorted((ROOT / "tabdp" / sub).rglob("*.py")):
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if pattern.search(line.split("#", 1)[0]):
                    bad.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    bad += [f"cli.py:{i}" for i, line in enumerate(
        (ROOT / "tabdp" / "cli.py").read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line.split("#", 1)[0])]
    assert not bad, "private Session attributes used outside tabdp.privacy:\n" + "\n".join(bad)


def test_the_private_module_allow_list_stays_empty() -> None:
    """Issue 29 emptied the allow-lists: a new crossing needs a public home, not an entry."""
    assert not ALLOWED_PRIVATE_MODULES and not ALLOWED_PRIVATE and not ALLOWED_SIMPLE_NAMESPACE


def _calls(path: Path) -> list[tuple[str, int]]:
    """(called name, line) of every call in a module (``f(...)`` and ``x.f(...)``)."""
    out = []
    for node in ast.walk(_parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
                else ""
            out.append((name, node.lineno))
    return out


def test_the_release_sequence_is_written_once() -> None:
    """In the frame layer only the pipeline draws a release's noise and writes its record.

    Sums, counts, medians and quantiles on every engine go through `tabdp.frame.pipeline`
    (`execute`, `execute_quantile`): the backends read records and hand back cell data; the
    query's record (`QueryRecord`) and its noise (`release_table`, `_noisy_table`) are written
    there only (`_engine._noisy_table` is the sums' noise itself).
    """
    allowed = {("QueryRecord", "tabdp/frame/pipeline.py"),
               ("release_table", "tabdp/frame/pipeline.py"),
               ("_noisy_table", "tabdp/frame/pipeline.py"),
               ("release_table", "tabdp/frame/_engine.py")}
    bad = [f"{path.relative_to(ROOT)}:{line} calls {name}"
           for path in sorted((PKG / "frame").rglob("*.py"))
           for name, line in _calls(path)
           if name in {"QueryRecord", "release_table", "_noisy_table"}
           and (name, str(path.relative_to(ROOT))) not in allowed]
    assert not bad, "release steps written outside the pipeline:\n" + "\n".join(bad)


#: The Session's public members: the accountant's (issue 29). Settings (the constructor's
#: arguments, read back), the randomness, the budgets, the ledger and the lifetime ledger, the
#: records, admitting charges and recording releases (and author-mode failures, which the
#: confidential report lists), names, reports and commits. Everything the engines keep about a
#: session (its engine, the ledger's kind, bound rows, author mode's one frame, the data phase,
#: snapshots) is `tabdp.frame.binding.FrameBinding`'s.
ACCOUNTANT_MEMBERS = frozenset({
    # settings
    "unit", "seed", "mode", "budget", "track_cells", "progress", "streaming",
    "unit_partitions", "rows_one_cell", "lifetime",
    # randomness, records, the ledger
    "rng", "records", "backend", "ledger",
    # admitting charges, checking budgets, recording releases
    "admit", "check_budget", "record_release", "record_failure", "release_name", "set_as_last",
    # reports and commits
    "report", "commit_ledger",
})

#: The engine plumbing that left the Session for the frame layer (issue 29, item 1).
MOVED_TO_THE_FRAME_LAYER = frozenset({
    "bind_frame", "bind_rows", "bound_columns", "declares_integer", "rows_bound",
    "cached_snapshot", "keep_snapshot", "phase", "start_release", "data_read",
    "streaming_choice", "install_ledger", "choose_ledger", "use_engine", "rows_estimate",
})


def test_the_session_is_the_accountant() -> None:
    """`Session`'s public members are the accountant's list: engine plumbing cannot creep back.

    Checked on live sessions of every kind (row mode, streaming, unit mode, author mode with
    pinned data), so instance attributes count as well as methods and properties.
    """
    import polars as pl

    import tabdp

    sessions = [tabdp.Session(), tabdp.Session(streaming=True), tabdp.Session(unit="id"),
                tabdp.Session(mode="author", data=pl.DataFrame({"x": [1]})),
                tabdp.Session(unit="id", seed=1, budget=1.0, track_cells=True,
                              progress=True, unit_partitions=2)]
    for s in sessions:
        public = {n for n in dir(s) if not n.startswith("_")}
        assert public == ACCOUNTANT_MEMBERS, (
            f"Session's public members changed: added {sorted(public - ACCOUNTANT_MEMBERS)}, "
            f"gone {sorted(ACCOUNTANT_MEMBERS - public)}; engine state belongs in "
            "tabdp.frame.binding (see docs/architecture.md)")
    assert not MOVED_TO_THE_FRAME_LAYER & ACCOUNTANT_MEMBERS


def test_no_module_asks_the_session_for_engine_state() -> None:
    """No module of tabdp calls or reads the moved plumbing on a session object.

    ``sess.bind_rows(...)``, ``session.phase(...)``, ``s.streaming_choice`` and the like would
    fail at run time only on the path that reaches them; this finds them in the source.
    `tabdp.frame.binding` (``binding.of(session).bind_rows``) and ``FrameBinding`` itself are the
    frame layer's own.
    """
    names = {"sess", "session", "s", "self"}
    bad = [f"{path.relative_to(ROOT)}:{node.lineno} reads Session.{node.attr}"
           for path in sorted(PKG.rglob("*.py"))
           if path not in {PKG / "frame" / "binding.py"}
           for node in ast.walk(_parse(path.read_text(encoding="utf-8")))
           if isinstance(node, ast.Attribute) and node.attr in MOVED_TO_THE_FRAME_LAYER
           and ((isinstance(node.value, ast.Name) and node.value.id in names)
                or (isinstance(node.value, ast.Attribute) and node.value.attr == "session"))]
    assert not bad, "the Session asked for engine state:\n" + "\n".join(bad)


#: The frame-class predicates and engine decisions of `tabdp.frame.backends`.
_ENGINE_CALLS = frozenset({"is_spark_frame", "is_pandas_frame", "is_lazy_frame", "frame_kind",
                           "release_engine", "polars_engine", "output_library"})
_ENGINE_NAMES = frozenset({"spark", "polars", "streaming", "memory"})

#: Modules that ask `tabdp.frame.backends` for a frame's engine or compare against an engine's
#: name, each for a stated reason. `tabdp.frame.backends` decides; the others consult its
#: answer. A new module on this list needs a reason here (issue 29: one module decides).
ENGINE_DECISIONS_ALLOWED: dict[str, str] = {
    "tabdp.frame.backends": "decides the engine from the frame's class and the session's ledger, "
                            "and a run's engine from --engine (run_engine)",
    "tabdp.frame.releases": "the one call for every engine (accessor and release workflow)",
    "tabdp.frame.pipeline": "picks the Polars backend (memory or streaming) for a planned release",
    "tabdp.frame._engine": "the Polars opener: the ledger's kind, pandas output of a pandas frame",
    "tabdp.frame._requests": "checks a request's columns in the input's own library",
    "tabdp.frame._spark": "refuses a frame that is not Spark's before any Spark call",
    "tabdp.frame.binding": "binds a session to the engine its ledger lives in",
    "tabdp.curator": "pins a Spark dataset with Spark (checkpoint), others with Polars",
}


def _engine_decisions() -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for name, mod in MODULES.items():
        for node in ast.walk(_parse(mod.path.read_text(encoding="utf-8"))):
            hit = False
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else \
                    f.attr if isinstance(f, ast.Attribute) else ""
                hit = called in _ENGINE_CALLS
            elif isinstance(node, ast.Compare):
                hit = any(isinstance(c, ast.Constant) and c.value in _ENGINE_NAMES
                          for c in [node.left, *node.comparators])
            if hit:
                found.setdefault(name, []).append(node.lineno)
    return found


def test_one_module_decides_the_engine() -> None:
    """Engine decisions stay in the listed modules; the accountant and the accessor make none.

    `tabdp.privacy` (the Session and its Report) asks its ledger for the report
    (``reports_itself``) instead of testing for Spark, and the ``.dp`` accessor releases
    through `tabdp.frame.releases` (one call for every engine).
    """
    found = _engine_decisions()
    bad = {m: lines for m, lines in found.items() if m not in ENGINE_DECISIONS_ALLOWED}
    assert not bad, f"engine decisions outside the allowed modules (module: lines): {bad}"
    stale = set(ENGINE_DECISIONS_ALLOWED) - set(found)
    assert not stale, f"allow-list entries no longer needed (remove them): {sorted(stale)}"
    assert "tabdp.frame.accessor" not in found
    assert not any(m.startswith("tabdp.privacy") for m in found)


def test_the_release_workflow_makes_no_engine_decision() -> None:
    """tabdp/release compares no engine name; the runner asks `run_engine` once (issue 29).

    Starting Spark and its log, the catalog table, the schema checks made before any data,
    PySpark's warnings and the session handle are the run engine's
    (`tabdp.frame.backends.run.RunEngine`): the runner makes the same calls for every engine.
    """
    found = {m: lines for m, lines in _engine_decisions().items()
             if m == "tabdp.release" or m.startswith("tabdp.release.")}
    assert not found, f"engine decisions in tabdp/release (module: lines): {found}"
    runner = PKG / "release" / "runner.py"
    asked = [line for name, line in _calls(runner) if name == "run_engine"]
    assert len(asked) == 1, f"the runner asks for its engine once, not at lines {asked}"
    # every engine is driven through the protocol's calls, none through a per-engine helper
    called = {name for name, _ in _calls(runner)}
    assert {"check_source", "open", "before_data", "quiet_warnings", "close"} <= called
    assert not called & {"start_spark", "check_table", "check_engine"}


def _engine_handle_tests(tree: ast.AST) -> list[tuple[str, int]]:
    """(expression, line) of every test of an engine's handle and every read of ``.handle``.

    ``spark is None``, ``if spark:``, ``x if spark else y``, ``not spark`` where the name holds
    "spark", and ``eng.handle``: the release workflow branching on which engine it has.
    """
    def spark_named(node: ast.AST) -> bool:
        name = node.id if isinstance(node, ast.Name) else \
            node.attr if isinstance(node, ast.Attribute) else ""
        return "spark" in name.lower()

    out = []
    for node in ast.walk(tree):
        tested: list[ast.expr] = []
        if isinstance(node, ast.Compare):
            tested = [node.left, *node.comparators]
        elif isinstance(node, ast.If | ast.IfExp | ast.While | ast.Assert):
            tested = [node.test]
        elif isinstance(node, ast.BoolOp):
            tested = list(node.values)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            tested = [node.operand]
        if any(spark_named(t) for t in tested):
            out.append((ast.unparse(node)[:60], node.lineno))
        if isinstance(node, ast.Attribute) and node.attr == "handle":
            out.append((ast.unparse(node), node.lineno))
    return out


def test_the_release_workflow_tests_no_engine_handle() -> None:
    """tabdp/release makes one call for every engine: no ``spark is None`` branch (issue 29).

    The input is read by the run engine's own steps (``eng.read_input``: `_tables._SpecInput`'s
    ``polars`` or ``spark``), the released tables and the per-record report go through
    `tabdp.frame.releases`: nothing in the release workflow branches on an engine's handle.
    """
    bad = [f"{name}:{line} {expr}" for name, mod in MODULES.items()
           if name == "tabdp.release" or name.startswith("tabdp.release.")
           for expr, line in _engine_handle_tests(_parse(mod.path.read_text(encoding="utf-8")))]
    assert not bad, "engine handles tested in tabdp/release:\n" + "\n".join(bad)
    tables = PKG / "release" / "_tables.py"
    engine_calls = [ast.unparse(n.func) for n in ast.walk(_parse(tables.read_text("utf-8")))
                    if isinstance(n, ast.Call) and ast.unparse(n.func).startswith("eng.")]
    assert engine_calls == ["eng.read_input"], f"one call reads the input: {engine_calls}"
    called = {name for name, _ in _calls(tables)}
    assert {"released_table", "report_frames", "write_report"} <= called
    probe = ast.parse("if spark is None:\n    pass\nx = a if self._spark else b\neng.handle\n")
    assert [line for _, line in _engine_handle_tests(probe)] == [1, 3, 4]  # guards the scan


def test_the_cli_lists_no_engine() -> None:
    """The CLI's ``--engine`` choices are `tabdp.frame.backends.RUN_ENGINES`, not a list of its own.

    No engine name stands in a tuple, list or set of ``tabdp/cli.py``, nor as an argument's
    ``choices=`` or ``default=``; the parser's choices are the backends' list.
    """
    from tabdp import cli
    from tabdp.frame.backends import RUN_ENGINES

    def engine_names(node: ast.AST) -> bool:
        return any(isinstance(c, ast.Constant) and c.value in RUN_ENGINES for c in ast.walk(node))

    tree = ast.parse((PKG / "cli.py").read_text(encoding="utf-8"))
    bad = [f"cli.py:{n.lineno} {ast.unparse(n)[:60]}" for n in ast.walk(tree)
           if isinstance(n, ast.Tuple | ast.List | ast.Set) and engine_names(n)]
    bad += [f"cli.py:{n.value.lineno} {n.arg}={ast.unparse(n.value)}" for n in ast.walk(tree)
            if isinstance(n, ast.keyword) and n.arg in {"choices", "default"}
            and engine_names(n.value)]
    assert not bad, "the CLI names engines itself:\n" + "\n".join(bad)
    run = next(a for a in cli._parser()._subparsers._group_actions[0].choices["run"]._actions
               if "--engine" in a.option_strings)
    assert run.choices is not None and tuple(run.choices) == RUN_ENGINES


def _ledger_targets(tree: ast.AST) -> list[tuple[str, int]]:
    """(target, line) of every assignment to an attribute of something named a ledger."""
    out = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for t in targets:
            for sub in ast.walk(t):
                if not isinstance(sub, ast.Attribute):
                    continue
                base = sub.value
                named = (base.id if isinstance(base, ast.Name)
                         else base.attr if isinstance(base, ast.Attribute) else "")
                if named in {"led", "lifetime"} or "ledger" in named.lower():
                    out.append((ast.unparse(sub), node.lineno))
    return out


def test_no_attribute_is_planted_on_a_ledger_from_another_package() -> None:
    """A ledger of tabdp.privacy is changed through its methods only, never from outside.

    The streaming engine used to plant four callbacks on a `ReplayLedger`
    (``ledger.replay, ledger.collect, ledger.sink = ...``); the release workflow set a private
    flag on the lifetime ledger. Both are methods now (`ReplayLedger.install`,
    `tabdp.Ledger.allow_discard`).
    """
    bad = [f"{name}:{line} assigns {target}"
           for name, mod in MODULES.items() if not name.startswith("tabdp.privacy")
           for target, line in _ledger_targets(_parse(mod.path.read_text(encoding="utf-8")))]
    assert not bad, "attributes planted on a ledger from another package:\n" + "\n".join(bad)
    probe = ast.parse("ledger.replay, ledger.collect = f, g\nsess.ledger.spill = None\n")
    assert [t for t, _ in _ledger_targets(probe)] == [
        "ledger.replay", "ledger.collect", "sess.ledger.spill"]  # guards the scan


def test_the_replay_ledger_asks_a_declared_report_source() -> None:
    """`ReplayLedger` holds one `ReportSource` (a `Protocol`, typed without ``Any``)."""
    from typing import Protocol

    from tabdp.privacy.ledger import ReplayLedger, ReportSource

    assert Protocol in ReportSource.__mro__
    methods = {"replay", "collect", "sink", "summary"}
    tree = ast.parse((PKG / "privacy" / "ledger.py").read_text(encoding="utf-8"))
    source = next(n for n in tree.body
                  if isinstance(n, ast.ClassDef) and n.name == "ReportSource")
    defs = {n.name: n for n in source.body if isinstance(n, ast.FunctionDef)}
    assert set(defs) == methods
    for f in defs.values():
        hints = [a.annotation for a in f.args.args[1:]] + [f.returns]
        assert all(h is not None for h in hints), f"ReportSource.{f.name} is not fully typed"
        assert not any("Any" in ast.unparse(h) for h in hints if h is not None), \
            f"ReportSource.{f.name} is typed with Any"
    led = ReplayLedger()
    assert led.reports is None and not methods & set(vars(led))
    reader = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ReplayLedger")
    assert any(isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == "self.reports"
               and "ReportSource" in ast.unparse(n.annotation) for n in ast.walk(reader))


def test_the_replay_ledger_is_typed() -> None:
    """`ReplayLedger`'s report methods take a `Session`; its kept values have declared types.

    ``session``, the spill (a `ReportSpill` protocol: the engine's class is private to
    `tabdp.frame`) and the file written are typed without ``Any``.
    """
    tree = ast.parse((PKG / "privacy" / "ledger.py").read_text(encoding="utf-8"))
    led = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ReplayLedger")
    defs = {n.name: n for n in led.body if isinstance(n, ast.FunctionDef)}
    for name in ("per_record", "write_per_record", "rho_summary", "keep_spill", "note_written"):
        f = defs[name]
        hints = [a.annotation for a in f.args.args[1:]] + [f.returns]
        assert all(h is not None for h in hints), f"ReplayLedger.{name} is not fully typed"
        assert not any("Any" in ast.unparse(h) for h in hints if h is not None), \
            f"ReplayLedger.{name} is typed with Any"
        session = next((a for a in f.args.args if a.arg == "session"), None)
        assert session is None or ast.unparse(session.annotation) == "Session", name
    kept = {ast.unparse(n.target): ast.unparse(n.annotation) for n in ast.walk(defs["__init__"])
            if isinstance(n, ast.AnnAssign)}
    for attr in ("self.spill", "self.written"):
        assert attr in kept and "Any" not in kept[attr], f"{attr} is typed {kept.get(attr)}"
    from typing import Protocol

    from tabdp.privacy.ledger import ReportSpill

    assert Protocol in ReportSpill.__mro__


#: The engines' modules and the filter calls each must make (issue 29: one pure filter).
_FILTER_USERS = {
    "tabdp/frame/_stream.py": {"admit"},
    "tabdp/frame/backends/polars.py": {"admit"},
    "tabdp/frame/_spark.py": {"constant_admits"},
    "tabdp/_spark_worker.py": {"individual_filter"},  # Spark's pandas UDFs (stop 67)
    "tabdp/privacy/session.py": {"individual_filter"},
}


def test_the_individual_filter_is_one_pure_function() -> None:
    """`individual_filter` is defined once, in tabdp.privacy.filter, and every engine uses it.

    The Polars engines admit through `Session.admit` (a thin wrapper reading the ledger),
    Spark calls the function in its pandas UDFs (`tabdp._spark_worker`) and `constant_admits`
    as a column expression.
    No other module defines a filter of its own.
    """
    defined = sorted((node.name, name) for name, mod in MODULES.items()
                     for node in ast.walk(_parse(mod.path.read_text(encoding="utf-8")))
                     if isinstance(node, ast.FunctionDef)
                     and node.name in {"individual_filter", "constant_admits"})
    assert defined == [("constant_admits", "tabdp.privacy.filter"),
                       ("individual_filter", "tabdp.privacy.filter")], defined
    for path, needs in _FILTER_USERS.items():
        called = {name for name, _ in _calls(ROOT / path)}
        assert needs <= called, f"{path} does not filter through {sorted(needs - called)}"


#: The stages the release workflow is split into (issue 29): the runner keeps the sequence.
RUN_STAGES = ("_plan", "_input", "_tables", "_outputs", "_staging", "_ledger")
SPEC_STAGES = ("model", "schema", "files", "checks", "sections", "tables", "load")


def test_the_runner_and_the_spec_are_split_by_stage() -> None:
    """`release/runner.py` holds the run's sequence only; the spec is a package of stages."""
    for stage in RUN_STAGES:
        assert f"tabdp.release.{stage}" in MODULES, f"release stage {stage} is missing"
    assert MODULES["tabdp.release.spec"].is_package
    for stage in SPEC_STAGES:
        assert f"tabdp.release.spec.{stage}" in MODULES, f"spec stage {stage} is missing"
    runner = PKG / "release" / "runner.py"
    assert len(runner.read_text(encoding="utf-8").splitlines()) <= 400
    tree = _parse(runner.read_text(encoding="utf-8"))
    functions = sorted(n.name for n in tree.body if isinstance(n, ast.FunctionDef))
    assert functions == ["_check_input_first", "_check_schema_first", "_run_with_ledger",
                         "run_release"], functions


def test_every_test_that_starts_spark_is_marked_spark(request: pytest.FixtureRequest) -> None:
    """A collected test asking for the ``spark`` fixture carries the ``spark`` mark.

    ``-m "not spark"`` (the local loop, ``make test-fast``) must deselect it: one such test
    without the mark started a JVM in the loop (tests/conftest.py now marks them all).
    """
    unmarked = [item.nodeid for item in request.session.items
                if "spark" in getattr(item, "fixturenames", ())
                and item.get_closest_marker("spark") is None]
    assert not unmarked, f"tests using the spark fixture without the spark mark: {unmarked}"
