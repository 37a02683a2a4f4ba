"""A trace cut to a window (--cycle-window, --time-window, --skip-warmup), read as little as the window needs.

An nsys export that is not in the cache of parsed tables is read in part (readers/nsys/window.py: the NVTX
ranges, the columns that decide what the window keeps, then only the window's rows), and core/window.py's
`select` keeps from that exactly what it keeps from the whole trace. A cached export, a Kineto trace, and an
export whose tables cannot be read from their pages are read whole, then cut, as before. A window read from
part of an export does not fill the cache (it holds the window's rows only)."""

from __future__ import annotations

from specprof.analyzer import progress
from specprof.analyzer.core.window import Window, hull, select
from specprof.analyzer.model.trace import Trace
from specprof.analyzer.readers import trace_cache
from specprof.analyzer.readers.inputs import resolve
from specprof.analyzer.readers.load import is_kineto_file, load_trace
from specprof.analyzer.readers.nsys import read_window


def load(path: str, window: Window, grouping, cache: bool) -> Trace:
    """The trace at `path` (a file or a run directory), cut to `window` (the whole trace when it is empty)."""
    if not window:
        return load_trace(path, cache=cache)
    export = resolve(path)
    part = None
    if not is_kineto_file(export) and not (cache and trace_cache.matching_folder(export)):
        part = read_window(export, lambda ranges, first: hull(ranges, first, window, grouping, export))
    if part is None:
        trace, whole = load_trace(path, cache=cache), None
    else:
        trace, whole = part
    with progress.step("selecting the window"):
        return select(trace, window, grouping, whole=whole)
