"""The nsys reader (analyzer/readers/nsys/) is used only through its public names: no module outside the package
(analyzer/, tracer/, specprof/, tests/, benchmarks/, scripts/) imports, reads, patches or names a name of it that
starts with an underscore. Found by parsing each module (and each script inside a string that imports the
package, which a test runs in a child process): an import of a private name or module, an attribute of a name bound
to the package or to something in it, and setattr/getattr (monkeypatch's too) with a private name. The checks are
shown to fail on planted uses."""

from __future__ import annotations

import ast
import shutil
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT

NSYS = "specprof.analyzer.readers.nsys"
FOLDERS = ("analyzer", "tracer", "specprof", "tests", "benchmarks", "scripts")
INSIDE = Path("analyzer") / "readers" / "nsys"


def private(path: str) -> bool:
    """Whether the dotted `path` is a name inside the nsys package with a private part (`_x`; `__x__` is not)."""
    if not path.startswith(NSYS + "."):
        return False
    parts = path[len(NSYS) + 1:].split(".")
    return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts)


def _module_name(rel: Path) -> str:
    """analyzer/app/run.py -> specprof.analyzer.app.run (as installed), tests/x.py -> tests.x."""
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["specprof", *parts] if parts[0] in ("analyzer", "tracer") else parts)


def _dotted(node: ast.AST) -> tuple[str, str] | None:
    """(the name at the base, ".b.c") of an expression a.b.c; None for anything else."""
    rest = ""
    while isinstance(node, ast.Attribute):
        rest = f".{node.attr}{rest}"
        node = node.value
    return (node.id, rest) if isinstance(node, ast.Name) else None


