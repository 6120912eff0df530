"""Typed values of `key = value` lines: each parser returns the value or raises ValueError.

The numeric parsers are made with their range (`int_in`, `duration_in`, `size_in`), so `check`
rejects every number `run` or a driver would (a port of 0, a pool of 1e29 connections, a
negative queue). Strings never hold control characters or unpaired surrogates: drivers, keys
and the MQTT protocol cannot carry them. Each parser's `__doc__` is the value it takes, shown
in docs/configuration.md.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import unicodedata
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Generic, TypeVar

from bridge.conf.lexer import outside_strings
from bridge.errors import HookbridgeError

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_INT = re.compile(r"[+-]?\d{1,30}", re.ASCII)
_DURATION = re.compile(r"^(\d{1,20}(?:\.\d{1,9})?)(ms|s|m|h|d)?$", re.ASCII)
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_SIZE = re.compile(r"^(\d{1,20})\s*(B|KB|MB|GB|TB)?$", re.IGNORECASE | re.ASCII)
_SIZE_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}

MAX_JSON_DEPTH = 32  # a rule or a replication map needs a few levels; deeper is a mistake

T = TypeVar("T")


def substitute_env(text: str, environ: dict[str, str] | None = None) -> tuple[str, list[str]]:
    """Replace `${VAR}` / `${VAR:-default}`; returns the text and the names that were unset."""
    env = os.environ if environ is None else environ
    missing: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        missing.append(name)
        return ""

    return _ENV.sub(replace, text), missing


def described(doc: str, parse: Callable[[str], T]) -> Callable[[str], T]:
    parse.__doc__ = doc
    return parse


# -- JSON ------------------------------------------------------------------------


class JsonProblem(HookbridgeError, ValueError):
    """Bad JSON, with the offset of the character it is about."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


def _nesting_error(text: str) -> int | None:
    """Offset of the bracket that opens level MAX_JSON_DEPTH + 1 (outside strings), or None."""
    depth = 0
    for index, char in outside_strings(text):
        if char in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return index
        elif char in "]}":
            depth -= 1
    return None


def _bad_string(value: Any) -> str | None:
    """The first NUL or unpaired surrogate in any string of `value`, described; None when clean."""
    if isinstance(value, str):
        return text_problem(value, allow_controls=True)
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        problem = _bad_string(key) if isinstance(key, str) else None
        problem = problem or _bad_string(item)
        if problem:
            return problem
    return None


def load_json(text: str) -> Any:
    """`json.loads` that never raises anything but JsonProblem: not on deep nesting, huge numbers,
    NUL or unpaired surrogates (which no database or command would take)."""
    deep = _nesting_error(text)
    if deep is not None:
        raise JsonProblem(f"bad JSON: nested deeper than {MAX_JSON_DEPTH} levels", deep)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise JsonProblem(f"bad JSON: {exc.msg}", exc.pos) from None
    except ValueError:  # an integer of more than 4300 digits (Python's limit on int parsing)
        long_number = re.search(r"\d{4000,}", text)
        raise JsonProblem("bad JSON: a number is too long", long_number.start() if long_number else 0) from None
    problem = _bad_string(value)
    if problem:
        escape = re.search(r"\\u(0000|[dD][89a-fA-F])", text)
        raise JsonProblem(f"bad JSON: a string {problem}", escape.start() if escape else 0)
    return value


def parse_json(text: str) -> Any:
    return load_json(text)


# -- strings ---------------------------------------------------------------------


def text_problem(value: str, *, allow_controls: bool = False) -> str | None:
    """Why `value` cannot be used as text (control character, unpaired surrogate), or None.

    The message names the character, never the value (it may be a secret).
    """
    for char in value:
        category = unicodedata.category(char)
        if category == "Cs" or (category == "Cc" and (not allow_controls or char == "\x00")):
            kind = "an unpaired surrogate" if category == "Cs" else "the control character"
            return f"contains {kind} U+{ord(char):04X}"
    return None


def unquote(text: str) -> str:
    """A value in double quotes is a JSON string (escapes such as `\\u00e9` work); else the text as is."""
    if len(text) >= 2 and text[0] == text[-1] == '"':
        try:
            result = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"bad quoted string: {exc.msg}") from None
        if not isinstance(result, str):
            raise ValueError("expected a string")
        return result
    return text


def string(*, required: bool = False, max_bytes: int = 65535, forbidden: str = "") -> Callable[[str], str]:
    """A string parser: clean text, `required` not empty, at most `max_bytes` UTF-8 bytes, none of `forbidden`."""

    def parse(text: str) -> str:
        value = unquote(text)
        problem = text_problem(value)
        if problem:
            raise ValueError(problem)
        if required and not value:
            raise ValueError("must not be empty")
        if len(value.encode()) > max_bytes:
            raise ValueError(f"is longer than {max_bytes} bytes")
        bad = [char for char in forbidden if char in value]
        if bad:
            raise ValueError(f"must not contain {', '.join(repr(char) for char in bad)}")
        return value

    doc = "text" + (", not empty" if required else "") + (f", at most {max_bytes} bytes" if max_bytes < 65535 else "")
    return described(doc + (f", without {' '.join(forbidden)}" if forbidden else ""), parse)


parse_str = string()


def enum_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = unquote(text)
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    return described(" \\| ".join(f"`{choice}`" for choice in choices), parse)


