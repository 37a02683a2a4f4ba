"""Renderers format and compute nothing (docs/design.md, "The layers"): every statistic, share, sum, pick and
ordering by value that a user reads is made once in derived/ (derived/views.py) and only formatted in
analyzer/render/. A static check over the renderers' Python (and the report's app) finds what computes: the
statistics and aggregations of polars, numpy and the standard library, sorting, filtering and grouping of
tables, the builtins sum/min/max/sorted, and a division of two values that are not a unit's constant (a ratio).
What is left in render/ is named below with why it is no figure. The check is shown to find each kind of
computation planted in a copy of a renderer."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from conftest import ROOT

RENDER = ROOT / "analyzer" / "render"

# Methods that compute a figure from values (statistics, aggregations, picks, orderings) wherever they are called.
STATISTICS = {"sum", "mean", "median", "quantile", "std", "var", "min", "max", "cum_sum", "cum_max", "cum_min",
              "rank", "value_counts", "n_unique", "describe", "top_k", "bottom_k", "arg_max", "arg_min",
              "arg_sort", "percentile", "nanmean", "nanmedian", "nanpercentile", "average", "fsum",
              "sum_horizontal", "mean_horizontal", "max_horizontal", "min_horizontal", "rolling_mean",
              "fmean", "pstdev", "stdev", "mode"}
TABLE_OPS = {"sort", "sort_by", "filter", "group_by", "agg", "pivot", "unique", "over", "diff", "join_asof"}
BUILTINS = {"sum", "min", "max", "sorted"}

# What stays in render/, each with why it is no figure: (file, function or "*" for the whole file) -> reason.
ALLOWED = {
    ("perfetto.py", "*"): "the Perfetto export writes the trace's own ops, ranges and launch calls as slices and "
                          "flows: it orders them so that slices nest and groups a launch call's ops into its "
                          "flows; it shows no figure",
    ("json.py", "_cycle_lines"): "writes each cycle's phases as one line of JSON text (grouped by cycle, the "
                                 "names' encodings looked up once): serialisation",
    ("json.py", "_document"): "`category_parents` in the order of the category names (sorted keys): layout",
    ("tables.py", "csv_safe"): "looks for the text cells a spreadsheet would run among a column's distinct values",
    ("html.py", "_delta"): "writes integers as differences from the previous one: an encoding of the columns",
    ("format.py", "table"): "pads the columns of text to their widest cell: layout",
    ("names.py", "distinct"): "the shortest path's length bounds the parts that all paths share: naming",
}

# The report's app: sorting or summing the view model's values in the browser would be a second computation.
JS_FORBIDDEN = re.compile(r"\.sort\(|\.reduce\(|Math\.(?:max|min)\.apply")
# The chart code that stays in report/*.js, each with why it is no figure: (file, the line's start) -> reason.
JS_ALLOWED = {
    ("phases.js", "var maxT = Math.max.apply(null, totals"): "the y axis fits the tallest bar: drawing",
    ("phases.js", '{ "yaxis.title.text": "attributed ms per instance", "yaxis.range": [0, Math.max.apply('):
        "the y axis fits the tallest bar per instance: drawing",
    ("checks.js", "var xmax = Math.max.apply(null, xs)"): "the axes fit the points drawn: drawing",
}


def _function_of(tree: ast.AST) -> dict[int, str]:
    """Line number -> the name of the top-level function (or class) the line is in."""
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                out[line] = node.name
    return out


def computations(path: Path) -> list[str]:
    """Every computation in the Python file at `path` that ALLOWED does not name: 'file:line: what'."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    where = _function_of(tree)
    found = []
    for node in ast.walk(tree):
        what = None
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in STATISTICS | TABLE_OPS:
                what = f".{f.attr}()"
            elif isinstance(f, ast.Attribute) and f.attr == "join" and {k.arg for k in node.keywords} & {"on", "how"}:
                what = ".join(on=...) of tables"
            elif isinstance(f, ast.Name) and f.id in BUILTINS:
                what = f"{f.id}()"
            elif isinstance(f, ast.Name) and f.id == "pct" and len(node.args) > 1 and not (
                    isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, int)):
                what = "pct(part, whole): a share"
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            if not (isinstance(node.right, ast.Constant) or isinstance(node.left, ast.Constant)):
                what = "a / b: a ratio"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            if any(n.split(".")[0] == "statistics" for n in names):
                what = "import statistics"
        if what is None:
            continue
        fn = where.get(getattr(node, "lineno", 0), "")
        if (path.name, "*") in ALLOWED or (path.name, fn) in ALLOWED:
            continue
        found.append(f"{path.name}:{node.lineno} ({fn or 'module'}): {what}")
    return sorted(found)


