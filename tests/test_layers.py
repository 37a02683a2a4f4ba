"""The analyzer's layers (docs/design.md): every module imports only modules of its own layer or of the layers
below, and no module imports itself back through others, counting the imports inside functions too. tracer/
(which runs inside the server) takes only the analyzer's foundation (its errors and its version)."""

from __future__ import annotations

import ast
from functools import cache

import pytest

from conftest import ROOT

# Lowest first. A module's layer is the first prefix that matches its dotted name.
LAYERS = [
    ("foundation", ("analyzer", "analyzer.errors", "analyzer.progress", "analyzer._scan")),
    ("model", ("analyzer.model",)),
    ("readers", ("analyzer.readers",)),
    ("core", ("analyzer.core",)),
    ("derived", ("analyzer.derived",)),
    ("render", ("analyzer.render",)),
    ("app", ("analyzer.app",)),
    ("cli", ("analyzer.cli", "analyzer.__main__")),
]
TRACER_MAY_IMPORT = {"analyzer", "analyzer.errors"}


def modules(package: str) -> dict[str, str]:
    """Dotted name -> source file, for every module of `package` (a folder under the repository root)."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = str(path)
    return out


def imports(path: str, known: set[str]) -> set[str]:
    """The analyzer modules that the file at `path` imports anywhere in it (module level or in a function)."""
    found = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from analyzer.render import json` imports the module analyzer.render.json
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                     for a in node.names]
        else:
            continue
        found.update(n for n in names if n == "analyzer" or n.startswith("analyzer."))
    return found


@cache
def graph() -> dict[str, set[str]]:
    mods = modules("analyzer")
    known = set(mods) | {"analyzer._scan", "analyzer.readers._sqlite_pages"}
    return {m: imports(p, known) - {m} for m, p in mods.items()}


def layer(module: str) -> int:
    for i, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or (p != "analyzer" and module.startswith(p + ".")) for p in prefixes):
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
    upward = sorted(m for m in graph()[module] if layer(m) > mine)
    assert not upward, f"{module} ({LAYERS[mine][0]}) imports from above: " + ", ".join(
        f"{m} ({LAYERS[layer(m)][0]})" for m in upward)


def test_every_analyzer_module_is_in_a_layer():
    for module in modules("analyzer"):
        layer(module)


def test_the_cli_goes_through_the_application_layer():
    assert {layer(m) for m in graph()["analyzer.cli"]} <= {0, LAYERS.index(("app", ("analyzer.app",)))}


def test_tracer_takes_only_the_analyzer_foundation():
    known = set(modules("analyzer"))
    for module, path in modules("tracer").items():
        assert imports(path, known) <= TRACER_MAY_IMPORT, module
