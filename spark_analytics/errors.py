"""The one error type a report raises: a message a person can act on, printed without a traceback."""

from __future__ import annotations


class ReportError(Exception):
    """Bad window, unknown or unreachable source, missing table: `str()` says what to do."""
