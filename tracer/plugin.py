"""Getting the tracer into every engine process, and turning it on and off.

- `load()` is the entry point of SGLang's plugin group `sglang.srt.plugins` (0.5.11+), which SGLang calls at
  the start of every scheduler process (and in the launcher, detokenizer and DP controller).
- `bootstrap_dir(path)` writes a folder to put first on PYTHONPATH: its `sitecustomize.py` calls `load()` in
  every Python process started with that environment, for SGLang versions without plugins (and for any other
  program), then runs the next `sitecustomize` on the path after its folder, once per process.

Both are inert unless SPECPROF_TRACE=1: importing this module imports nothing but `os` and `sys`, and `load()`
returns at once. Enabled, `install()` patches the preset's targets that are already imported and hooks the
import of the rest (nothing else is imported until a target module is).

Environment: SPECPROF_TRACE=1 turns tracing on; SPECPROF_PRESET picks the target table (`sglang`, the default,
or `reference`); SPECPROF_OUT_DIR is where sidecars go (default: the process's working directory).
"""

from __future__ import annotations

import os
import sys

ENV_TRACE = "SPECPROF_TRACE"
ENV_PRESET = "SPECPROF_PRESET"
ENV_OUT_DIR = "SPECPROF_OUT_DIR"

_session = None
_fork_hook_registered = False


def enabled() -> bool:
    return os.environ.get(ENV_TRACE) == "1"


def load() -> None:
    """SGLang plugin entry point (and what bootstrap_dir's sitecustomize calls). Never raises."""
    if not enabled():
        return
    install()


def install(preset=None, out_dir: str | None = None, *, import_modules: bool = False, **options):
    """Starts tracing in this process (once; later calls return the same session). Never raises.

    `preset` is a name ($SPECPROF_PRESET or "sglang" by default) or a specprof.tracer.presets.Preset; `out_dir`
    defaults to $SPECPROF_OUT_DIR or the working directory
    when the sidecar opens. `import_modules=True` imports the target modules now instead of waiting for them.
    `options` go to TracingSession (tests: perf_counter_ns, max_queue, nvtx_factory, ...).
    Returns the TracingSession, or None when it could not start (the reason is logged).
    """
    global _session
    if _session is not None:
        return _session
    import logging

    try:
        from specprof.tracer import presets
        from specprof.tracer.session import TracingSession

        if not isinstance(preset, presets.Preset):
            preset = presets.get(preset or os.environ.get(ENV_PRESET) or presets.DEFAULT)
        session = TracingSession(preset, out_dir or os.environ.get(ENV_OUT_DIR) or None, **options)
        _session = session
        _register_fork_hook()
        session.activate(import_modules=import_modules)
        return session
    except Exception as exc:
        logging.getLogger("specprof.tracer").warning("specprof: tracing not started: %s", exc)
        _session = None
        return None


def current():
    """The running TracingSession, or None."""
    return _session


def uninstall() -> None:
    """Stops tracing: closes the sidecar and restores every patched method. Never raises."""
    global _session
    session, _session = _session, None
    if session is not None:
        try:
            session.deactivate()
        except Exception:
            pass


def _after_fork_in_child() -> None:
    if _session is not None:
        try:
            _session.after_fork_in_child()
        except Exception:
            pass


def _register_fork_hook() -> None:
    global _fork_hook_registered
    if not _fork_hook_registered and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _fork_hook_registered = True


_SITECUSTOMIZE = '''\
"""Written by specprof (specprof.tracer.plugin.bootstrap_dir). Loads the specprof tracer when SPECPROF_TRACE=1,
then runs the next sitecustomize module on the path after this file's folder, if there is one. It runs once per
process: a later sitecustomize that chains back to this one (by searching the whole path but its own folder)
finds it done."""
import os
import sys
import types

_RAN = "_specprof_sitecustomize_ran"


def _specprof_load():
    if os.environ.get("SPECPROF_TRACE") != "1":
        return
    try:
        try:
            from specprof.tracer import plugin
        except ImportError:
            sys.path.append({root!r})
            from specprof.tracer import plugin
        plugin.load()
    except Exception as exc:
        import logging

        logging.getLogger("specprof.tracer").warning("specprof: tracer not loaded: %s", exc)


def _run_next_sitecustomize():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    folders = [os.path.abspath(p or os.curdir) for p in sys.path]
    after = sys.path[folders.index(here) + 1:] if here in folders else []
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", after)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if _RAN not in sys.modules:
    sys.modules[_RAN] = types.ModuleType(_RAN)
    _specprof_load()
    _run_next_sitecustomize()
'''


def bootstrap_dir(path: str) -> str:
    """Creates `path` (if needed) with a `sitecustomize.py` that loads the tracer in every Python process
    whose PYTHONPATH starts with `path` and whose environment has SPECPROF_TRACE=1. Returns `path`.

    Use: `env["PYTHONPATH"] = bootstrap_dir(d) + os.pathsep + env.get("PYTHONPATH", "")`.
    The file also makes `specprof` importable from this installation (a checkout or site-packages) when the
    workload's Python does not find it on its own path.

    Nothing is written through a link: `path` is made (its parents too, as named) or must be a folder, not a
    link (OSError), and `sitecustomize.py` is a new file renamed into that folder, opened once
    (specprof.analyzer.safe_files).
    """
    import specprof
    from specprof.analyzer import safe_files

    root = os.path.dirname(os.path.dirname(os.path.abspath(specprof.__file__)))
    safe_files.make_folders(os.path.dirname(os.path.abspath(path)))
    folder = safe_files.own_folder(path)
    try:
        safe_files.replace("sitecustomize.py", _SITECUSTOMIZE.format(root=root), dir_fd=folder)
    finally:
        os.close(folder)
    return str(path)
