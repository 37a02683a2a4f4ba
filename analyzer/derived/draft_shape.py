"""The draft's shape (`DraftShape`): chain or tree, K, what verify checks and the most a cycle can accept, and grouped
decode steps, as the run's settings say (`draft_shape`; docs/economics.md, "Tree drafts"); `shape_notes`, what it
means for the economics in plain sentences.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specprof.analyzer.model.settings import RunSettings

FROM_STEPS_OPTION = "--steps"  # DraftShape.source: K given by the user, where the run's files say another


@dataclass(frozen=True)
class DraftShape:
    """What the run says of its draft: K (`steps`), SGLang's `--speculative-eagle-topk` (`topk`, 1: a chain) and
    `--speculative-num-draft-tokens`, `--num-continuous-decode-steps`, the engine's version, whether K adapts at run
    time (`adaptive`), and where the shape was read (`source`: model/settings.py FROM_SERVER_LOG or
    FROM_COMMAND_LINE, or FROM_STEPS_OPTION; None when nothing says)."""

    steps: int | None = None
    topk: int = 1
    num_draft_tokens: int | None = None
    continuous_steps: int = 1
    version: str | None = None
    source: str | None = None
    adaptive: bool = False

    @property
    def tree(self) -> bool:
        return self.topk > 1

    @property
    def speculative(self) -> bool:
        """The run drafts at all: K known and at least 1 (plain decoding, or K unknown: False)."""
        return bool(self.steps)

    @property
    def kind(self) -> str | None:
        """`tree`, `chain`, or None for a run that does not draft (or whose K nothing says)."""
        if not self.speculative:
            return None
        return "tree" if self.tree else "chain"

    @property
    def description(self) -> str | None:
        """The shape in one line, with where it was read: None for a run that does not draft."""
        if not self.speculative:
            return None
        tokens = self.verify_tokens
        checks = f"verify checks {tokens if tokens is not None else 'an unknown number of'} tokens per request"
        if self.tree:
            drafted = self.num_draft_tokens if self.num_draft_tokens is not None else "unknown"
            text = (f"tree, topk {self.topk}, {_steps(self.steps)}, {drafted} draft tokens ({checks}; a cycle accepts "
                    f"at most {self.max_accept_len}: one path and the bonus token)")
        else:
            text = f"chain, {_steps(self.steps)} ({checks}; a cycle accepts at most {self.max_accept_len})"
        return text + (f"; from {self.source}" if self.source else "")

    @property
    def verify_tokens(self) -> int | None:
        """Tokens per request the verify forward checks: the tree's draft tokens (SGLang's
        --speculative-num-draft-tokens), K + 1 for a chain (which SGLang enforces when topk is 1)."""
        if self.tree and self.num_draft_tokens is not None:
            return self.num_draft_tokens
        return None if self.steps is None else self.steps + 1

    @property
    def max_accept_len(self) -> int | None:
        """The most one cycle can accept per request: one path of K drafts, and the bonus token."""
        return None if self.steps is None else self.steps + 1

    def as_tree(self) -> dict | None:
        """JSON `draft_tree`: None for a chain draft."""
        if not self.tree:
            return None
        return {"topk": self.topk, "num_draft_tokens": self.num_draft_tokens, "verify_tokens": self.verify_tokens,
                "steps": self.steps, "max_accept_len": self.max_accept_len}


def _steps(n: int) -> str:
    return f"{n} step" + ("" if n == 1 else "s")


def draft_shape(settings: RunSettings, steps: int | None = None) -> DraftShape:
    """The draft's shape the run's `settings` say; `steps`: K given by the user (--steps), which wins where it
    differs. Its source is where K was read (where nothing says K: where topk was)."""
    shape = DraftShape(steps=settings.steps, topk=settings.topk or 1, num_draft_tokens=settings.draft_tokens,
                       continuous_steps=settings.continuous_steps or 1, version=settings.version,
                       source=settings.source("steps") or settings.source("topk"), adaptive=settings.adaptive)
    if steps is not None and steps != shape.steps:
        shape = replace(shape, steps=steps, source=FROM_STEPS_OPTION)
    return shape


# SGLang versions whose source was read for --num-continuous-decode-steps: the option is declared
# (srt/arg_groups/fields/schedule.py) and nothing else reads it.
CONTINUOUS_STEPS_UNUSED = ("0.5.23",)


def shape_notes(shape: DraftShape) -> list[str]:
    """Plain sentences on a tree draft, on a K that adapts at run time, and on grouped decode steps."""
    out = []
    if shape.adaptive and shape.speculative:
        out.append(f"adaptive speculation (--speculative-adaptive): SGLang changes the number of draft steps at run "
                   f"time with the acceptance and the batch size, so the cycles are of several K; K={shape.steps} is "
                   "the one it started with, and every number here is over the cycles of every K")
    if shape.tree:
        tokens = shape.verify_tokens
        out.append(f"tree draft (--speculative-eagle-topk {shape.topk}): each of the K={shape.steps} steps keeps "
                   f"{shape.topk} candidates, and verify checks {tokens if tokens is not None else 'an unknown number of'}"
                   " draft tokens per request, not K + 1; a cycle still accepts at most K + 1 = "
                   f"{shape.max_accept_len} tokens per request (one path of the tree, and the bonus token)")
    if shape.continuous_steps > 1:
        if shape.version in CONTINUOUS_STEPS_UNUSED:
            out.append(f"--num-continuous-decode-steps {shape.continuous_steps}: SGLang {shape.version} declares the "
                       "option but nothing in it reads it, so the decode cycles are single steps, as traced")
        else:
            out.append(f"--num-continuous-decode-steps {shape.continuous_steps} with SGLang "
                       f"{shape.version or '(version unknown)'}, whose handling of it specprof has not checked: each "
                       "traced cycle is one speculative forward (one verify) either way, so cycle times and accept "
                       "lengths stay per forward; steps run back to back show as cycles without the scheduler's gap "
                       "between them; compare only runs with the same setting")
    return out
