"""One tracing session in one process: a preset's targets patched, a recorder, a sidecar, and their lifecycle.

- `activate()` patches every target whose module is already imported and hooks the import of the others
  (tracer/posthook.py), so a worker module is patched right after it is imported, before anyone calls it.
- The first traced call starts the session: the sidecar opens (header, a paired clock reading), exit and signal
  handlers are installed, and targets that did not resolve are logged once, with the engine's version (at
  once instead, when `activate(import_modules=True)` imported every target module).
- Optional, from the environment (or the constructor): CUDA events at phase boundaries (`SPECPROF_GPU_EVENTS=1`,
  tracer/gpu_events.py), a capture window in decode cycles (`SPECPROF_CAPTURE_CYCLES=W:N`, tracer/window.py) and a
  step rotation (`SPECPROF_SWEEP_STEPS=K1,K2,...:N`, tracer/rotation.py).
- `close()` writes the cycles still waiting for accept counts, a last clock reading and the footer.
- `deactivate()` also restores every patched class and removes the import hook.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from importlib import metadata
from typing import Any, Callable

from specprof.tracer import clock, gpu_events, rotation, window
from specprof.tracer.cycles import AcceptMatcher
from specprof.tracer.posthook import PostImportHook
from specprof.tracer.presets import Preset
from specprof.tracer.ranges import NvtxRanges, Recorder, counts_wrapper, range_wrapper
from specprof.tracer.sidecar import SCHEMA, ExitFlush, Sidecar
from specprof.tracer.targets import COUNTS, NOT_FOUND, NOT_IMPORTED, RANGE, Candidate, Patcher, Resolution, patch_method

logger = logging.getLogger("specprof.tracer")


def _version(distribution: str) -> str | None:
    module = sys.modules.get(distribution)
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return metadata.version(distribution)
    except Exception:
        return None


class TracingSession:
    def __init__(
        self,
        preset: Preset,
        out_dir: str | None = None,
        *,
        max_queue: int = 10_000,
        max_pending: int = 8,
        flush_interval_s: float = 0.1,
        sync_every_ns: int = 1_000_000_000,
        perf_counter_ns: Callable[[], int] = time.perf_counter_ns,
        nvtx_factory: Callable[[], Any] = NvtxRanges,
        handle_signals: bool = True,
        gpu_time: bool | None = None,
        capture_cycles: str | None = None,
        profiler: Callable[[], tuple[Callable[[], None], Callable[[], None]]] | None = None,
        sweep_steps: str | None = None,
    ):
        """`gpu_time`: record CUDA events at phase boundaries (default: $SPECPROF_GPU_EVENTS == "1");
        `capture_cycles`: "W:N", a capture window in decode cycles (default: $SPECPROF_CAPTURE_CYCLES);
        `profiler`: what gives the window its (start, stop) calls (tests; default torch.cuda.profiler);
        `sweep_steps`: "K1,K2,...:N", the step rotation (default: $SPECPROF_SWEEP_STEPS, tracer/rotation.py)."""
        self.preset = preset
        self.patcher = Patcher()
        self.sidecar = Sidecar(out_dir, max_queue=max_queue, flush_interval_s=flush_interval_s)
        self.matcher = AcceptMatcher(self.sidecar.put, max_pending=max_pending)
        self.recorder = Recorder(
            matcher=self.matcher,
            emit_range=self.sidecar.put,
            batch_size=preset.batch_size,
            on_start=self._start,
            clock_sync=self._clock_sync,
            sync_every_ns=sync_every_ns,
            perf_counter_ns=perf_counter_ns,
        )
        if gpu_time is None:
            gpu_time = os.environ.get(gpu_events.ENV) == "1"
        if gpu_time:
            self.recorder.events = gpu_events.GpuEvents(self.sidecar.put)
        if capture_cycles is None:
            capture_cycles = os.environ.get(window.ENV)
        extra = {"profiler": profiler} if profiler is not None else {}
        self.recorder.window = window.from_environment(capture_cycles, self.sidecar.put,
                                                       perf_counter_ns=perf_counter_ns, **extra)
        if sweep_steps is None:
            sweep_steps = os.environ.get(rotation.ENV)
        self.recorder.rotation = rotation.from_environment(sweep_steps)
        self._perf_counter_ns = perf_counter_ns
        self._nvtx_factory = nvtx_factory
        self._nvtx_ready = False
        self._handle_signals = handle_signals
        self._exit = ExitFlush(self.flush, self.close)
        self._hook: PostImportHook | None = None
        self.active = False
        self.reported = False
        self.resolutions: dict[tuple[str, str | None, Candidate], Resolution] = {}
        for target in preset.targets:
            for candidate in target.candidates:
                self._note(RANGE, target.phase, candidate, False, NOT_IMPORTED)
        for hook in preset.counts:
            for candidate in hook.candidates:
                self._note(COUNTS, None, candidate, False, NOT_IMPORTED)

    # -- patching ------------------------------------------------------------------------------------------
    def activate(self, import_modules: bool = False) -> None:
        """Patches imported target modules now (all of them with `import_modules`) and the rest on import."""
        if self.active:
            return
        self.active = True
        waiting = []
        for module in sorted(self.preset.modules):
            if module in sys.modules or import_modules:
                self.patch_module(module, import_module=import_modules)
            else:
                waiting.append(module)
        if waiting:
            self._hook = PostImportHook(waiting, self.patch_module)
            self._hook.install()
        if import_modules:
            self._report()  # every target module had its chance: say now what did not resolve

    def patch_module(self, module: str, import_module: bool = False) -> None:
        """Wraps every candidate of `module`: phase ranges first, so a counts wrapper on the same method (v1's
        verify) is the outer one and sees its cycle after `verify` ended."""
        if not self.active:
            return
        for target in self.preset.targets:
            make = range_wrapper(self.recorder, target.phase, target.step, target.shape)
            for candidate in target.candidates:
                if candidate[0] == module:
                    ok, detail = patch_method(candidate, RANGE, make, self.patcher, import_module)
                    self._note(RANGE, target.phase, candidate, ok, detail)
        for hook in self.preset.counts:
            make = counts_wrapper(self.recorder, hook.read)
            for candidate in hook.candidates:
                if candidate[0] == module:
                    ok, detail = patch_method(candidate, COUNTS, make, self.patcher, import_module)
                    self._note(COUNTS, None, candidate, ok, detail)
        if len(self.patcher) and not self._nvtx_ready:
            self._prepare_nvtx()

    def _note(self, kind: str, phase: str | None, candidate: Candidate, ok: bool, detail: str) -> None:
        self.resolutions[(kind, phase, candidate)] = Resolution(kind, phase, candidate, ok, detail)

    def _prepare_nvtx(self) -> None:
        # Imported once the process has something to trace, so that the first traced call does not pay it.
        self._nvtx_ready = True
        try:
            self.recorder.nvtx = self._nvtx_factory()
        except Exception as exc:
            logger.warning("specprof: NVTX ranges are off (%s); the sidecar is still written", exc)

    def unresolved(self) -> list[tuple[int, str]]:
        """One (logging level, line) per target (a phase of one worker family, or the accept counts) none of
        whose candidates resolved. A target none of whose modules was imported belongs to a worker family (or
        an engine version) this process does not use: DEBUG. One whose module is imported but lacks the class
        or the method is an engine version the table does not know: WARNING, naming the missing names."""
        lines = []
        unused: set[str] = set()
        groups = [(RANGE, t.phase, t.candidates) for t in self.preset.targets]
        # The counts hooks are one target: each reads another version's shape of the same counts.
        counts = tuple(c for h in self.preset.counts for c in h.candidates)
        if counts:
            groups.append((COUNTS, None, counts))
        for kind, phase, candidates in groups:
            found = [self.resolutions[(kind, phase, c)] for c in candidates]
            if any(r.resolved for r in found):
                continue
            missing = [r for r in found if r.detail not in (NOT_IMPORTED, NOT_FOUND)]
            if missing:
                what = f"phase {phase!r}" if kind == RANGE else "accept counts"
                names = "; ".join(f"{r.target}: {r.detail}" for r in missing)
                lines.append((logging.WARNING, f"{what}: no target resolved: {names}"))
            else:
                unused.update(r.candidate[0] for r in found)
        if unused:
            lines.append((logging.DEBUG, "worker families not in use in this process (modules not imported or "
                          f"not in this version): {', '.join(sorted(unused))}"))
        return lines

    # -- start, clock, close -------------------------------------------------------------------------------
    def _start(self, owner: Any) -> None:
        if not self._nvtx_ready:
            self._prepare_nvtx()
        self._report()
        try:
            self.sidecar.rank = self.preset.rank(owner)
        except Exception:
            self.sidecar.rank = None
        try:
            first = [clock.read(self._mark, self._perf_counter_ns)]
        except Exception:  # the sidecar opens all the same, without its first clock reading
            self.recorder.faults += 1
            first = []
        opened = self.sidecar.open(self.header(), first)
        if opened and self._handle_signals:
            self._exit.install()
        if self.recorder.window is not None:
            self.recorder.window.process_started()

    def _report(self) -> None:
        if self.reported:
            return
        self.reported = True
        version = _version(self.preset.engine)
        for level, line in self.unresolved():
            logger.log(level, "specprof: %s %s: %s", self.preset.engine, version, line)

    def _mark(self, message: str) -> None:
        try:
            self.recorder.nvtx.mark(message)
        except Exception:
            self.recorder.faults += 1

    def _clock_sync(self) -> None:
        self.sidecar.put(clock.read(self._mark, self._perf_counter_ns))

    def header(self) -> dict:
        return {
            "type": "header",
            "schema": SCHEMA,
            "pid": os.getpid(),
            "rank": self.sidecar.rank,
            "host": socket.gethostname(),
            "argv": list(sys.argv),
            "preset": self.preset.name,
            "versions": {name: _version(name) for name in ("specprof", "sglang", "torch")},
            "clock": clock.describe(),
            "gpu_time": self.recorder.events is not None,
            "capture_cycles": None if self.recorder.window is None
            else [self.recorder.window.skip, self.recorder.window.count],
            **({} if self.recorder.rotation is None else {"step_rotation": self.recorder.rotation.header()}),
            "targets": [
                {
                    "phase": r.phase,
                    "kind": r.kind,
                    "target": r.target,
                    "resolved": r.resolved,
                    "detail": r.detail,
                }
                for r in self.resolutions.values()
            ],
        }

    def flush(self) -> None:
        self.sidecar.flush()

    def close(self, reason: str = "exit") -> None:
        """Writes waiting cycles without counts, a last clock reading and the footer. Never raises."""
        if not self.sidecar.is_open:
            return
        footer = {"unmatched_accepts": self.matcher.unmatched, "reason": reason}
        if self.recorder.rotation is not None:
            try:
                footer["step_rotation"] = self.recorder.rotation.summary()
            except Exception:
                self.recorder.faults += 1
        for step in (self.matcher.drain, lambda: self._close_events(footer), self._clock_sync):
            try:
                step()
            except Exception:
                self.recorder.faults += 1
        footer["tracer_faults"] = self.recorder.faults  # last: the faults of closing counted too
        self.sidecar.close(footer)

    def _close_events(self, footer: dict) -> None:
        if self.recorder.events is not None:
            footer.update(self.recorder.events.close())

    def deactivate(self) -> None:
        """Closes the sidecar, restores every patched class and removes the import hook."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self.close("uninstall")
        self._exit.uninstall()
        self.patcher.undo()
        self.active = False

    def after_fork_in_child(self) -> None:
        self.sidecar.after_fork_in_child()
        self.recorder.after_fork_in_child()
        for helper in (self.recorder.events, self.recorder.window, self.recorder.rotation):
            if helper is not None:
                helper.reset()
        self._exit = ExitFlush(self.flush, self.close)
