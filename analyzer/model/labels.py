"""The labels the analysis itself gives, which no trace names: the pseudo-phases of ops that no phase range
claims, the idle categories of the accounting, and the built-in category of collectives (the parent of their
kinds), which the per-rank analysis splits into wait and transfer. Every layer above reads them from here
(docs/attribution.md)."""

# Phase names for ops that no phase range claims.
IN_CYCLE = "(cycle)"  # launched inside a grouping range (cycle) but outside any phase range
UNATTRIBUTED = "(unattributed)"  # no enclosing range, or no launch record in the capture

# Categories of the time a stream sits idle (analyzer/core/accounting.py).
CPU_WAIT = "cpu_wait"  # the next op had not been launched yet: the GPU waited for the CPU
LAUNCH = "launch"  # idle after the next op's launch call began
IDLE = "idle"  # idle before an op whose launch is not in the capture
IDLE_CATEGORIES = (CPU_WAIT, LAUNCH, IDLE)

# The built-in category of collective kernels, and the parent of their kinds (`allreduce`, `all_to_all`, ...:
# core/categories.toml).
COMMUNICATION = "communication"

# Phases whose presence makes a cycle a decode cycle (a speculative `verify`, or a plain `decode` step: the
# tracer's names, tracer/ranges.py).
DECODE_PHASES = ("verify", "decode")
