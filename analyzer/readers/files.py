"""Opening an input file the user named: every failure is one SpecprofError naming the file."""

from __future__ import annotations

import os
from contextlib import contextmanager

from specprof.analyzer.errors import SpecprofError


@contextmanager
def open_input(path: str, what: str, binary: bool = False):
    """`open(path)` for reading (text as UTF-8 with bad bytes replaced, or binary); `what` names the kind of
    file in the error for a directory ("a sidecar file"). Read errors inside the block are turned too."""
    try:
        fh = open(path, "rb") if binary else open(path, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise SpecprofError(f"{path}: no such file", path) from None
    except IsADirectoryError:
        raise SpecprofError(f"{path}: a directory, not {what}", path) from None
    except OSError as exc:
        raise SpecprofError(f"{path}: cannot read ({exc.strerror})", path) from None
    with fh:
        try:
            yield fh
        except OSError as exc:
            raise SpecprofError(f"{path}: cannot read ({exc.strerror})", path) from None


def list_dir(path: str) -> list[str]:
    """The names in directory `path`, sorted; a failure (no permission, gone) is one SpecprofError naming it."""
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        raise SpecprofError(f"{path}: cannot list the directory ({exc.strerror}); give a directory you can "
                            "read, or the trace file itself", path) from None
