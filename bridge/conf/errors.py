"""Errors that point at a place in a file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bridge.errors import HookbridgeError


@dataclass(frozen=True, slots=True)
class Position:
    path: str
    line: int  # 1-based
    col: int  # 1-based

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"


@dataclass(frozen=True, slots=True)
class ConfError:
    where: Position
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


class ConfErrors(HookbridgeError):
    """Every problem found in the config, rules and templates, in file order."""

    def __init__(self, errors: list[ConfError], partial: Any = None) -> None:
        self.errors = sorted(errors, key=lambda e: (e.where.path, e.where.line, e.where.col))
        # What could be read despite the errors (a bad config: its valid settings, defaults in
        # place of the bad ones), so the rules are still checked against it: all errors at once.
        self.partial = partial
        super().__init__("\n".join(str(e) for e in self.errors))
