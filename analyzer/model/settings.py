"""What a run's server ran with (`RunSettings`): the engine, the draft's shape (K, topk, draft tokens), tensor
parallelism, grouped decode steps, the server's log interval, the target and draft models, and SGLang's adaptive
speculation, each with where it was read.

They are read once, when a run's files are read (readers/settings.py `read_settings`: the server log's start-up
line of resolved settings first, else the traced command line), and every analysis takes them from here: the
draft's shape (derived/draft_shape.py), the economics, the sweep and its setup check, the results store and the
JSON. The flag names themselves are known to readers/settings.py alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Where a setting was read (`RunSettings.sources`).
FROM_SERVER_LOG = "the server log's server_args"  # SGLang's start-up line: also what it chose itself
FROM_COMMAND_LINE = "the traced command line"  # the tracer's sidecar header's argv, else the manifest's command
# the engine as the tracer named it (its preset: sglang, reference) and its version, as the tracer recorded them in
# its sidecar header, else `specprof capture` in the manifest
FROM_TRACER = "the tracer's record"


@dataclass(frozen=True)
class RunSettings:
    """The settings one run's server ran with; a field is None where nothing the run left says it (then the
    engine's default holds: `setup` and the draft's shape say which). `sources`: field name -> where it was
    read (FROM_*); `notes`: values found but not taken, one sentence each (a count too large to be one)."""

    engine: str | None = None  # `sglang` or `reference` (the tracer's preset), else the traced program
    version: str | None = None  # the engine's version, where it has one (SGLang's)
    steps: int | None = None  # K, the draft steps of a cycle (SGLang's speculative_num_steps)
    topk: int | None = None  # candidates kept per draft step (SGLang's speculative_eagle_topk; 1: a chain)
    draft_tokens: int | None = None  # tokens a tree draft hands to verify (SGLang's speculative_num_draft_tokens)
    tp_size: int | None = None  # tensor-parallel size
    continuous_steps: int | None = None  # decode steps run back to back (SGLang's num_continuous_decode_steps)
    log_interval: int | None = None  # decode iterations per `Decode batch.` log line (decode_log_interval)
    target_model: str | None = None  # the target model's path
    draft_model: str | None = None  # the draft model's path
    adaptive: bool = False  # SGLang's adaptive speculation: K changes at run time with the acceptance
    adaptive_config: str | None = None  # ... and its JSON config (the candidate K per batch size), when given
    # the traced command line's model flags as given (flag without its dashes -> value): what names the model a run
    # serves in its `setup` (SGLang's target and draft paths, the reference engine's shape)
    model: dict = field(default_factory=dict)
    command_line: bool = False  # a traced command line was found
    sources: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def source(self, name: str) -> str | None:
        """Where the field `name` was read, or None where nothing said it."""
        return self.sources.get(name)

    @property
    def tokens(self) -> int | None:
        """Tokens per request the sweep counts a cycle of this run at: SGLang's draft tokens where it says them, else
        K + 1 (a chain's); None without K."""
        if self.steps is None:
            return None
        return self.draft_tokens if self.draft_tokens is not None else self.steps + 1

    @property
    def setup(self) -> dict | None:
        """What makes runs one workload (a sweep and a comparison refuse runs that differ in it): the engine, the
        model flags of the command line, the tensor-parallel size, topk and grouped decode steps (1 where not said).
        None without a traced command line."""
        if not self.command_line:
            return None
        return {"engine": self.engine, "model": dict(self.model), "tp": self.tp_size or 1, "topk": self.topk or 1,
                "continuous_steps": self.continuous_steps or 1}
