"""`key = value` lines with their positions.

Comments start with `#` at the beginning of a line or after whitespace outside
a double-quoted string, so JSON values such as `{"topic": "#"}` keep their `#`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from bridge.conf.errors import ConfError, Position

_KEY = re.compile(r"[A-Za-z0-9_.$\-]+")


@dataclass(frozen=True, slots=True)
class Entry:
    key: str
    value: str
    key_at: Position
    value_at: Position

    def at(self, offset: int) -> Position:
        """Position of character `offset` of the value."""
        return Position(self.value_at.path, self.value_at.line, self.value_at.col + offset)


def outside_strings(text: str) -> Iterator[tuple[int, str]]:
    """(index, char) for each character outside double-quoted strings (backslash escapes
    honoured); the quotes themselves are not yielded. Shared by the comment stripper and the
    JSON nesting check, which must both ignore what a string holds."""
    in_string = escaped = False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        else:
            yield index, char


def _strip_comment(text: str) -> str:
    for index, char in outside_strings(text):
        if char == "#" and (index == 0 or text[index - 1] in " \t"):
            return text[:index]
    return text


def read_entries(path: str, text: str) -> tuple[list[Entry], list[ConfError]]:
    """Split a file into entries; malformed lines become errors."""
    entries: list[Entry] = []
    errors: list[ConfError] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key_col = len(raw) - len(raw.lstrip()) + 1
        key_match = _KEY.match(raw, key_col - 1)
        eq = raw.find("=", key_col - 1)
        if eq < 0:
            errors.append(ConfError(Position(path, number, key_col), "expected 'key = value'"))
            continue
        if key_match is None or raw[key_match.end() : eq].strip():
            errors.append(ConfError(Position(path, number, key_col), f"bad key {raw[key_col - 1 : eq].strip()!r}"))
            continue
        after = raw[eq + 1 :]
        value = _strip_comment(after)
        leading = len(value) - len(value.lstrip())
        value_col = eq + 2 + leading
        value = value.strip()
        entries.append(
            Entry(
                key=key_match.group(0),
                value=value,
                key_at=Position(path, number, key_col),
                value_at=Position(path, number, value_col),
            )
        )
    return entries, errors
