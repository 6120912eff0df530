"""Errors that point at a place in a file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bridge.errors import HookbridgeError


def printable(text: str) -> str:
    """`text` with every character a terminal would act on (control characters, escape sequences'
    ESC, bidirectional overrides: whatever is not printable, space aside) written as a Python
    escape, so a path or value echoed in a message cannot move the cursor, retitle the window or
    reorder what the user reads."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == " " else ascii(c)[1:-1] for c in text)


@dataclass(frozen=True, slots=True)
class Position:
    path: str
    line: int  # 1-based
    col: int  # 1-based

    def __str__(self) -> str:
        return f"{printable(self.path)}:{self.line}:{self.col}"


@dataclass(frozen=True, slots=True)
class ConfError:
    where: Position
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {printable(self.message)}"


class ConfErrors(HookbridgeError):
    """Every problem found in the config, rules and templates, in file order."""

    def __init__(self, errors: list[ConfError], partial: Any = None) -> None:
        self.errors = sorted(errors, key=lambda e: (e.where.path, e.where.line, e.where.col))
        # What could be read despite the errors (a bad config: its valid settings, defaults in
        # place of the bad ones), so the rules are still checked against it: all errors at once.
        self.partial = partial
        super().__init__("\n".join(str(e) for e in self.errors))
