"""Cycles and the matching of accept counts to them.

A cycle is one call of the worker's per-batch entry (`cycle` phase). Its accept counts come from the engine
later: in SGLang's overlap mode one iteration later, from the scheduler's result processing, outside any cycle.
`AcceptMatcher` pairs them up:

- counts that arrive while this thread's cycle is open and has finished `verify` belong to that cycle (engines
  that read the counts synchronously, such as SGLang's v1 worker);
- otherwise they belong to the oldest closed cycle still waiting (FIFO). When the counts' length (one entry per
  request) matches the batch size of a later waiting cycle but not of the oldest, the older ones missed their
  counts (an idle batch, a verify that raised) and are written without them;
- a cycle waits only if it ran `verify` on a non-empty batch; a prefill-only cycle is written at once;
- at most `max_pending` cycles wait: the oldest beyond that is written without counts, and so is every waiting
  cycle at close.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from typing import Callable


class Cycle:
    """One traced cycle; `phases` holds the frames ([name, start_ns, end_ns]) opened inside it, in start order."""

    __slots__ = ("index", "start_ns", "end_ns", "phases", "batch_size", "steps", "draft_tokens", "counts",
                 "verified", "decode")

    def __init__(self, index: int, start_ns: int, batch_size: int | None):
        self.index = index
        self.start_ns = start_ns
        self.end_ns: int | None = None
        self.phases: list[list] = []
        self.batch_size = batch_size
        self.steps: int | None = None  # draft steps (K) the cycle's verify checked: 0 when the draft was skipped
        self.draft_tokens: int | None = None  # tokens per request that verify scored (a chain: steps + 1)
        self.counts: list[int] | None = None
        self.verified = False  # a `verify` phase ended inside this cycle
        self.decode = False  # a `verify` or plain `decode` phase ended inside this cycle: a decode cycle

    @property
    def awaits_counts(self) -> bool:
        return self.verified and self.batch_size != 0

    def json_line(self, pid: int, rank: int | None) -> str:
        """`json.dumps(self.record(pid, rank))` without spaces, formatted directly (the flusher's hot path)."""
        counts = self.counts
        if counts is None:
            accept = "null"
        else:
            mean = repr(sum(counts) / len(counts) + 1.0) if counts else "null"
            accept = f'{{"correct_drafts":[{",".join(map(str, counts))}],"accept_len_mean":{mean}}}'
        phases = ",".join(f"[{json_name(f[0])},{f[1]},{json_int(f[2])}]" for f in self.phases)
        return (
            f'{{"type":"cycle","index":{self.index},"pid":{pid},"rank":{json_int(rank)},'
            f'"start_ns":{self.start_ns},"end_ns":{json_int(self.end_ns)},"phases":[{phases}],'
            f'"batch_size":{json_int(self.batch_size)},"steps":{json_int(self.steps)},'
            f'"draft_tokens":{json_int(self.draft_tokens)},"accept":{accept}}}'
        )

    def record(self, pid: int, rank: int | None) -> dict:
        counts = self.counts
        if counts is None:
            accept = None
        else:
            accept = {
                "correct_drafts": counts,
                "accept_len_mean": (sum(counts) / len(counts) + 1.0) if counts else None,
            }
        return {
            "type": "cycle",
            "index": self.index,
            "pid": pid,
            "rank": rank,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "phases": [[f[0], f[1], f[2]] for f in self.phases],
            "batch_size": self.batch_size,
            "steps": self.steps,
            "draft_tokens": self.draft_tokens,
            "accept": accept,
        }


def json_int(value: "int | None") -> str:
    return "null" if value is None else str(int(value))


_NAMES: dict[str, str] = {}


def json_name(name: str) -> str:
    """A phase name as a JSON string (cached: there are a handful)."""
    text = _NAMES.get(name)
    if text is None:
        text = _NAMES[name] = json.dumps(name)
    return text


class AcceptMatcher:
    """Holds closed cycles until their counts arrive; hands each finished cycle to `emit` exactly once."""

    def __init__(self, emit: Callable[[Cycle], None], max_pending: int = 8):
        self._emit = emit
        self._max_pending = max(0, max_pending)
        self._pending: deque[Cycle] = deque()
        self._lock = threading.Lock()
        self.unmatched = 0  # counts that found no cycle to go to

    def cycle_closed(self, cycle: Cycle) -> None:
        if cycle.counts is not None or not cycle.awaits_counts:
            self._emit(cycle)
            return
        with self._lock:
            pending = self._pending
            pending.append(cycle)
            overflow = pending.popleft() if len(pending) > self._max_pending else None
        if overflow is not None:
            self._emit(overflow)

    def counts_arrived(self, counts: list[int], open_cycle: Cycle | None) -> None:
        if open_cycle is not None and open_cycle.verified and open_cycle.counts is None:
            open_cycle.counts = counts
            return
        with self._lock:
            pending = self._pending
            if not pending:
                self.unmatched += 1
                return
            n = len(counts)
            position = next(
                (i for i, c in enumerate(pending) if c.batch_size is None or c.batch_size == n), 0
            )
            missed = [pending.popleft() for _ in range(position)]
            matched = pending.popleft()
            matched.counts = counts
        for cycle in missed:
            self._emit(cycle)
        self._emit(matched)

    def drain(self) -> None:
        """Writes every waiting cycle without counts (at close)."""
        with self._lock:
            waiting = list(self._pending)
            self._pending.clear()
        for cycle in waiting:
            self._emit(cycle)

    def reset(self) -> None:
        """Forgets everything (in a forked child: fresh lock, in case the parent's was held at the fork)."""
        self._lock = threading.Lock()
        self._pending = deque()
        self.unmatched = 0

    def __len__(self) -> int:
        return len(self._pending)
