"""Answers the import of two packages SGLang 0.5.16 names but a text-only EAGLE-3 server never runs, when they
are not installed: `tilelang` (DSA attention kernels; a 50 MB wheel) and `smg_grpc_servicer` (the gRPC
server). Each module it stands in for is named on stderr (`[stub] NAME`), so the server log says which were
used. A module that is installed is never touched. Put this folder on PYTHONPATH (scripts/sglang/gpu_runs.sh);
specprof's own bootstrap sitecustomize runs this one after itself.
"""

import importlib.abc
import importlib.machinery
import sys
import types

STUBBED = {"tilelang", "smg_grpc_servicer"}


class _Stub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {"__init__": lambda self, *a, **k: None, "__call__": lambda self, *a, **k: None})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in STUBBED:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            try:
                if finder.find_spec(name, path, target) is not None:
                    return None
            except Exception:
                pass
        sys.stderr.write(f"[stub] {name}\n")
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        module = _Stub(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


sys.meta_path.append(_Finder())
