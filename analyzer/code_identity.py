"""What identifies the analyzer's code, for the caches' keys (readers/trace_cache.py, app/analysis_cache.py,
app/analyze.py): one hash of the bytes of every module of specprof.analyzer, its source files and its compiled
C modules alike, found where Python finds them (no list of files kept by hand).

The modules hashed are every module file in the package's own folders (a `.py`, a sourceless `.pyc`, a C module
under any of this Python's extension suffixes), which holds every module the process has loaded or may load,
and is the same set in every process, whichever commands' modules it happened to import; and any module of the
package loaded from a file outside those folders. The version of polars, which reads and computes every table,
and of Python are part of it too. A module file that cannot be read is not hashed as its name: it adds a value
drawn at random, so that the key matches no cache written before (and none after this process).

Computed once per process, on first use: about 1 MB of files, a few milliseconds (tests/test_cache.py).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
import sys
import threading

PACKAGE = __name__.rpartition(".")[0]  # specprof.analyzer
_SKIP = {"__pycache__"}
_lock = threading.Lock()
_hash: str | None = None


_SUFFIXES = sorted(importlib.machinery.all_suffixes(), key=len, reverse=True)  # `.abi3.so` before `.so`


def _module_name(folder: tuple[str, ...], name: str) -> str | None:
    """The dotted module name of the file `name` in the package's subfolder `folder`, or None when the file is
    no module (its suffix is none Python loads a module from)."""
    for suffix in _SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            stem = name[: -len(suffix)]
            return ".".join([PACKAGE, *folder] + ([] if stem == "__init__" else [stem]))
    return None


def code_files() -> list[tuple[str, str]]:
    """(module name, file) of every module hashed: each module file in the package's folders, and each loaded
    module of the package whose file lies outside them; sorted."""
    package = sys.modules[PACKAGE]
    found: dict[str, str] = {}  # file -> module
    for top in getattr(package, "__path__", []):
        top = os.path.realpath(top)
        for folder, subfolders, files in os.walk(top):  # (never into a link)
            subfolders[:] = sorted(d for d in subfolders if d not in _SKIP)
            inside = tuple(p for p in os.path.relpath(folder, top).split(os.sep) if p not in ("", "."))
            for name in files:
                module = _module_name(inside, name)
                if module is not None:
                    found[os.path.join(folder, name)] = module
    for module in loaded_modules():
        path = module_file(module)
        if path is not None and os.path.abspath(path) not in found and os.path.realpath(path) not in found:
            found[os.path.realpath(path)] = module.__name__
    return sorted((m, f) for f, m in found.items())


def loaded_modules() -> list:
    """The modules of the package that this process has loaded."""
    return [m for name, m in list(sys.modules.items())
            if m is not None and (name == PACKAGE or name.startswith(PACKAGE + "."))]


def module_file(module) -> str | None:
    """The file a loaded module was loaded from, or None for one that has none (a namespace package)."""
    spec = getattr(module, "__spec__", None)
    origin = getattr(spec, "origin", None) if spec is not None else None
    if origin and getattr(spec, "has_location", False):
        return origin
    return getattr(module, "__file__", None)


def digest_of(files) -> str:
    """A hash of the (module name, file) pairs `files`: each name and the bytes of its file, and the versions of
    polars and Python. A file that cannot be read adds a random value (`code_files`' module docstring)."""
    import polars

    h = hashlib.sha256()
    h.update(f"python {sys.version_info[:3]} polars {polars.__version__}\0".encode())
    for module, path in files:
        h.update(f"{module}\0".encode())
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError:
            h.update(b"\0unreadable\0" + os.urandom(16))
            continue
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()[:16]


def code_hash() -> str:
    """The hash of the analyzer's code (`digest_of(code_files())`), computed once per process."""
    global _hash
    with _lock:
        if _hash is None:
            _hash = digest_of(code_files())
        return _hash
