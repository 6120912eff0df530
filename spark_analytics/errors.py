"""The one error type a report raises: a message a person can act on, printed without a traceback."""

from __future__ import annotations


class ReportError(Exception):
    """Bad window, unknown or unreachable source, missing table: `str()` says what to do.

    `code` is the exit status: 2 for what the command line or config says wrong, 1 for the rest.
    """

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code
