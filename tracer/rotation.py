"""A step sweep inside one launch: the running SGLang server switches between step counts K in interleaved blocks
of decode cycles, round-robin, so that drift (warm-up, traffic, clocks, temperature) falls on every K alike.

With `SPECPROF_SWEEP_STEPS=K1,K2,...:N` (`specprof capture --sweep-steps K1,K2,... --block N`, which also starts
the server with `--speculative-adaptive` and an adaptive config whose candidate steps are the swept Ks at every
batch size, so SGLang builds the runtime state of every K, its CUDA graphs included, for every batch size):

- SGLang 0.5.16+'s adaptive worker (`EAGLEWorkerV2`) holds an `AdaptiveController` whose policy
  (`controller.params`, SGLang's `AdaptiveSpecPolicy` protocol) answers `get_steps_for_batch(bs)` at the start of
  every decode cycle (`forward_batch_generation` -> `activate_step_by_batch`), before the draft; the controller
  then swaps in the runtime state of that K (`apply_runtime_state`) where it differs from the worker's.
- At the worker's first traced cycle the tracer puts `StepRotation` in that policy's place: it answers the K of
  the current block (the Ks in the order given, N decode cycles each, round-robin), and tells the controller not
  to move K after a verify (`on_verify_complete` -> None: the EMA would fight the rotation); everything else
  (candidate steps, CUDA-graph batch sizes per K) is the policy SGLang built. Host ints only, nothing
  synchronises; a K is only ever chosen where the cycle starts, so no cycle switches in its middle.
- Each cycle's K is in its sidecar record (`steps`, `draft_tokens`: read from the verify input, the presets'
  `verify_shape`). The header holds the rotation asked for (`step_rotation`: steps, block); the footer what came
  of it (`step_rotation`: installed, switches, or `refused` with why).
- Refused, in one warning line and in the footer, never raised into SGLang: a worker without an adaptive
  controller (SGLang before 0.5.16; a worker family without adaptive: Standalone, MultiLayer; or the adaptive
  runtime that SGLang turned off at start-up: topk > 1, attention DP, two-batch overlap, PD multiplexing, which
  it only logs as a warning), or a swept K the controller built no runtime state for.
"""

from __future__ import annotations

import logging
from typing import Any

ENV = "SPECPROF_SWEEP_STEPS"

logger = logging.getLogger("specprof.tracer")


def parse(text: str) -> tuple[list[int], int]:
    """`K1,K2,...:N` -> ([K1, K2, ...], N): two or more distinct Ks >= 0, N >= 1 decode cycles a block."""
    steps_text, sep, block_text = text.partition(":")
    try:
        steps = [int(k) for k in steps_text.split(",")]
        block = int(block_text) if sep else 0
    except ValueError:
        raise ValueError(f"{text!r} is not K1,K2,...:N (step counts and the cycles of a block, e.g. 0,1,2,4:40)") \
            from None
    if len(steps) < 2 or len(set(steps)) != len(steps) or min(steps) < 0:
        raise ValueError(f"{text!r}: give two or more different step counts, each 0 or more")
    if block < 1:
        raise ValueError(f"{text!r}: the block must be 1 or more decode cycles")
    return steps, block


class StepRotation:
    """SGLang's adaptive policy (`AdaptiveSpecPolicy`) with K chosen by the rotation: `inner` is the policy the
    controller was built with; every method but the two that choose K is its."""

    def __init__(self, inner: Any, steps: list[int], block: int):
        self.inner = inner
        self.steps = list(steps)
        self.block = block
        self.decode_cycles = 0
        self.switches = 0
        self.current: int | None = None

    @property
    def candidate_steps(self) -> list[int]:
        return self.inner.candidate_steps

    def set_cuda_graph_bs(self, cuda_graph_bs):
        return self.inner.set_cuda_graph_bs(cuda_graph_bs)

    def cuda_graph_bs_for_step(self, step: int):
        return self.inner.cuda_graph_bs_for_step(step)

    def get_steps_for_batch(self, batch_size: int) -> int:
        """The K of the decode cycle starting now (called once per decode cycle, at its start)."""
        k = self.steps[(self.decode_cycles // self.block) % len(self.steps)]
        self.decode_cycles += 1
        if k != self.current:
            if self.current is not None:
                self.switches += 1
            self.current = k
        return k

    def on_verify_complete(self, num_correct_drafts_per_req, batch_size: int) -> None:
        return None  # the rotation, not the EMA, chooses K

    def summary(self) -> dict:
        return {"installed": True, "steps": self.steps, "block": self.block, "decode_cycles": self.decode_cycles,
                "switches": self.switches}


class Rotation:
    """Installs `StepRotation` on the first traced cycle of each worker (`cycle_starting`), or refuses once."""

    def __init__(self, steps: list[int], block: int):
        self.steps, self.block = steps, block
        self.policy: StepRotation | None = None
        self.refused: str | None = None
        self._seen: set[int] = set()

    def header(self) -> dict:
        return {"steps": self.steps, "block": self.block}

    def cycle_starting(self, owner: Any) -> None:
        """Runs before a traced cycle's body (the worker's `forward_batch_generation`): host attributes only."""
        key = id(owner)
        if key in self._seen:
            return
        self._seen.add(key)
        if self.policy is not None or self.refused is not None:
            return
        why = self._why_not(owner)
        if why is not None:
            self.refused = why
            logger.warning("specprof: --sweep-steps refused: %s; the server runs as it was started", why)
            return
        controller = owner.adaptive_controller
        self.policy = StepRotation(controller.params, self.steps, self.block)
        controller.params = self.policy

    def _why_not(self, owner: Any) -> str | None:
        worker = type(owner).__name__
        if not hasattr(owner, "adaptive_controller"):
            return (f"{worker} has no adaptive controller (SGLang 0.5.16 or later's EAGLEWorkerV2 has one; this "
                    "version or worker cannot change K in a running server)")
        controller = owner.adaptive_controller
        if controller is None:
            return (f"{worker}'s adaptive runtime is off (SGLang turns --speculative-adaptive off, with a warning in "
                    "its log, for topk > 1, attention DP, two-batch overlap or PD multiplexing; Standalone workers "
                    "never build it)")
        states = getattr(controller, "_states", None)
        params = getattr(controller, "params", None)
        if params is None or not hasattr(params, "get_steps_for_batch"):
            return f"{type(controller).__name__} has no policy with get_steps_for_batch (an unknown SGLang version)"
        if isinstance(params, StepRotation):
            return "a rotation is already installed"
        if isinstance(states, dict):
            missing = [k for k in self.steps if k not in states]
            if missing:
                return (f"the adaptive runtime holds no state for K = {', '.join(map(str, missing))} (its candidate "
                        f"steps are {sorted(states)}): start the server with an adaptive config listing every swept K")
        return None

    def reset(self) -> None:
        """In a forked child: its workers are met anew (a policy already installed stays, in the copied
        controller)."""
        self._seen = set()

    def summary(self) -> dict:
        if self.policy is not None:
            return self.policy.summary()
        return {"installed": False, "refused": self.refused or "no traced cycle ran"}


def from_environment(value: "str | None") -> "Rotation | None":
    """The rotation `SPECPROF_SWEEP_STEPS` asks for, or None (unset, or malformed: one warning)."""
    if not value:
        return None
    try:
        steps, block = parse(value)
    except ValueError as exc:
        logger.warning("specprof: %s=%s ignored: %s", ENV, value, exc)
        return None
    return Rotation(steps, block)
