"""Errors a user can meet. The CLI prints them as one line and exits 2; never a traceback."""

from __future__ import annotations


class SpecprofError(Exception):
    """A problem with the user's input: message names the file and says what to do."""

    exit_code = 2

    def __init__(self, message: str, path: str | None = None):
        self.path = path
        super().__init__(message)
