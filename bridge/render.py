"""Placeholders and Jinja2 templates, rendered so every event value stays a bound argument.

A Redis command is split on spaces into arguments once, when the rule loads;
`${x}` placeholders are filled inside their argument, so no value can split an
argument or add one. A Jinja2 template may choose structure (which commands,
which statements), but every `{{ expression }}` it outputs becomes a bound
argument too: the template engine's `finalize` hook swaps each output value for
a marker, and markers are replaced by the values after the text is split.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
import jinja2.sandbox

from bridge.errors import HookbridgeError
from bridge.events import (
    KEYED_PLACEHOLDERS,
    PLACEHOLDERS,
    Event,
    Hookpoint,
    UserProperties,
    offered_placeholders,
    parse_json_payload,
    placeholder_allowed,
    placeholder_value,
)

PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[^.\s]+)*$")


class RenderError(HookbridgeError, ValueError):
    """A template problem found at load time; `offset`/`line` locate it."""

    def __init__(self, message: str, offset: int = 0, line: int | None = None, col: int = 1) -> None:
        super().__init__(message)
        self.offset = offset
        self.line = line
        self.col = col


@dataclass(frozen=True, slots=True)
class Slot:
    name: str  # a placeholder name, e.g. "clientid" or "payload.a.b"


Part = str | Slot


def to_bytes(value: Any) -> bytes:
    """How a bound value is written where the database has no types (Redis)."""
    if value is None:
        return b""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    return str(value).encode("utf-8", "surrogateescape")


def compile_parts(text: str, hookpoint: Hookpoint, base_offset: int = 0) -> list[Part]:
    """Split text into literal strings and placeholder slots, checking each name."""
    parts: list[Part] = []
    last = 0
    for match in PLACEHOLDER.finditer(text):
        name = match.group(1).strip()
        if not _NAME.match(name):
            raise RenderError(f"bad placeholder ${{{match.group(1)}}}", base_offset + match.start())
        if not placeholder_allowed(hookpoint, name):
            offered = ", ".join(offered_placeholders(hookpoint))
            raise RenderError(
                f"unknown placeholder ${{{name}}} for {hookpoint} (it offers {offered})",
                base_offset + match.start(),
            )
        if match.start() > last:
            parts.append(text[last : match.start()])
        parts.append(Slot(name))
        last = match.end()
    if last < len(text):
        parts.append(text[last:])
    return parts


class Values:
    """Placeholder values of one event, computed on demand and cached."""

    __slots__ = ("_cache", "_json", "event")

    def __init__(self, event: Event) -> None:
        self.event = event
        self._cache: dict[str, Any] = {}
        self._json: Any = ...

    @property
    def payload_json(self) -> Any:
        if self._json is ...:
            self._json = parse_json_payload(getattr(self.event, "payload", b""))
        return self._json

    def __getitem__(self, name: str) -> Any:
        try:
            return self._cache[name]
        except KeyError:
            pass
        json_doc = self.payload_json if name.startswith("payload.") else None
        value = self._cache[name] = placeholder_value(self.event, name, json_doc)
        return value


def render_parts(parts: Sequence[Part], values: Values) -> bytes:
    if len(parts) == 1 and isinstance(parts[0], Slot):
        return to_bytes(values[parts[0].name])
    return b"".join(to_bytes(values[p.name]) if isinstance(p, Slot) else p.encode() for p in parts)


@dataclass(frozen=True, slots=True)
class CommandTemplate:
    """One Redis command, split into arguments at load time."""

    text: str
    args: tuple[tuple[Part, ...], ...]

    @classmethod
    def compile(cls, text: str, hookpoint: Hookpoint) -> CommandTemplate:
        args: list[tuple[Part, ...]] = []
        for match in re.finditer(r"\S+", text):
            args.append(tuple(compile_parts(match.group(0), hookpoint, match.start())))
        if not args:
            raise RenderError("empty command")
        return cls(text, tuple(args))

    def render(self, values: Values) -> list[bytes]:
        return [render_parts(arg, values) for arg in self.args]


# --- Jinja2 templates --------------------------------------------------------


class UserPropertyLookup:
    """A template's `user_property`: `user_property.name` / `user_property['name']` is the first
    value with that name, undefined (bound as null) when there is none.

    Not a dict, and no public methods, on purpose: Jinja2 looks an attribute up before an
    item, so on a dict `user_property.items` would be the method, not the property "items".
    """

    __slots__ = ("_first",)

    def __init__(self, properties: UserProperties) -> None:
        self._first: dict[str, str] = {}
        for name, value in properties:
            self._first.setdefault(name, value)

    def __getitem__(self, name: str) -> str:
        return self._first[name]

    def __contains__(self, name: object) -> bool:
        return name in self._first

    def __iter__(self) -> Iterator[str]:
        return iter(self._first)

    def __len__(self) -> int:
        return len(self._first)


def template_variables(hookpoint: Hookpoint) -> set[str]:
    """What a Jinja2 template on this hookpoint can name: its placeholders, `json` (the parsed
    payload), and on message hookpoints `user_property` and `user_properties` (the pairs)."""
    names = {*PLACEHOLDERS[hookpoint], "json"}
    if "user_property" in KEYED_PLACEHOLDERS[hookpoint]:
        names |= {"user_property", "user_properties"}
    return names


_MARK = "\x00{}\x00"
MARK_RE = re.compile("\x00(\\d+)\x00")  # a bound value's marker in rendered text


class _Binder:
    """Collects the values a template outputs; gives the template a marker instead."""

    def __init__(self) -> None:
        self.values: list[Any] = []

    def __call__(self, value: Any) -> str:
        if isinstance(value, jinja2.Undefined):
            value = None
        elif isinstance(value, UserPropertyLookup):
            value = dict(value._first)  # output whole: a JSON object, like any dict
        self.values.append(value)
        return _MARK.format(len(self.values) - 1)


class StatementTemplate:
    """A Jinja2 template rendering statements whose every output value is bound.

    `render_lines` gives, per non-empty output line, the list of its
    whitespace-separated arguments with markers replaced by the bound values
    (the shape a Redis template needs).
    """

    def __init__(self, path: Path, display: str, hookpoint: Hookpoint) -> None:
        self.display = display
        self._binder = _Binder()
        env = jinja2.sandbox.SandboxedEnvironment(
            finalize=self._binder, autoescape=False, keep_trailing_newline=True, undefined=jinja2.Undefined
        )
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise RenderError(f"cannot read template {display}: {exc}") from None
        try:
            ast = env.parse(source)
        except jinja2.TemplateSyntaxError as exc:
            raise RenderError(f"template syntax error: {exc.message}", line=exc.lineno) from None
        allowed = template_variables(hookpoint)
        for name in sorted(jinja2.meta.find_undeclared_variables(ast) - allowed):
            line, col = _locate(source, name)
            raise RenderError(
                f"unknown variable {name!r} for {hookpoint} (it offers {', '.join(sorted(allowed))})",
                line=line,
                col=col,
            )
        self._template = env.from_string(source)

    def _context(self, values: Values) -> dict[str, Any]:
        names = PLACEHOLDERS[values.event.hookpoint]
        context = {name: values[name] for name in names}
        if "payload" in names:
            context["json"] = values.payload_json
        if "user_property" in KEYED_PLACEHOLDERS[values.event.hookpoint]:
            properties: UserProperties = getattr(values.event, "user_properties", ())
            context["user_property"] = UserPropertyLookup(properties)
            context["user_properties"] = [list(pair) for pair in properties]
        return context

    def render_text(self, values: Values) -> tuple[str, list[Any]]:
        """The rendered text with markers, and the values the markers stand for."""
        self._binder.values = []
        text = self._template.render(self._context(values))
        return text, self._binder.values

    def render_lines(self, values: Values) -> list[list[bytes]]:
        """Redis: one command per non-empty line, split on whitespace, markers filled in."""
        text, bound = self.render_text(values)
        commands: list[list[bytes]] = []
        for line in text.splitlines():
            args = [_fill(word, bound) for word in line.split()]
            if args:
                commands.append(args)
        return commands


def _fill(word: str, bound: list[Any]) -> bytes:
    pieces = MARK_RE.split(word)
    if len(pieces) == 3 and not pieces[0] and not pieces[2]:
        return to_bytes(bound[int(pieces[1])])
    out = bytearray()
    for index, piece in enumerate(pieces):
        out += to_bytes(bound[int(piece)]) if index % 2 else piece.encode()
    return bytes(out)


def _locate(source: str, name: str) -> tuple[int, int]:
    match = re.search(rf"\b{re.escape(name)}\b", source)
    if not match:
        return 1, 1
    line = source.count("\n", 0, match.start()) + 1
    col = match.start() - (source.rfind("\n", 0, match.start()) + 1) + 1
    return line, col
