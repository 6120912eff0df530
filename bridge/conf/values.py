"""Typed values of `key = value` lines: each parser returns the value or raises ValueError."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_SIZE = re.compile(r"^(\d+)\s*(B|KB|MB|GB|TB)?$", re.IGNORECASE)
_SIZE_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


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


def unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] == '"':
        result = json.loads(text)
        if not isinstance(result, str):
            raise ValueError("expected a string")
        return result
    return text


def parse_str(text: str) -> str:
    return unquote(text)


def parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"expected an integer, got {text!r}") from None


def parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("on", "true", "yes", "1"):
        return True
    if lowered in ("off", "false", "no", "0"):
        return False
    raise ValueError(f"expected on or off, got {text!r}")


def parse_duration(text: str) -> float:
    """`100ms`, `5s`, `2m`, `2h`, `1d`; a bare number is seconds."""
    match = _DURATION.match(text.strip())
    if not match:
        raise ValueError(f"expected a duration such as 5s, 100ms or 2h, got {text!r}")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


def parse_size(text: str) -> int:
    """`512B`, `64KB`, `64MB`, `1GB`; a bare number is bytes."""
    match = _SIZE.match(text.strip())
    if not match:
        raise ValueError(f"expected a size such as 64MB, got {text!r}")
    return int(match.group(1)) * _SIZE_UNITS[(match.group(2) or "B").upper()]


def parse_hostport(text: str) -> tuple[str, int]:
    if "@" in text or "://" in text:
        # the text may hold a password: describe it, never echo it
        raise ValueError("expected host:port, not a URL or user@host (a password goes in its own secret setting)")
    host, sep, port = unquote(text).rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected host:port, got {text!r}")
    number = parse_int(port)
    if not 0 <= number <= 65535:
        raise ValueError(f"port {number} is out of range")
    return host.strip("[]"), number


def parse_hostports(text: str) -> list[tuple[str, int]]:
    return [parse_hostport(part.strip()) for part in unquote(text).split(",") if part.strip()]


def parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"bad JSON: {exc.msg}") from None


def parse_identifier(text: str) -> str:
    """A plain database identifier (letters, digits, underscore; a letter first): safe in statement text."""
    value = unquote(text)
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,47}", value):
        raise ValueError(f"expected a name of letters, digits and _ (a letter first, at most 48), got {value!r}")
    return value


def parse_replication(text: str) -> Any:
    """Cassandra keyspace replication as a JSON object with a "class"."""
    value = parse_json(text)
    if not isinstance(value, dict) or not isinstance(value.get("class"), str):
        raise ValueError(
            'expected a JSON object with a "class", e.g. {"class": "SimpleStrategy", "replication_factor": 1}'
        )
    return value


def enum_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = unquote(text)
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    parse.__doc__ = " | ".join(choices)
    return parse


def optional_hostport(text: str) -> tuple[str, int] | None:
    """`host:port`, or `off` to disable."""
    return None if unquote(text).lower() in ("off", "") else parse_hostport(text)
