"""A lazy post-import hook: run a callback right after a named module has been imported.

`PostImportHook` sits first in `sys.meta_path`. For a watched module it asks the other finders for the real
spec and hands the import system a loader proxy; once the real loader has executed the module, the proxy gives
the module back its real loader and calls `callback(module_name)`. Unwatched modules are never touched, and the
hook takes itself out of `sys.meta_path` once every watched module has been seen.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from typing import Callable, Iterable


class _CallbackLoader(importlib.abc.Loader):
    def __init__(self, inner, after: Callable[[object], None]):
        self._inner = inner
        self._after = after

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        inner = self._inner
        module.__loader__ = inner
        spec = getattr(module, "__spec__", None)
        if spec is not None:
            spec.loader = inner
        inner.exec_module(module)
        self._after(module)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class PostImportHook(importlib.abc.MetaPathFinder):
    def __init__(self, modules: Iterable[str], callback: Callable[[str], None]):
        self._waiting = set(modules)
        self._callback = callback
        self._local = threading.local()

    @property
    def waiting(self) -> frozenset[str]:
        return frozenset(self._waiting)

    def install(self) -> None:
        if self._waiting and self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self._waiting or getattr(self._local, "busy", False):
            return None
        self._local.busy = True
        try:
            spec = None
            for finder in list(sys.meta_path):
                if finder is self:
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._local.busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _CallbackLoader(spec.loader, self._imported)
        return spec

    def _imported(self, module) -> None:
        name = module.__name__
        self._waiting.discard(name)
        if not self._waiting:
            self.remove()
        try:
            self._callback(name)
        except Exception:  # the import itself succeeded: never fail it because of us
            pass
