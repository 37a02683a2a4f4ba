"""Kernel name -> category: a table of (category, pattern) rules the user can extend."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources

import polars as pl

from analyzer.errors import SpecprofError

MEMCPY = "memcpy"
MEMSET = "memset"
OTHER = "other"


@dataclass(frozen=True)
class Rule:
    category: str
    pattern: str


def _parse(text: str, source: str) -> list[Rule]:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecprofError(f"{source}: not valid TOML ({exc})", source) from None
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
        rule = Rule(r["category"], r["pattern"])
        try:  # compile with the same engine that will run it
            pl.select(pl.lit("").str.contains("(?i)" + rule.pattern))
        except Exception as exc:  # polars raises ComputeError for a bad regex
            raise SpecprofError(
                f"{source}: rule {i + 1} ({rule.category}): bad pattern: {str(exc).splitlines()[0]}",
                source,
            ) from None
        out.append(rule)
    return out


def default_rules() -> list[Rule]:
    text = resources.files("analyzer").joinpath("categories.toml").read_text()
    return _parse(text, "analyzer/categories.toml")


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
    return _parse(text, path) + rules


def categorize(ops: pl.DataFrame, rules: list[Rule]) -> pl.DataFrame:
    """Add a `category` column. Matching runs once per distinct name, not per op."""
    names = ops.select("kind", "name").unique()
    text = pl.col("name").cast(pl.Utf8).fill_null("")
    kind = pl.col("kind").cast(pl.Utf8)
    expr = pl.when(kind == "memcpy").then(pl.lit(MEMCPY)).when(kind == "memset").then(pl.lit(MEMSET))
    for rule in rules:
        expr = expr.when(text.str.contains("(?i)" + rule.pattern)).then(pl.lit(rule.category))
    names = names.with_columns(category=expr.otherwise(pl.lit(OTHER)).cast(pl.Categorical))
    # Join on the two key columns only and add the result: the ops' own columns are not copied.
    category = ops.select("kind", "name").join(names, on=["kind", "name"], how="left", nulls_equal=True,
                                               maintain_order="left").get_column("category")
    return ops.with_columns(category)
