"""SGLang's adaptive speculation config (`--speculative-adaptive-config FILE`): a JSON object whose integer keys are
batch sizes, each with its `candidate_steps` (docs/sglang.md, "A rising load"). What the analysis takes from it is
its batch-size thresholds, the keys: the per-batch-size economics pools sizes with too few cycles into the buckets
they bound (derived/groups.py).

The path comes from the run's traced command line: untrusted input. It is read only where it is a regular file
that is no symbolic link, at most MAX_BYTES of it, and any failure is one sentence (the caller says it once and
pools by powers of two), never an error: the config is a help, not an input the analysis needs. A relative path is
taken relative to the run directory; where the path as given cannot be read (the capture ran on another machine),
a file of the same name in the run directory is read instead (a copy kept with the capture).
"""

from __future__ import annotations

import json
import os
import stat

MAX_BYTES = 1 << 20  # an adaptive config is a few lines
MAX_KEYS = 1024


class AdaptiveConfig:
    """`keys`: the config's batch-size thresholds, ascending (None: not read); `path`: the file read, or the one
    named; `reason`: why it was not read (None when it was)."""

    def __init__(self, path: str, keys: tuple[int, ...] | None = None, reason: str | None = None):
        self.path, self.keys, self.reason = path, keys, reason

    def describe(self) -> str:
        """One sentence for the output."""
        if self.keys is not None:
            return f"the batch-size thresholds of SGLang's adaptive config {self.path} ({', '.join(map(str, self.keys))})"
        return f"SGLang's adaptive config {self.path} could not be read ({self.reason})"


def read_adaptive_config(path: str, folder: str | None = None) -> AdaptiveConfig:
    """The config named `path` by a run whose run directory is `folder` (None: a trace file alone)."""
    named = path if os.path.isabs(path) or folder is None else os.path.join(folder, path)
    first = _read(named)
    if first.keys is not None or folder is None:
        return first
    beside = os.path.join(folder, os.path.basename(path))
    if os.path.abspath(beside) == os.path.abspath(named) or not os.path.lexists(beside):
        return first
    second = _read(beside)
    return second if second.keys is not None else first


def _read(path: str) -> AdaptiveConfig:
    try:
        if os.path.islink(path):
            return AdaptiveConfig(path, reason="a symbolic link, which specprof does not follow")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return AdaptiveConfig(path, reason="no such file here")
    except OSError as exc:
        return AdaptiveConfig(path, reason=exc.strerror or "cannot open")
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return AdaptiveConfig(path, reason="not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        return AdaptiveConfig(path, reason=exc.strerror or "cannot read")
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        return AdaptiveConfig(path, reason=f"larger than {MAX_BYTES >> 10} KiB")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return AdaptiveConfig(path, reason="not JSON")
    if not isinstance(doc, dict) or not doc:
        return AdaptiveConfig(path, reason="not a JSON object keyed by batch size")
    keys = set()
    for key in doc:
        text = key.strip()
        if not (text.isascii() and text.isdigit()) or len(text) > 9 or int(text) < 1:
            return AdaptiveConfig(path, reason="a key that is no batch size")
        keys.add(int(text))
    if len(keys) > MAX_KEYS:
        return AdaptiveConfig(path, reason=f"more than {MAX_KEYS} batch sizes")
    return AdaptiveConfig(path, keys=tuple(sorted(keys)))
