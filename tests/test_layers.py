"""The analyzer's layers (docs/design.md): every module imports only modules of its own layer or of the layers
below, and no module imports itself back through others, counting the imports inside functions and the relative
ones (`from ..render import terminal`) too. tracer/ (which runs inside the server) takes only the analyzer's
foundation (its errors, its version and its safe writes), and the analyzer takes of tracer/ only the edges in ANALYZER_TO_TRACER.
The checks are shown to fail on a copy of the analyzer with such imports planted in it."""

from __future__ import annotations

import ast
import shutil
from functools import cache
from pathlib import Path

import pytest

from conftest import ROOT

# Lowest first. A module's layer is the first prefix that matches its dotted name.
LAYERS = [
    ("foundation", ("specprof.analyzer", "specprof.analyzer.errors", "specprof.analyzer.progress", "specprof.analyzer._scan",
                    "specprof.analyzer.code_identity", "specprof.analyzer.safe_files")),
    ("model", ("specprof.analyzer.model",)),
    ("readers", ("specprof.analyzer.readers",)),
    ("core", ("specprof.analyzer.core",)),
    ("derived", ("specprof.analyzer.derived",)),
    ("render", ("specprof.analyzer.render",)),
    ("app", ("specprof.analyzer.app",)),
    ("cli", ("specprof.analyzer.cli",)),
]
TRACER_MAY_IMPORT = {"specprof.analyzer", "specprof.analyzer.errors", "specprof.analyzer.safe_files"}
# The analyzer's only imports of tracer/: the console script adds the `capture` and `reference` commands, and a
# lone .nsys-rep is exported with the nsys that `specprof capture` would use (specprof.tracer.capture.find_nsys).
ANALYZER_TO_TRACER = {("specprof.analyzer.cli", "specprof.tracer.cli"), ("specprof.analyzer.readers.nsys_report", "specprof.tracer.capture")}
COMPILED = {"specprof.analyzer._scan", "specprof.analyzer.readers.nsys._sqlite_pages"}  # C modules: no source to read
# The analyses are pure, tables in and tables out: they import no reader (app/ reads the files for them).
PURE = ("core", "derived")


def modules(package: str, root: Path = ROOT) -> dict[str, str]:
    """Dotted name -> source file, for every module of `package` (a folder under `root`), named as installed:
    analyzer/core/summary.py is specprof.analyzer.core.summary."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = ["specprof", *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = str(path)
    return out


def import_statements(path: str, module: str) -> list[tuple[str, list[str] | None]]:
    """Every import in the file at `path` (the module `module`), module level or in a function, as (the module
    named, the names taken from it, or None for `import x.y`), relative imports resolved: `from ..render import
    terminal` in analyzer/core/summary.py is ("specprof.analyzer.render", ["terminal"])."""
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        if isinstance(node, ast.Import):
            found.extend((a.name, None) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                assert node.level - 1 < len(up), f"{path}:{node.lineno}: a relative import above the top package"
                base = ".".join(up[: len(up) - (node.level - 1)] + ([node.module] if node.module else []))
            found.append((base, [a.name for a in node.names]))
    return found


def imports(path: str, module: str, known: set[str], top: str = "specprof.analyzer") -> set[str]:
    """The modules of package `top` (`known`: its modules) that the file at `path` (the module `module`)
    imports: `from specprof.analyzer.render import json` imports specprof.analyzer.render.json, `from specprof.analyzer.render.format
    import clean` specprof.analyzer.render.format."""

    def module_of(name: str) -> str:  # a name defined in a module: that module
        while name not in known and "." in name:
            name = name.rpartition(".")[0]
        return name

    out = set()
    for base, names in import_statements(path, module):
        if base != top and not base.startswith(top + "."):
            continue
        if names is None:
            out.add(module_of(base))
        else:
            out.update(f"{base}.{n}" if f"{base}.{n}" in known else module_of(base) for n in names)
    return out


def graph_of(root: Path) -> dict[str, set[str]]:
    """Module -> the analyzer modules it imports, for the analyzer under `root`."""
    mods = modules("analyzer", root)
    known = set(mods) | COMPILED
    return {m: imports(p, m, known) - {m} for m, p in mods.items()}


def tracer_edges(root: Path) -> set[tuple[str, str]]:
    """(analyzer module, tracer module) for every import of tracer/ in the analyzer under `root`."""
    known = set(modules("tracer", root))
    return {(m, t) for m, p in modules("analyzer", root).items() for t in imports(p, m, known, top="specprof.tracer")}


def upward(edges: dict[str, set[str]]) -> list[str]:
    """Every import of a module from a layer above the importer's, as "importer -> imported"."""
    return [f"{m} ({LAYERS[layer(m)][0]}) -> {t} ({LAYERS[layer(t)][0]})"
            for m in sorted(edges) for t in sorted(edges[m]) if layer(t) > layer(m)]


