"""Run names for tables that set several runs side by side (sweep, compare, several traces): the part of each path
that tells it from the others, not the same cut prefix on every row."""

from __future__ import annotations

import os


def _parts(path: str) -> list[str]:
    return [p for p in os.path.normpath(str(path)).split(os.sep) if p not in ("", ".")]


def distinct(paths: list[str]) -> tuple[list[str], str]:
    """(names, prefix): each path less the folders all of them start with and the components all of them end with
    (`/runs/k2/run.sqlite`, `/runs/k4/run.sqlite` -> `k2`, `k4`, prefix `/runs`). One path alone, or paths that
    would not stay apart (the same path twice), are kept whole. `prefix`: the common folder left out ("" when
    none)."""
    split = [_parts(p) for p in paths]
    if not split:
        return [], ""
    shortest = min(len(s) for s in split)
    head = 0
    while head < shortest and len({s[head] for s in split}) == 1:
        head += 1
    tail = 0
    while tail < shortest - head and len({s[len(s) - 1 - tail] for s in split}) == 1:
        tail += 1
    names = ["/".join(s[head:len(s) - tail]) for s in split]
    if len(paths) == 1 or not all(names) or len(set(names)) < len(names):
        return [str(p) for p in paths], ""
    prefix = os.sep.join(split[0][:head])
    if prefix and os.path.isabs(str(paths[0])):
        prefix = os.sep + prefix
    return names, prefix
