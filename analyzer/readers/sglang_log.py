"""SGLang server logs -> the scheduler's `accept len` lines as a polars table.

SGLang's scheduler logs one `Decode batch.` line every `--decode-log-interval` decode iterations (default
40). With speculative decoding on, the line carries `accept len: x.xx, accept rate: y.yy, ` (0.5.23:
`metrics_reporter.py`; older versions print `accept len` alone):

    [2026-11-29 15:32:30 TP0] Decode batch. #running-req: 8, #token: 9000, token usage: 0.01, accept len: 2.63,
    accept rate: 0.41, cuda graph: True, gen throughput (token/s): 3880.12, #queue-req: 0,

(one line in the log). `accept len` = (correct drafts + batch size) / request-rounds over the interval, so it
counts the bonus token; `accept rate` = correct drafts / (request-rounds x (draft tokens - 1)).

Table: line (1-based), time (the bracketed timestamp as written, local time, or null), tp (rank, or null),
running (`#running-req`, or null), accept_len, accept_rate (or null), gen_throughput (or null).

An adaptive server (`--speculative-adaptive`, SGLang 0.5.16+) logs each change of its step count, when the
worker applies it (`EAGLEWorkerV2.apply_runtime_state`, tensor-parallel rank 0 only):

    [2026-12-06 05:01:02] Switch adaptive runtime state: steps 3 -> 2, draft_tokens 4 -> 3

Table (`step_switches`): line, time, tp, from_steps, to_steps, from_draft_tokens, to_draft_tokens. A switch
applies from the next cycle the worker starts on; a K the worker switched to between two cycles and left again
before the next one ran no cycle (the accept counts of one batch size's cycles moved its K, then the next
cycle's batch size chose another).

The settings the server logs at start-up (`server_args=ServerArgs(...)`) are read by readers/settings.py.
"""

from __future__ import annotations

import re

import polars as pl

from specprof.analyzer.errors import SpecprofError
from specprof.analyzer.readers.files import open_input

LOG_SCHEMA = {"line": pl.Int64, "time": pl.Utf8, "tp": pl.Int64, "running": pl.Int64,
              "accept_len": pl.Float64, "accept_rate": pl.Float64, "gen_throughput": pl.Float64}

_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_ACCEPT = re.compile(r"accept len: " + _NUM)
_RATE = re.compile(r"accept rate: " + _NUM)
_RUNNING = re.compile(r"#running-req: ([0-9]+)")
_THROUGHPUT = re.compile(r"gen throughput \(token/s\): " + _NUM)
_PREFIX = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)([^\]]*)\]")
_TP = re.compile(r"\bTP(\d+)\b")


def _found(lines, pattern: re.Pattern):
    """(line number, text, match, the line's time as written or None, its TP rank or None) for each of `lines` (an
    iterable of str) where `pattern` is found."""
    for number, text in enumerate(lines, start=1):
        m = pattern.search(text)
        if m is None:
            continue
        prefix = _PREFIX.match(text)
        tp = _TP.search(prefix.group(2)) if prefix else None
        yield number, text, m, prefix.group(1) if prefix else None, int(tp.group(1)) if tp else None


def parse(lines) -> pl.DataFrame:
    """The `accept len` lines among `lines` (an iterable of str)."""
    rows = []
    for number, text, m, time, tp in _found(lines, _ACCEPT):
        rate, running, thr = _RATE.search(text), _RUNNING.search(text), _THROUGHPUT.search(text)
        rows.append((
            number,
            time,
            tp,
            int(running.group(1)) if running else None,
            float(m.group(1)),
            float(rate.group(1)) if rate else None,
            float(thr.group(1)) if thr else None,
        ))
    return pl.DataFrame(rows, schema=LOG_SCHEMA, orient="row")


SWITCHES_SCHEMA = {"line": pl.Int64, "time": pl.Utf8, "tp": pl.Int64, "from_steps": pl.Int64, "to_steps": pl.Int64,
                   "from_draft_tokens": pl.Int64, "to_draft_tokens": pl.Int64}
_SWITCH = re.compile(r"Switch adaptive runtime state: steps (\d+) -> (\d+), draft_tokens (\d+) -> (\d+)")


def step_switches(lines) -> pl.DataFrame:
    """The adaptive worker's `Switch adaptive runtime state` lines among `lines` (an iterable of str), in order."""
    rows = [(number, time, tp, *map(int, m.groups())) for number, _, m, time, tp in _found(lines, _SWITCH)]
    return pl.DataFrame(rows, schema=SWITCHES_SCHEMA, orient="row")


def read_step_switches(path: str) -> pl.DataFrame:
    """The step-count switches of a server log file (empty: the server did not change K, or is not adaptive)."""
    with open_input(path, "a server log") as fh:
        return step_switches(fh)


def read_server_log(path: str) -> pl.DataFrame:
    """Read a server log file; SpecprofError when it cannot be read or has no `accept len` line."""
    with open_input(path, "a server log") as fh:
        table = parse(fh)
    if table.is_empty():
        raise SpecprofError(f"{path}: no `accept len:` line in this log: SGLang prints one every "
                            "--decode-log-interval decode iterations when speculative decoding is on", path)
    return table


def mean_accept_len(log: pl.DataFrame, path: str | None = None) -> float:
    """The log's mean accept length, its lines weighted by `#running-req` (the request-rounds each line covers,
    up to the interval); the plain mean where a line lacks it."""
    weights = log["running"]
    if weights.null_count() == 0 and int(weights.sum()) > 0:
        return float((log["accept_len"] * weights).sum() / weights.sum())
    return float(log["accept_len"].mean())