def js_computations(path: Path) -> list[str]:
    """Every line of the report's module at `path` that sorts, reduces or takes the extreme of the view model's
    values, less those JS_ALLOWED names."""
    allowed = [start for name, start in JS_ALLOWED if name == path.name]
    return [f"{path.name}:{i}: {line.strip()[:100]}" for i, line in
            enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if JS_FORBIDDEN.search(line) and not any(line.strip().startswith(a) for a in allowed)]


@pytest.mark.parametrize("path", sorted(RENDER.glob("*.py")), ids=lambda p: p.name)
def test_a_renderer_computes_no_figure(path):
    assert computations(path) == []


@pytest.mark.parametrize("path", sorted((RENDER / "report").glob("*.js")), ids=lambda p: p.name)
def test_the_reports_app_computes_no_figure(path):
    assert js_computations(path) == []


def test_every_allowed_place_still_exists():
    # An exception that names a function no longer there is stale: it would let a new one of that name pass.
    for (name, fn), _ in ALLOWED.items():
        source = (RENDER / name).read_text(encoding="utf-8")
        assert fn == "*" or re.search(rf"^def {fn}\(", source, re.M), (name, fn)
    for name, start in JS_ALLOWED:
        assert any(line.strip().startswith(start) for line in
                   (RENDER / "report" / name).read_text(encoding="utf-8").splitlines()), (name, start)


PLANTED = [
    ("median", 'x = a.cycles["start"].median()\n', ".median()"),
    ("quantile", 'x = a.cycles["start"].quantile(0.5, "linear")\n', ".quantile()"),
    ("sum", 'x = int(a.phases["attributed"].sum())\n', ".sum()"),
    ("builtin", "x = sum(r['ns'] for r in rows)\n", "sum()"),
    ("sort", 'x = a.phases.sort("attributed", descending=True).row(0)\n', ".sort()"),
    ("filter", 'x = a.phases.filter(pl.col("phase") == "verify")\n', ".filter()"),
    ("group", 'x = a.categories.group_by("phase").agg(pl.col("ns").sum())\n', ".group_by()"),
    ("join", 'x = a.kernels.join(a.phases, on="phase", how="semi")\n', ".join(on=...) of tables"),
    ("ratio", 'x = r["busy"] / r["wall"]\n', "a / b: a ratio"),
    ("share", 'x = pct(r["busy"], r["wall"])\n', "pct(part, whole): a share"),
    ("statistics", "import statistics\n", "import statistics"),
]


@pytest.mark.parametrize("name, code, what", PLANTED, ids=[p[0] for p in PLANTED])
def test_the_check_finds_a_planted_computation(tmp_path, name, code, what):
    source = (RENDER / "terminal.py").read_text(encoding="utf-8")
    planted = source.replace("def header(a: Analysis) -> str:\n",
                             "def header(a: Analysis) -> str:\n    " + code.replace("\n", "\n    ").rstrip() + "\n", 1)
    assert planted != source
    copy = tmp_path / "terminal.py"
    copy.write_text(planted, encoding="utf-8")
    found = computations(copy)
    assert len(found) >= 1 and any(f.endswith(what) and "(header)" in f for f in found), found
    # and the unit conversions at the edge pass: ns / 1e6 is no ratio
    assert computations(RENDER / "terminal.py") == []


def test_the_js_check_finds_a_planted_sort(tmp_path):
    copy = tmp_path / "header.js"
    copy.write_text((RENDER / "report" / "header.js").read_text(encoding="utf-8")
                    + "\nvar top = B.phases.slice().sort(function (x, y) { return y.share - x.share; })[0];\n")
    assert len(js_computations(copy)) == 1
