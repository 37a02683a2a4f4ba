"""`specprof capture --sweep-steps K1,K2,... --block N`: what the capture adds to an SGLang server's command so that
the tracer can rotate K inside one launch (tracer/rotation.py), and the cases it refuses, in one line each.

The server is started with SGLang's adaptive runtime (`--speculative-adaptive`) and an adaptive config whose every
batch-size slot lists the swept Ks (`{"1": {"candidate_steps": [K1, K2, ...]}}`), written into the run directory's
tracer folder (RUN/.bootstrap/sweep-steps.json): SGLang then builds, at start-up, the runtime state of every swept
K (draft and verify backends, their CUDA graphs) for every CUDA-graph batch size. Nothing runs between cycles but
the tracer's choice of which of those states the next cycle uses.

Refused before anything runs, because SGLang (0.5.16-0.5.23, `adaptive_unsupported_reason`) would turn the
adaptive runtime off with only a warning in its log and the server would run one K: another preset than sglang;
a command that is not an SGLang EAGLE / EAGLE3 server; `--speculative-eagle-topk` above 1; attention DP,
two-batch overlap, PD multiplexing or multi-layer EAGLE; an adaptive config of the user's own; a
`--speculative-num-steps` that is not one of the swept Ks (SGLang refuses it); an installed SGLang without the
adaptive runtime (before 0.5.16). An SGLang the capture's Python cannot import is not checked here: the tracer
refuses in the server if its worker has no adaptive runtime.
"""

from __future__ import annotations

import importlib.util
import json
from typing import Sequence

from specprof.analyzer.errors import SpecprofError

CONFIG_NAME = "sweep-steps.json"
ADAPTIVE_MODULE = "sglang.srt.speculative.adaptive_runtime_state"
# SGLang flags with which its adaptive runtime is off (adaptive_unsupported_reason, 0.5.16-0.5.23)
OFF_FLAGS = {
    "--enable-dp-attention": "attention DP (adaptive decisions are not synchronized across DP ranks)",
    "--enable-two-batch-overlap": "two-batch overlap (the state swap would drop its attention wrapper)",
    "--enable-pdmux": "PD multiplexing (the state swap does not update its attention backends)",
    "--enable-multi-layer-eagle": "multi-layer EAGLE (MultiLayerEagleWorkerV2 has no adaptive runtime)",
}


def _value(command: Sequence[str], flag: str) -> str | None:
    for i, arg in enumerate(command):
        if arg == flag and i + 1 < len(command):
            return command[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def _has(command: Sequence[str], flag: str) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for arg in command)


def check(command: Sequence[str], steps: Sequence[int], block: int, preset: str | None) -> None:
    """One line (SpecprofError) where the server that `command` starts cannot rotate K."""
    head = "--sweep-steps"
    if preset != "sglang":
        raise SpecprofError(f"{head}: the rotation switches SGLang's adaptive runtime: it needs the sglang preset and "
                            "the tracer")
    if len(steps) < 2 or len(set(steps)) != len(steps) or min(steps) < 0:
        raise SpecprofError(f"{head}: give two or more different step counts, each 0 or more (e.g. 0,1,2,4)")
    if block < 1:
        raise SpecprofError(f"{head}: --block must be 1 or more decode cycles")
    algorithm = _value(command, "--speculative-algorithm")
    if algorithm is None:
        raise SpecprofError(f"{head}: the command starts no SGLang speculative server (no --speculative-algorithm): "
                            "nothing to rotate")
    if algorithm.upper() not in ("EAGLE", "EAGLE3"):
        raise SpecprofError(f"{head}: SGLang's adaptive runtime serves EAGLE and EAGLE3 only, not {algorithm}")
    topk = _value(command, "--speculative-eagle-topk")
    if topk is not None and topk != "1":
        raise SpecprofError(f"{head}: --speculative-eagle-topk {topk}: SGLang's adaptive runtime takes topk = 1 only "
                            "(it would run one K)")
    for flag, why in OFF_FLAGS.items():
        if _has(command, flag):
            raise SpecprofError(f"{head}: {flag}: SGLang turns its adaptive runtime off with {why}")
    if _has(command, "--speculative-adaptive-config"):
        raise SpecprofError(f"{head}: the command has its own --speculative-adaptive-config: the capture writes the "
                            "one whose candidate steps are the swept Ks; leave it out")
    given = _value(command, "--speculative-num-steps")
    if given is not None and given not in {str(k) for k in steps}:
        raise SpecprofError(f"{head}: --speculative-num-steps {given} is not a swept K (SGLang refuses a start K "
                            "outside the candidate steps): leave it out or sweep it")
    try:
        found = importlib.util.find_spec("sglang") is not None
    except (ImportError, ValueError):
        found = False
    if found:
        try:
            adaptive = importlib.util.find_spec(ADAPTIVE_MODULE) is not None
        except (ImportError, ValueError):
            adaptive = False
        if not adaptive:
            raise SpecprofError(f"{head}: the installed SGLang has no adaptive runtime ({ADAPTIVE_MODULE}, 0.5.16 "
                                "and later): it cannot change K in a running server")


def server_additions(command: Sequence[str], config_path: str) -> list[str]:
    """The flags added to the server's command."""
    extra = [] if _has(command, "--speculative-adaptive") else ["--speculative-adaptive"]
    return extra + ["--speculative-adaptive-config", config_path]


def config_text(steps: Sequence[int]) -> str:
    """SGLang's adaptive config: every batch size's slot holds every swept K."""
    return json.dumps({"1": {"candidate_steps": sorted(steps)}}) + "\n"


def environment_value(steps: Sequence[int], block: int) -> str:
    """SPECPROF_SWEEP_STEPS (tracer/rotation.py): the Ks in the order given, and the block."""
    return ",".join(map(str, steps)) + f":{block}"
