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
    text = resources.files("analyzer.core").joinpath("categories.toml").read_text()
    return _parse(text, "analyzer/core/categories.toml")


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
    return _parse(text, path) + rules


def categorize(ops: pl.DataFrame, rules: list[Rule]) -> pl.DataFrame:
    """Add a `category` column: memcpy and memset by the op's kind, kernels by the first rule whose
    pattern their name matches (`other` when none does). The patterns run once per distinct name;
    each op's category is then a dictionary lookup of its name (no join over the ops)."""
    names = ops.select(pl.col("name").unique()).get_column("name").drop_nulls()
    text = pl.col("name").cast(pl.Utf8).fill_null("")
    expr = pl.lit(OTHER)
    for rule in reversed(rules):
        expr = pl.when(text.str.contains("(?i)" + rule.pattern)).then(pl.lit(rule.category)).otherwise(expr)
    table = pl.DataFrame({"name": names}).select(expr.alias("category")).get_column("category")
    unnamed = pl.DataFrame({"name": pl.Series([None], dtype=pl.Utf8)}).select(expr).item()
    by_name = ops.get_column("name").replace_strict(names, table.cast(pl.Categorical), default=None,
                                                    return_dtype=pl.Categorical)
    kind = pl.col("kind")
    return ops.with_columns(by_name.alias("category")).with_columns(
        category=pl.when(kind == "memcpy").then(pl.lit(MEMCPY).cast(pl.Categorical))
        .when(kind == "memset").then(pl.lit(MEMSET).cast(pl.Categorical))
        .otherwise(pl.col("category").fill_null(pl.lit(unnamed).cast(pl.Categorical))))
