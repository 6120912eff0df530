"""SQL / CQL statements with every event value a bind parameter.

`${x}` becomes a bind marker (`$1` for PostgreSQL, `?` for CQL) when the rule loads; the
statement text never contains event data. A placeholder written inside quotes
(`'${clientid}'`, the habit from EMQX examples) is taken as the same marker.
A placeholder anywhere else inside a string literal is refused: it could only
ever be a constant there.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bridge.events import Hookpoint
from bridge.render import MARK_RE, PLACEHOLDER, RenderError, StatementTemplate, Values, compile_parts

Marker = Callable[[int], str]


def pg_marker(n: int) -> str:
    return f"${n}"


def cql_marker(_: int) -> str:
    return "?"


def _literal_spans(text: str) -> list[tuple[int, int]]:
    """Where single-quoted literals are (start, end), '' escapes included."""
    spans, index = [], 0
    while (start := text.find("'", index)) >= 0:
        end = start + 1
        while True:
            end = text.find("'", end)
            if end < 0:
                raise RenderError("unterminated string literal", start)
            if text.startswith("''", end):
                end += 2
                continue
            break
        spans.append((start, end + 1))
        index = end + 1
    return spans


@dataclass(frozen=True, slots=True)
class SqlStatement:
    text: str  # with markers
    names: tuple[str, ...]  # placeholder per marker, in order

    @classmethod
    def compile(cls, source: str, hookpoint: Hookpoint, marker: Marker = pg_marker) -> SqlStatement:
        source = re.sub(r"'(\$\{[^}]*\})'", r"\1", source)  # '${x}' -> ${x}
        # A quote inside a placeholder (`${user_property.it's}`) names a key, it opens no literal.
        literals = _literal_spans(PLACEHOLDER.sub(lambda m: "_" * len(m.group(0)), source))
        for match in PLACEHOLDER.finditer(source):
            if any(start < match.start() < end for start, end in literals):
                raise RenderError(
                    f"placeholder {match.group(0)} inside a string literal; write it bare, it is bound", match.start()
                )
        compile_parts(source, hookpoint)  # validates names (raises RenderError with the offset)
        names: list[str] = []

        def replace(match: re.Match[str]) -> str:
            names.append(match.group(1).strip())
            return marker(len(names))

        return cls(PLACEHOLDER.sub(replace, source), tuple(names))

    def bind(self, values: Values) -> list[Any]:
        return [values[name] for name in self.names]


def split_statements(text: str) -> list[str]:
    """Split on `;` outside single-quoted literals; empty statements dropped."""
    statements: list[str] = []
    current: list[str] = []
    in_literal = False
    for char in text:
        if char == "'":
            in_literal = not in_literal
        if char == ";" and not in_literal:
            statements.append("".join(current))
            current = []
        else:
            current.append(char)
    statements.append("".join(current))
    return [s.strip() for s in statements if s.strip()]


def render_sql(template: StatementTemplate, values: Values, marker: Marker = pg_marker) -> list[tuple[str, list[Any]]]:
    """A template's statements, each with its own markers and bound values."""
    text, bound = template.render_text(values)
    text = re.sub("'(\x00\\d+\x00)'", r"\1", text)  # '{{ x }}' is bound like {{ x }}
    out = []
    for statement in split_statements(text):
        args: list[Any] = []

        def replace(match: re.Match[str], args: list[Any] = args) -> str:
            args.append(bound[int(match.group(1))])
            return marker(len(args))

        out.append((MARK_RE.sub(replace, statement), args))
    return out