class LateDescribed(Generic[T]):
    """A parser whose description depends on the plug-ins found (the installed broker modes,
    backends): worked out when the docs ask, not when the schema is built."""

    def __init__(self, parse: Callable[[str], T], doc: Callable[[], str]) -> None:
        self._parse = parse
        self._doc = doc

    @property
    def __doc__(self) -> str:  # type: ignore[override]  # the "takes" column of the docs
        return self._doc()

    def __call__(self, text: str) -> T:
        return self._parse(text)


def late_choice(
    names: Callable[[], Iterable[str]], why_not: Callable[[str], str] = lambda _value: ""
) -> LateDescribed[str]:
    """One of `names()`, asked for when a value is parsed; `why_not(value)` adds to the error
    (a plug-in of that name that is installed but does not import)."""

    def parse(text: str) -> str:
        value = unquote(text)
        choices = list(names())
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}{why_not(value)}")
        return value

    return LateDescribed(parse, lambda: " \\| ".join(f"`{name}`" for name in names()))


def parse_identifier(text: str) -> str:
    """A plain database identifier (letters, digits, underscore; a letter first): safe in statement text."""
    value = unquote(text)
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,47}", value):
        raise ValueError(f"expected a name of letters, digits and _ (a letter first, at most 48), got {value!r}")
    return value


parse_identifier.__doc__ = "letters, digits, `_`; a letter first; at most 48"


# -- numbers ---------------------------------------------------------------------


def parse_bool(text: str) -> bool:
    """`on` \\| `off`"""
    lowered = text.lower()
    if lowered in ("on", "true", "yes", "1"):
        return True
    if lowered in ("off", "false", "no", "0"):
        return False
    raise ValueError(f"expected on or off, got {text!r}")


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An integer parser for `low`..`high` (ASCII digits only: no 1e3, no 1_000)."""

    def parse(text: str) -> int:
        value = text.strip()
        if not _INT.fullmatch(value) or not low <= int(value) <= high:
            raise ValueError(f"expected an integer from {low} to {high}, got {text!r}")
        return int(value)

    return described(f"integer {low} to {high}", parse)


def show_duration(seconds: float) -> str:
    """The largest unit that says `seconds` exactly: 86400 -> 1d, 0.25 -> 250ms."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{round(seconds * 1000, 3):g}ms" if seconds else "0s"


def duration_in(low: float, high: float) -> Callable[[str], float]:
    """A duration parser (`100ms`, `5s`, `2m`, `2h`, `1d`; a bare number is seconds) for `low`..`high` seconds."""
    expected = f"a duration from {show_duration(low)} to {show_duration(high)}"

    def parse(text: str) -> float:
        match = _DURATION.match(text.strip())
        if not match:
            raise ValueError(f"expected {expected} such as 5s, 100ms or 2h, got {text!r}")
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        if not low <= seconds <= high:
            raise ValueError(f"expected {expected}, got {text!r}")
        return seconds

    return described(expected.removeprefix("a "), parse)


def show_size(size: int) -> str:
    for unit in ("TB", "GB", "MB", "KB"):
        if size >= _SIZE_UNITS[unit] and size % _SIZE_UNITS[unit] == 0:
            return f"{size // _SIZE_UNITS[unit]}{unit}"
    return f"{size}B"


def size_in(low: int, high: int) -> Callable[[str], int]:
    """A size parser (`512B`, `64KB`, `64MB`, `1GB`; a bare number is bytes) for `low`..`high` bytes."""
    expected = f"a size from {show_size(low)} to {show_size(high)}"

    def parse(text: str) -> int:
        match = _SIZE.match(text.strip())
        if not match:
            raise ValueError(f"expected {expected} such as 64MB, got {text!r}")
        size = int(match.group(1)) * _SIZE_UNITS[(match.group(2) or "B").upper()]
        if not low <= size <= high:
            raise ValueError(f"expected {expected}, got {text!r}")
        return size

    return described(expected.removeprefix("a "), parse)


# -- structured ------------------------------------------------------------------


def _positive_count(value: Any) -> bool:
    number = value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 4:
        number = int(value)
    return number is not None and 1 <= number <= 100


def parse_replication(text: str) -> Any:
    """Cassandra keyspace replication as a JSON object with a "class"."""
    value = parse_json(text)
    if not isinstance(value, dict) or not isinstance(value.get("class"), str):
        raise ValueError(
            'expected a JSON object with a "class", e.g. {"class": "SimpleStrategy", "replication_factor": 1}'
        )
    counts = {key: count for key, count in value.items() if key != "class"}
    if value["class"].endswith("SimpleStrategy") and set(counts) != {"replication_factor"}:
        raise ValueError('SimpleStrategy takes exactly one "replication_factor"')
    bad = [key for key, count in counts.items() if not _positive_count(count)]
    if bad:
        raise ValueError(f"replication factor of {bad[0]!r} must be a whole number from 1 to 100")
    return value


parse_replication.__doc__ = 'JSON object with a `"class"`'


def writable_dir(text: str) -> str:
    """A directory that exists and is writable, or can be created (its nearest existing parent is)."""
    value = string(required=True)(text)
    path = Path(value)
    try:
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            if existing == path:
                raise ValueError(f"{value} exists and is not a directory")
            raise ValueError(f"cannot create {value}: {existing} is not a directory")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise ValueError(f"cannot write to {existing}")
        # os.access says yes to root everywhere, /proc included: create (and remove) a directory
        # there, as `run` will, so `check` refuses the same paths.
        os.rmdir(tempfile.mkdtemp(prefix=".hookbridge-check-", dir=existing))
    except OSError as exc:
        raise ValueError(f"cannot use {value}: {exc.strerror}") from None
    return value


writable_dir.__doc__ = "directory, writable or creatable"
