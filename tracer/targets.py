"""The target table: which methods to wrap, named across engine versions, and how they are patched.

A `Target` names one phase and the methods that implement it, as `(module, class, method)` candidates, one
per engine version (or per worker variant). A `CountsHook` names the methods that see accept counts already on
the host. Resolution patches every candidate whose module is imported and whose class has the method:

- the wrapper is set on the named (concrete) class itself, even when the method is inherited, so a subclass
  listed in the table gets its own patch and a base class is never patched for a class that was not named;
- a method is wrapped at most once per kind (`range` or `counts`): a method that already carries a specprof
  wrapper of that kind, on the class or inherited from a patched base, is left as it is;
- the wrapper keeps the method's name, docstring and signature (`functools.wraps`);
- resolution never raises: whatever goes wrong is a `Resolution` with `resolved=False` and a reason.

This module knows nothing about SGLang; the presets (tracer/presets/) hold the names.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass
from typing import Any, Callable

# (module, class, method), e.g. ("sglang.srt.speculative.eagle_worker_v2", "EAGLEWorkerV2", "verify").
Candidate = tuple[str, str, str]

RANGE = "range"
COUNTS = "counts"
# Resolution.detail of a candidate whose module this process has not imported (yet), and of one whose module
# does not exist in this engine version: both mean "a worker family not in use here", not a broken target.
NOT_IMPORTED = "module not imported"
NOT_FOUND = "no such module"
# The attribute a specprof wrapper carries: its kind (RANGE or COUNTS).
MARKER = "__specprof__"


@dataclass(frozen=True)
class Target:
    """One phase and the methods that run it, across versions and worker variants.

    A *step* target (`step` set) is a method that runs a whole engine step by itself, such as a plain
    (non-speculative) decode: called outside any traced cycle, it becomes a `cycle` range holding one range of
    the phase `step(args, kwargs)` names (`decode`, `prefill`; None: no range at all); called inside a traced
    cycle (a speculative worker's target forward), it is left untraced. `phase` names the target in reports.
    `step` must read host values only.

    `shape`, when set, reads the shape of the work the phase runs from the call's arguments (self first), as
    `(steps, draft_tokens)` (either may be None) or None, each time the phase opens inside a cycle; the cycle
    keeps the last shape read (its `steps` and `draft_tokens`). It must read host values only (ints an engine
    keeps on the host), never a tensor's data."""

    phase: str
    candidates: tuple[Candidate, ...]
    step: "Callable[[tuple, dict], str | None] | None" = None
    shape: "Callable[[tuple, dict], tuple[int | None, int | None] | None] | None" = None


@dataclass(frozen=True)
class CountsHook:
    """Methods that see the accept counts on the host.

    `read(args, kwargs, returned)` gets the wrapped call's arguments (self first) and return value after the
    method returned, and gives the correct drafts per request as a list of ints, or None. It must only read
    host values (lists, ints): never a tensor's data.
    """

    candidates: tuple[Candidate, ...]
    read: Callable[[tuple, dict, Any], "list[int] | None"]


@dataclass(frozen=True)
class Resolution:
    """What happened to one candidate."""

    kind: str  # RANGE or COUNTS
    phase: str | None  # the phase for RANGE, None for COUNTS
    candidate: Candidate
    resolved: bool
    detail: str  # "wrapped", "inherited wrapper", "already wrapped", or why it did not resolve

    @property
    def target(self) -> str:
        return ".".join(self.candidate)


class Patcher:
    """Sets wrappers on classes and remembers what was there, so `undo()` restores every class exactly."""

    _ABSENT = object()

    def __init__(self):
        self._log: list[tuple[type, str, Any]] = []

    def set(self, cls: type, name: str, value: Any) -> None:
        self._log.append((cls, name, cls.__dict__.get(name, self._ABSENT)))
        setattr(cls, name, value)

    def undo(self) -> None:
        while self._log:
            cls, name, previous = self._log.pop()
            try:
                if previous is self._ABSENT:
                    delattr(cls, name)
                else:
                    setattr(cls, name, previous)
            except Exception:  # a class that refuses: nothing else to do, keep undoing the rest
                pass

    def __len__(self) -> int:
        return len(self._log)


def is_wrapped(func: Any, kind: str) -> bool:
    """True when `func`, or anything it wraps (`__wrapped__` chain), is a specprof wrapper of `kind`."""
    for _ in range(64):  # a chain longer than this is not ours to follow
        if func is None:
            return False
        if getattr(func, MARKER, None) == kind:
            return True
        func = getattr(func, "__wrapped__", None)
    return False


def _find_static(cls: type, name: str) -> tuple[type | None, Any]:
    """The raw attribute (descriptor, not bound) and the class in the MRO that defines it."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass, klass.__dict__[name]
    return None, None


def patch_method(
    candidate: Candidate,
    kind: str,
    make_wrapper: Callable[[Callable], Callable],
    patcher: Patcher,
    import_module: bool = False,
) -> tuple[bool, str]:
    """Wraps one candidate method. Returns (resolved, detail); never raises.

    With `import_module=False` a module that is not imported yet is not resolved ("module not imported"); the
    post-import hook (tracer/posthook.py) calls this again once it is.
    """
    module_name, class_name, method_name = candidate
    try:
        module = sys.modules.get(module_name)
        if module is None:
            if not import_module:
                return False, NOT_IMPORTED
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                if exc.name and module_name.startswith(exc.name) and module_name[len(exc.name):] in ("", "."):
                    return False, NOT_FOUND
                return False, f"module not importable ({type(exc).__name__}: {exc})"
            except Exception as exc:  # ImportError, or the module failing at import on this machine
                return False, f"module not importable ({type(exc).__name__}: {exc})"
        cls = getattr(module, class_name, None)
        if not isinstance(cls, type):
            return False, f"no class {class_name}"
        owner, raw = _find_static(cls, method_name)
        if owner is None:
            return False, f"no method {method_name}"
        if isinstance(raw, (staticmethod, classmethod)):
            func, rebind = raw.__func__, type(raw)
        elif inspect.isfunction(raw):
            func, rebind = raw, None
        else:
            return False, f"{method_name} is not a plain method ({type(raw).__name__})"
        if is_wrapped(func, kind):
            return True, "already wrapped" if owner is cls else "inherited wrapper"
        wrapper = make_wrapper(func)
        patcher.set(cls, method_name, rebind(wrapper) if rebind is not None else wrapper)
        return True, "wrapped"
    except Exception as exc:  # never let a strange class break the engine's start-up
        return False, f"failed: {type(exc).__name__}: {exc}"
