"""Getting the tracer into engine processes (tracer/plugin.py, tracer/posthook.py).

SGLang's own `load_plugins()` (the real 0.5.23, in fresh interpreters) loads the tracer through the
`sglang.srt.plugins` entry point of the editable install: inert without SPECPROF_TRACE=1, and with it the
worker module is patched right after it is imported. The bootstrap folder does the same for any interpreter
started with it on PYTHONPATH, and still runs the sitecustomize it shadows.
"""

from __future__ import annotations

import importlib.machinery
import json
import sys
import textwrap
from importlib import metadata

import pytest

from specprof.tracer import plugin
from specprof.tracer.posthook import PostImportHook
from tracer_helpers import TESTS, no_global_session, read_sidecar, run_python  # noqa: F401 (fixture)

PROBE = textwrap.dedent(
    """
    import json, sys
    from sglang.srt.plugins import load_plugins
    load_plugins()
    from specprof.tracer import plugin
    from specprof.tracer.posthook import PostImportHook
    from specprof.tracer.targets import is_wrapped
    loaded = "specprof.tracer.plugin" in sys.modules
    hooked = any(isinstance(f, PostImportHook) for f in sys.meta_path)
    heavy_before = sorted(m for m in ("specprof.tracer.session", "nvtx") if m in sys.modules)
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2, EagleDraftWorker
    from sglang.srt.managers.scheduler import Scheduler
    print(json.dumps({
        "loaded": loaded,
        "session": plugin.current() is not None,
        "hooked": hooked,
        "heavy_before": heavy_before,
        "verify": is_wrapped(EAGLEWorkerV2.verify, "range"),
        "draft": is_wrapped(EagleDraftWorker.draft, "range"),
        "accept": is_wrapped(Scheduler.process_batch_result, "range"),
        "counts": is_wrapped(EAGLEWorkerV2.on_verify_complete_cpu, "counts"),
    }))
    """
)


def _probe(env: dict) -> dict:
    done = run_python(PROBE, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_entry_point_is_installed():
    points = [e for e in metadata.entry_points(group="sglang.srt.plugins") if e.name == "specprof"]
    assert [e.value for e in points] == ["specprof.tracer.plugin:load"], "run scripts/test (pip install -e .)"


def test_sglang_load_plugins_loads_the_tracer_when_enabled(tmp_path):
    result = _probe({"SPECPROF_TRACE": "1", "SPECPROF_OUT_DIR": str(tmp_path)})
    assert result == {
        "loaded": True,
        "session": True,
        "hooked": True,  # the worker modules were not imported yet: patched on import
        "heavy_before": ["specprof.tracer.session"],  # nvtx waits until a target module is imported
        "verify": True,
        "draft": True,
        "accept": True,
        "counts": True,
    }


@pytest.mark.parametrize("value", [None, "0"], ids=["unset", "SPECPROF_TRACE=0"])
def test_sglang_load_plugins_leaves_everything_alone_otherwise(tmp_path, value):
    env = {"SPECPROF_OUT_DIR": str(tmp_path)}
    if value is not None:
        env["SPECPROF_TRACE"] = value
    result = _probe(env)
    assert result == {
        "loaded": True,  # SGLang did call the entry point...
        "session": False,  # ...which returned at once
        "hooked": False,
        "heavy_before": [],
        "verify": False,
        "draft": False,
        "accept": False,
        "counts": False,
    }
    assert list(tmp_path.iterdir()) == []


# -- bootstrap folder ------------------------------------------------------------------------------------------
BOOTSTRAP_PROBE = textwrap.dedent(
    """
    import json, sys
    from specprof.tracer import plugin
    session = plugin.current()
    import specprof.tracer.reference.engine as engine
    from specprof.tracer.targets import is_wrapped
    print(json.dumps({
        "session": session is not None,
        "preset": session.preset.name if session else None,
        "verify": is_wrapped(engine.ReferenceWorker.verify, "range"),
        "shadowed": getattr(sys.modules.get("sitecustomize"), "SHADOWED_RAN", None),
    }))
    """
)


@pytest.fixture
def shadowed_sitecustomize(tmp_path):
    folder = tmp_path / "theirs"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        "import sys\nsys.modules['sitecustomize'].SHADOWED_RAN = True\n"
    )
    return folder