def impure(edges: dict[str, set[str]]) -> list[str]:
    """Every import of a reader by an analysis (a module of the PURE layers), as "importer -> imported"."""
    readers = LAYERS.index(("readers", ("specprof.analyzer.readers",)))
    return [f"{m} -> {t}" for m in sorted(edges) if LAYERS[layer(m)][0] in PURE
            for t in sorted(edges[m]) if layer(t) == readers]


@cache
def graph() -> dict[str, set[str]]:
    return graph_of(ROOT)


def layer(module: str) -> int:
    for i, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or (p != "specprof.analyzer" and module.startswith(p + ".")) for p in prefixes):
            return i
    raise AssertionError(f"{module}: in no layer of tests/test_layers.py (add its package to LAYERS)")


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each sorted: an import circle."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_circle_finder_finds_circles():
    # synthetic graphs: a circle of three, a self-contained pair, and a chain without a circle
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"b"}}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_circle():
    assert cycles(graph()) == []


@pytest.mark.parametrize("module", sorted(modules("analyzer")))
def test_each_module_imports_only_its_layer_and_below(module):
    mine = layer(module)
    above = sorted(m for m in graph()[module] if layer(m) > mine)
    assert not above, f"{module} ({LAYERS[mine][0]}) imports from above: " + ", ".join(
        f"{m} ({LAYERS[layer(m)][0]})" for m in above)


def test_the_analyses_read_no_files():
    assert impure(graph()) == []


def test_every_analyzer_module_is_in_a_layer():
    for module in modules("analyzer"):
        layer(module)


def test_the_cli_goes_through_the_application_layer():
    assert {layer(m) for m in graph()["specprof.analyzer.cli"]} <= {0, LAYERS.index(("app", ("specprof.analyzer.app",)))}


def test_tracer_takes_only_the_analyzer_foundation():
    known = set(modules("analyzer")) | COMPILED
    for module, path in modules("tracer").items():
        assert imports(path, module, known) <= TRACER_MAY_IMPORT, module


def test_the_analyzer_takes_of_the_tracer_only_the_edges_meant():
    assert tracer_edges(ROOT) == ANALYZER_TO_TRACER


@pytest.fixture
def planted(tmp_path):
    """A copy of analyzer/ and tracer/, and `plant(file, code)` to add a function holding `code` to one of its
    modules."""
    for package in ("analyzer", "tracer"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "*.so"))

    def plant(file: str, code: str) -> None:
        path = tmp_path / file
        path.write_text(path.read_text(encoding="utf-8") + f"\n\ndef _planted():\n    {code}\n", encoding="utf-8")

    plant.root = tmp_path
    return plant


@pytest.mark.parametrize("file, code, above, reads", [
    ("analyzer/core/summary.py", "from ..render import terminal",
     ["specprof.analyzer.core.summary (core) -> specprof.analyzer.render.terminal (render)"], []),
    ("analyzer/core/summary.py", "from .. import render", ["specprof.analyzer.core.summary (core) -> specprof.analyzer.render (render)"],
     []),
    ("analyzer/derived/sweep_runs.py", "from ..app.run import Run",
     ["specprof.analyzer.derived.sweep_runs (derived) -> specprof.analyzer.app.run (app)"], []),
    ("analyzer/derived/crosscheck.py", "from specprof.analyzer.readers.sidecar import read_sidecars", [],
     ["specprof.analyzer.derived.crosscheck -> specprof.analyzer.readers.sidecar"]),
    ("analyzer/derived/economics.py", "from ..readers import load", [],
     ["specprof.analyzer.derived.economics -> specprof.analyzer.readers.load"]),
    ("analyzer/model/trace.py", "from . import sidecars", [], []),  # the same layer: allowed
])
def test_the_layer_checks_find_planted_imports(planted, file, code, above, reads):
    edges = graph_of(planted.root)
    assert upward(edges) == [] and impure(edges) == []  # the copy as it is passes
    planted(file, code)
    edges = graph_of(planted.root)
    assert upward(edges) == above and impure(edges) == reads


def test_the_layer_checks_find_a_planted_circle(planted):
    planted("analyzer/model/columns.py", "from .trace import Trace")
    planted("analyzer/model/trace.py", "from . import columns")
    assert ["specprof.analyzer.model.columns", "specprof.analyzer.model.trace"] in cycles(graph_of(planted.root))


def test_the_tracer_checks_find_planted_tracer_imports(planted):
    planted("analyzer/derived/economics.py", "from specprof.tracer.reference import engine")
    planted("tracer/sidecar.py", "from specprof.analyzer.readers import sidecar")
    assert tracer_edges(planted.root) == ANALYZER_TO_TRACER | {("specprof.analyzer.derived.economics",
                                                                "specprof.tracer.reference.engine")}
    known = set(modules("analyzer", planted.root)) | COMPILED
    assert imports(str(planted.root / "tracer" / "sidecar.py"), "specprof.tracer.sidecar", known) - TRACER_MAY_IMPORT \
        == {"specprof.analyzer.readers.sidecar"}
