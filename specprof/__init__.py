"""specprof: a profiler for speculative decoding (SGLang with EAGLE-3).

One installed name with two parts: `specprof.tracer` (runs inside the server: NVTX ranges, the sidecar, the nsys
wrapper) and `specprof.analyzer` (reads captures and analyses them). In the repository the two are the top-level
folders tracer/ and analyzer/; the build maps them under this package (pyproject.toml, `package-dir`), so that
installing specprof adds one top-level import name and shadows no other package.

Run from a checkout that is not installed (its root on PYTHONPATH, as the GPU scripts do), this package finds the
two folders beside its own: only those two names, nothing else of the checkout.
"""

import os as _os

__version__ = "0.1.0"

_PARTS = ("analyzer", "tracer")


def _checkout_finder():
    """A finder for specprof.analyzer and specprof.tracer in the checkout beside this folder, or None where they
    are installed inside it (a wheel) or the checkout lacks them."""
    import importlib.util

    here = _os.path.dirname(_os.path.abspath(__file__))
    if any(_os.path.isdir(_os.path.join(here, part)) for part in _PARTS):
        return None
    root = _os.path.dirname(here)
    folders = {f"{__name__}.{part}": _os.path.join(root, part) for part in _PARTS
               if _os.path.isfile(_os.path.join(root, part, "__init__.py"))}
    if not folders:
        return None

    class CheckoutParts:  # a meta path finder
        def find_spec(self, fullname, path=None, target=None):
            folder = folders.get(fullname)
            if folder is None:
                return None
            return importlib.util.spec_from_file_location(
                fullname, _os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])

    return CheckoutParts()


def _install_checkout_finder():
    import sys

    # First on the meta path: the two parts are those beside the specprof folder that was imported, also where an
    # editable install of another checkout maps the same names elsewhere (a copy of the tree on PYTHONPATH).
    finder = _checkout_finder()
    if finder is not None:
        sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "CheckoutParts"]
        sys.meta_path.insert(0, finder)


_install_checkout_finder()