@pytest.mark.parametrize("trace", [True, False], ids=["SPECPROF_TRACE=1", "unset"])
def test_bootstrap_dir_loads_the_tracer_in_new_interpreters(tmp_path, shadowed_sitecustomize, trace):
    folder = plugin.bootstrap_dir(str(tmp_path / "bootstrap"))
    assert folder == str(tmp_path / "bootstrap")
    env = {"PYTHONPATH": ":".join([folder, str(TESTS), str(shadowed_sitecustomize)]),
           "SPECPROF_PRESET": "reference", "SPECPROF_OUT_DIR": str(tmp_path)}
    if trace:
        env["SPECPROF_TRACE"] = "1"
    done = run_python(BOOTSTRAP_PROBE, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {
        "session": trace,
        "preset": "reference" if trace else None,
        "verify": trace,
        "shadowed": True,  # the sitecustomize it shadows still ran
    }


def test_bootstrap_dir_is_idempotent(tmp_path):
    first = plugin.bootstrap_dir(str(tmp_path / "b"))
    content = (tmp_path / "b" / "sitecustomize.py").read_text()
    assert plugin.bootstrap_dir(str(tmp_path / "b")) == first
    assert (tmp_path / "b" / "sitecustomize.py").read_text() == content
    compile(content, "sitecustomize.py", "exec")


# -- install in-process ------------------------------------------------------------------------------------------
def test_load_is_inert_without_the_variable(monkeypatch, no_global_session):
    monkeypatch.delenv("SPECPROF_TRACE", raising=False)
    meta_path = list(sys.meta_path)
    plugin.load()
    assert plugin.current() is None and sys.meta_path == meta_path


def test_install_once_per_process_and_uninstall(monkeypatch, tmp_path, no_global_session):
    monkeypatch.setenv("SPECPROF_TRACE", "1")
    monkeypatch.setenv("SPECPROF_PRESET", "reference")
    monkeypatch.setenv("SPECPROF_OUT_DIR", str(tmp_path))
    plugin.load()
    session = plugin.current()
    assert session is not None and session.preset.name == "reference"
    plugin.load()
    assert plugin.current() is session
    plugin.uninstall()
    assert plugin.current() is None


def test_an_unknown_preset_is_logged_not_raised(monkeypatch, caplog, no_global_session):
    monkeypatch.setenv("SPECPROF_TRACE", "1")
    monkeypatch.setenv("SPECPROF_PRESET", "vllm")
    with caplog.at_level("WARNING", logger="specprof.tracer"):
        plugin.load()
    assert plugin.current() is None
    assert "unknown specprof preset 'vllm'" in caplog.text


# -- post-import hook ----------------------------------------------------------------------------------------------
def test_post_import_hook_runs_after_the_module_executed(tmp_path, monkeypatch):
    (tmp_path / "specprof_hooked.py").write_text("class Worker:\n    def verify(self):\n        return 1\n")
    (tmp_path / "specprof_unwatched.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    def callback(name):
        module = sys.modules[name]
        seen.append((name, hasattr(module, "Worker")))

    hook = PostImportHook(["specprof_hooked"], callback)
    hook.install()
    try:
        import specprof_unwatched  # noqa: F401
        import specprof_hooked

        assert seen == [("specprof_hooked", True)]
        assert hook not in sys.meta_path  # nothing left to wait for
        assert isinstance(specprof_hooked.__loader__, importlib.machinery.SourceFileLoader)
        assert specprof_hooked.__spec__.loader is specprof_hooked.__loader__
    finally:
        hook.remove()
        for name in ("specprof_hooked", "specprof_unwatched"):
            sys.modules.pop(name, None)


def test_a_failing_callback_does_not_fail_the_import(tmp_path, monkeypatch):
    (tmp_path / "specprof_hooked2.py").write_text("VALUE = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def callback(name):
        raise RuntimeError("patching failed")

    hook = PostImportHook(["specprof_hooked2"], callback)
    hook.install()
    try:
        import specprof_hooked2

        assert specprof_hooked2.VALUE == 2
    finally:
        hook.remove()
        sys.modules.pop("specprof_hooked2", None)


def test_the_reference_engine_is_patched_when_it_is_imported_later(tmp_path, monkeypatch, no_global_session):
    import specprof.tracer.reference as package

    monkeypatch.delitem(sys.modules, "specprof.tracer.reference.engine", raising=False)  # restored after the test
    monkeypatch.delattr(package, "engine", raising=False)
    session = plugin.install("reference", str(tmp_path), handle_signals=False)
    import specprof.tracer.reference.engine as engine
    from specprof.tracer.targets import is_wrapped

    assert is_wrapped(engine.ReferenceWorker.forward_batch_generation, "range")
    assert session.unresolved() == []
