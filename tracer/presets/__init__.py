"""Presets: one target table per engine, plus how to read a batch's size and the process's rank.

A preset module imports nothing heavy: it holds names and small functions that run only on traced calls.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from specprof.tracer.targets import CountsHook, Target

NAMES = ("sglang", "reference")
DEFAULT = "sglang"


@dataclass(frozen=True)
class Preset:
    name: str
    targets: tuple[Target, ...]
    counts: tuple[CountsHook, ...]
    # The cycle method's batch argument -> its number of requests, from host data only (or None).
    batch_size: Callable[[Any], "int | None"]
    # The first traced call's `self` -> this process's tensor-parallel rank (or None).
    rank: Callable[[Any], "int | None"]
    # The distribution whose version the start-up report names ("sglang", "specprof").
    engine: str

    @property
    def modules(self) -> set[str]:
        names = {m for t in self.targets for m, _, _ in t.candidates}
        return names | {m for h in self.counts for m, _, _ in h.candidates}


def get(name: str) -> Preset:
    """The preset called `name`; KeyError for a name not in NAMES."""
    if name not in NAMES:
        raise KeyError(f"unknown specprof preset {name!r}; known: {', '.join(NAMES)}")
    return importlib.import_module(f"specprof.tracer.presets.{name}").PRESET


def host_int_list(value: Any) -> "list[int] | None":
    """`value` as a list of ints if it is a host list/tuple of ints (never a tensor: that would synchronise)."""
    if isinstance(value, (list, tuple)) and set(map(type, value)) <= _INT:
        return list(value)
    return None


_INT = {int}


def int_attribute(owner: Any, name: str) -> "int | None":
    value = getattr(owner, name, None)
    return value if type(value) is int else None
