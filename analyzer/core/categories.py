"""Kernel name -> category: a table of (category, pattern) rules the user can extend.

Categories form a shallow tree: a rule may name the category's `parent` (`allreduce` is a kind of
`communication`), so that a consumer can sum a parent over its kinds. A rule's pattern is searched in
the op's full name (`match = "name"`, the default), or in its function name (`match = "function"`):
the demangled name without its return type, template arguments and parameter list, namespaces kept
(`deep_ep::intranode::dispatch` for `void deep_ep::intranode::dispatch<8, 768>(int4 *, ...)`). A
short name is its own function name, so a function rule works on full and short names alike, and its
pattern cannot match the types in a template argument or a parameter."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources

import polars as pl

from specprof.analyzer.errors import SpecprofError

MEMCPY = "memcpy"
MEMSET = "memset"
# An op that is a whole CUDA-graph launch (nsys --cuda-graph-trace=graph): its kernels are not in the trace.
CUDA_GRAPH = "cuda_graph"
OTHER = "other"
NAME, FUNCTION = "name", "function"


@dataclass(frozen=True)
class Rule:
    category: str
    pattern: str
    parent: str | None = None  # the broader category this one is a kind of
    match: str = NAME  # what the pattern is searched in: the full name, or the function name

    def key(self) -> list:
        """The rule as plain JSON values (what identifies it in a cache key or a stored run's options)."""
        return [self.category, self.pattern, self.parent, self.match]


def _parse(text: str, source: str) -> list[Rule]:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecprofError(f"{source}: not valid TOML ({exc})", source) from None
    except RecursionError:
        raise SpecprofError(f"{source}: not valid TOML (nested too deep to read)", source) from None
    rules = doc.get("rule", [])
    if not isinstance(rules, list):
        raise SpecprofError(f"{source}: `rule` must be an array of tables ([[rule]])", source)
    out = []
    for i, r in enumerate(rules):
        if not isinstance(r, dict) or not isinstance(r.get("category"), str) \
                or not isinstance(r.get("pattern"), str) or not r["category"]:
            raise SpecprofError(
                f"{source}: rule {i + 1} needs a non-empty string `category` and a string `pattern`",
                source,
            )
        parent = r.get("parent")
        if parent is not None and (not isinstance(parent, str) or not parent or parent == r["category"]):
            raise SpecprofError(f"{source}: rule {i + 1} ({r['category']}): `parent` must be the name of "
                                "another category", source)
        match = r.get("match", NAME)
        if match not in (NAME, FUNCTION):
            raise SpecprofError(f"{source}: rule {i + 1} ({r['category']}): `match` must be \"{NAME}\" or "
                                f"\"{FUNCTION}\"", source)
        rule = Rule(r["category"], r["pattern"], parent, match)
        try:  # compile with the same engine that will run it
            pl.select(pl.lit("").str.contains("(?i)" + rule.pattern))
        except Exception as exc:  # polars raises ComputeError for a bad regex
            raise SpecprofError(
                f"{source}: rule {i + 1} ({rule.category}): bad pattern: {str(exc).splitlines()[0]}",
                source,
            ) from None
        out.append(rule)
    return out


def parents(rules: list[Rule]) -> dict[str, str]:
    """Category -> its parent, for the categories whose rules name one. A category has one parent, and a
    parent is not itself a kind of another (one level)."""
    out: dict[str, str] = {}
    for r in rules:
        if r.parent is None:
            continue
        if out.setdefault(r.category, r.parent) != r.parent:
            raise SpecprofError(f"category {r.category!r} is given two parents: {out[r.category]!r} and "
                                f"{r.parent!r}", None)
    for child, parent in out.items():
        if parent in out:
            raise SpecprofError(f"category {child!r} has parent {parent!r}, which has a parent itself "
                                f"({out[parent]!r}): categories nest one level", None)
    return out


def kinds_of(parent: str, tree: dict[str, str] | None = None) -> list[str]:
    """`parent` and the categories that are kinds of it (`tree`: category -> parent; the default rules'
    when None), the parent first."""
    tree = default_parents() if tree is None else tree
    return [parent] + sorted(c for c, p in tree.items() if p == parent)


def default_rules() -> list[Rule]:
    text = resources.files("specprof.analyzer.core").joinpath("categories.toml").read_text()
    return _parse(text, "analyzer/core/categories.toml")


def default_parents() -> dict[str, str]:
    return parents(default_rules())


def load_rules(path: str | None = None) -> list[Rule]:
    """The default rules, with the rules of `path` (if given) tried first."""
    rules = default_rules()
    if path is None:
        return rules
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise SpecprofError(f"{path}: cannot read the categories file ({exc.strerror})", path) from None
    except UnicodeDecodeError:
        raise SpecprofError(f"{path}: the categories file is not UTF-8 text; give a TOML file of [[rule]] "
                            "tables (docs/attribution.md)", path) from None
    merged = _parse(text, path) + rules
    try:
        parents(merged)
    except SpecprofError as exc:
        raise SpecprofError(f"{path}: {exc}", path) from None
    return merged


def function_name(text: pl.Expr) -> pl.Expr:
    """The qualified function name of a demangled kernel name: without a leading `void `, and cut at the
    template arguments or the parameter list (a kernel is a free function: its name ends there). The
    anonymous namespace, written `<unnamed>` (nsys) or `(anonymous namespace)` (c++filt), is kept."""
    return (text.str.replace(r"^\s*void\s+", "")
            .str.extract(r"^((?:<unnamed>|\(anonymous namespace\)|[^<(])*)", 1).fill_null(""))


def categorize(ops: pl.DataFrame, rules: list[Rule]) -> pl.DataFrame:
    """Add a `category` column: memcpy, memset and whole CUDA graphs by the op's kind, kernels by the first
    rule whose pattern their name (or function name) matches (`other` when none does). The patterns run
    once per distinct name; each op's category is then a dictionary lookup of its name (no join over the
    ops)."""
    names = ops.select(pl.col("name").unique()).get_column("name").drop_nulls()
    expr = pl.lit(OTHER)
    for rule in reversed(rules):
        subject = pl.col("_function") if rule.match == FUNCTION else pl.col("_name")
        expr = pl.when(subject.str.contains("(?i)" + rule.pattern)).then(pl.lit(rule.category)).otherwise(expr)

    def table(names: pl.Series) -> pl.Series:
        text = names.cast(pl.Utf8).fill_null("")
        frame = pl.DataFrame({"_name": text}).with_columns(_function=function_name(pl.col("_name")))
        return frame.select(expr.alias("category")).get_column("category")

    unnamed = table(pl.Series([None], dtype=pl.Utf8)).item()
    by_name = ops.get_column("name").replace_strict(names, table(names).cast(pl.Categorical), default=None,
                                                    return_dtype=pl.Categorical)
    kind = pl.col("kind")
    return ops.with_columns(by_name.alias("category")).with_columns(
        category=pl.when(kind == "memcpy").then(pl.lit(MEMCPY).cast(pl.Categorical))
        .when(kind == "memset").then(pl.lit(MEMSET).cast(pl.Categorical))
        .when(kind == "graph").then(pl.lit(CUDA_GRAPH).cast(pl.Categorical))
        .otherwise(pl.col("category").fill_null(pl.lit(unnamed).cast(pl.Categorical))))


def graph_note(ops: pl.DataFrame) -> str | None:
    """What to tell the user when some ops are whole CUDA-graph launches (None when none is)."""
    graphs = ops.filter(pl.col("kind") == "graph")
    if graphs.is_empty():
        return None
    ns = int((graphs["end"] - graphs["start"]).sum())
    return (f"{graphs.height:,} ops are whole CUDA-graph launches ({ns / 1e6:,.3f} ms of GPU time, category "
            f"{CUDA_GRAPH}): the capture traced each graph as one op (nsys --cuda-graph-trace=graph), so the "
            "kernels inside are not in it. To see them, capture again with --cuda-graph-trace=node "
            "(specprof capture's default)")
