"""Errors a user can meet. The CLI prints them as one line and exits 2; never a traceback.

Also the one cleaner of text that reaches a terminal (`clean`): every file, kernel or range name, and every
message that may hold one, is printed through it (render/format.py's tables, the CLI's error and note lines,
the capture's lines, the caches' notes, the progress line). It lives here, at the foundation, so that every
layer, and the tracer, uses the same one."""

from __future__ import annotations


def clean(text, width: int | None = None) -> str:
    """`text` with every character that is not printable (control characters such as ESC, BEL, CR and LF,
    which start terminal escape sequences such as OSC titles; format characters such as the right-to-left
    override U+202E; line and paragraph separators) replaced by "?", cut to `width` characters ("…" last).
    Nothing from a trace or a file name can then move the cursor, retitle the window or reorder a line."""
    s = "" if text is None else str(text)
    if not s.isprintable():
        s = "".join(ch if ch.isprintable() else "?" for ch in s)
    if width is not None and len(s) > width:
        s = s[: max(1, width - 1)] + "…"
    return s


def clean_lines(text: str) -> str:
    """Each line of `text` cleaned (`clean`), the line breaks kept."""
    return "\n".join(clean(line) for line in str(text).split("\n"))


class SpecprofError(Exception):
    """A problem with the user's input: message names the file and says what to do."""

    exit_code = 2

    def __init__(self, message: str, path: str | None = None):
        self.path = path
        super().__init__(message)
