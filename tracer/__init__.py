"""specprof tracer: NVTX phase ranges and a wall-clock sidecar inside SGLang's EAGLE worker.

Importing this package does nothing: nothing is patched unless SPECPROF_TRACE=1 (see specprof.tracer.plugin).
"""

DOMAIN = "specprof"
# The phase names the tracer emits, exactly (NVTX domain `specprof`).
# `decode` is a plain (non-speculative) decode step, inside its own `cycle` range: the baseline of a speculative run.
PHASES = ("cycle", "draft", "verify", "draft_extend", "prefill", "accept", "decode")