def _script(node: ast.AST) -> str | None:
    """The text of a string constant (an f-string's placeholders as None) that may be a script using the package."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.JoinedStr):
        text = "".join(v.value if isinstance(v, ast.Constant) else "None" for v in node.values)
    else:
        return None
    return text if "import" in text and "nsys" in text else None


def private_uses(source: str, module: str = "") -> list[str]:
    """Every use of a private name of the nsys package in `source` (the module `module`), as "line: name"."""
    tree = ast.parse(source)
    package = module.rpartition(".")[0]
    bound: dict[str, str] = {}  # a name -> what it stands for (dotted), where that is in the package
    found = set()

    def path_of(node: ast.AST) -> str | None:
        d = _dotted(node)
        return bound[d[0]] + d[1] if d is not None and d[0] in bound else None

    def note(node: ast.AST, path: str | None) -> None:
        if path is not None and private(path):
            found.add(f"{node.lineno}: {path}")

    for node in ast.walk(tree):  # what each name stands for (scopes are not told apart: a name is one thing)
        if isinstance(node, ast.Import):
            for a in node.names:
                note(node, a.name)
                bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                base = ".".join(up[: len(up) - (node.level - 1)] + ([node.module] if node.module else []))
            note(node, base)
            for a in node.names:
                note(node, f"{base}.{a.name}")
                bound[a.asname or a.name] = f"{base}.{a.name}"
    for node in ast.walk(tree):  # x = nsys.something: x stands for it too
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            path = path_of(node.value)
            if path is not None and path.startswith(NSYS + "."):
                bound[node.targets[0].id] = path
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            note(node, path_of(node))
        elif isinstance(node, ast.Call) and node.args:
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name in ("setattr", "getattr", "delattr", "hasattr"):
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):  # monkeypatch.setattr("a.b._c", v)
                    note(node, first.value)
                elif len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
                    target, name = path_of(first), node.args[1].value
                    note(node, f"{target}.{name}" if target is not None and isinstance(name, str) else None)
        elif isinstance(node, ast.Tuple) and len(node.elts) == 2:  # (module, "_name"): a patch to be made later
            target, name = path_of(node.elts[0]), node.elts[1]
            if target is not None and isinstance(name, ast.Constant) and isinstance(name.value, str):
                note(node, f"{target}.{name.value}")
        script = _script(node)
        if script is not None:
            try:
                inner = private_uses(textwrap.dedent(script))
            except SyntaxError:  # text, not a script
                continue
            found.update(f"{node.lineno} (a script): {use.split(': ', 1)[1]}" for use in inner)
    return sorted(found, key=lambda use: int(use.split(" ")[0].rstrip(":")))


def outside_modules(root: Path) -> dict[str, Path]:
    """Every Python file under `root`'s FOLDERS but the nsys package's own, by its path from `root`."""
    out = {}
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root)
            if "__pycache__" not in rel.parts and rel.parts[:3] != INSIDE.parts:
                out[str(rel)] = path
    return out


def scan(root: Path) -> dict[str, list[str]]:
    """The private uses of the nsys package in every module outside it under `root`, by file."""
    found = {}
    for rel, path in outside_modules(root).items():
        uses = private_uses(path.read_text(encoding="utf-8"), _module_name(Path(rel)))
        if uses:
            found[rel] = uses
    return found


def test_no_module_outside_the_nsys_reader_uses_its_private_names():
    read = {Path(rel).parts[0] for rel in outside_modules(ROOT)}
    assert read == set(FOLDERS)  # every folder is read (tests, benchmarks and scripts too)
    assert scan(ROOT) == {}


# Each planted use is written with the package's name built at run time (f"{NSYS}"), so that this file's own strings
# are no such use.
PLANTED = [
    (f"from {NSYS}.export import _check_file", f"{NSYS}.export._check_file"),
    (f"from {NSYS} import _sqlite_pages", f"{NSYS}._sqlite_pages"),
    (f"import {NSYS}._sqlite_pages", f"{NSYS}._sqlite_pages"),
    (f"from {NSYS} import read\nread._name_of(None, None, 'a', 'b')", f"{NSYS}.read._name_of"),
    (f"from {NSYS} import pages as p\np.reader.read = p._literal", f"{NSYS}.pages._literal"),
    (f"import {NSYS}.window as w\nw._Planned", f"{NSYS}.window._Planned"),
    (f"import {NSYS}\n{NSYS}.per_process.Sink._x", f"{NSYS}.per_process.Sink._x"),
    (f"from {NSYS}.export import Export\nExport._of_process", f"{NSYS}.export.Export._of_process"),
    (f"from {NSYS} import tables\nt = tables\nt._int", f"{NSYS}.tables._int"),
    (f"from {NSYS} import export\ndef f(monkeypatch):\n    monkeypatch.setattr(export, '_cores', None)",
     f"{NSYS}.export._cores"),
    ("def f(monkeypatch):\n    monkeypatch.setattr('" + NSYS + ".read._DENSE_IDS', 1)", f"{NSYS}.read._DENSE_IDS"),
    (f"from {NSYS} import read\nWORK = [(read, '_stack_sorted')]", f"{NSYS}.read._stack_sorted"),
    ("import subprocess\nscript = '''\nfrom " + NSYS + ".pages import _runs\n'''", f"{NSYS}.pages._runs"),
    ("from ..readers.nsys import _sqlite_pages", f"{NSYS}._sqlite_pages"),  # relative, in analyzer/app/
]


@pytest.mark.parametrize("code, name", PLANTED)
def test_the_check_finds_a_planted_private_use(code, name):
    assert [use.split(": ", 1)[1] for use in private_uses(code, "specprof.analyzer.app.planted")] == [name]


def test_the_scan_finds_planted_uses_in_every_folder_but_the_package(tmp_path):
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    assert scan(tmp_path) == {}  # the copy as it is passes
    planted = {}
    for (code, name), folder in zip(PLANTED, FOLDERS):
        rel = f"{folder}/app/planted.py" if folder == "analyzer" else f"{folder}/planted.py"
        (tmp_path / rel).write_text(code + "\n", encoding="utf-8")
        planted[rel] = [name]
    # the package's own modules may use its private names
    (tmp_path / INSIDE / "planted.py").write_text(PLANTED[0][0] + "\n", encoding="utf-8")
    assert {rel: [use.split(": ", 1)[1] for use in uses] for rel, uses in scan(tmp_path).items()} == planted


@pytest.mark.parametrize("code", [
    f"from {NSYS} import Export, read_nsys_sqlite\nExport.parallel\nread_nsys_sqlite.__doc__",
    f"from {NSYS} import pages\npages.reader.Unsupported",
    f"from {NSYS}.pages import reader as pages\npages.leaves",
    "def f(ex):\n    return ex._cast",  # an object of unknown kind: not told
    f"NAMES = ['{NSYS}._sqlite_pages']",  # a name as data: not a use
])
def test_the_check_passes_public_uses(code):
    assert private_uses(code, "specprof.analyzer.app.planted") == []
