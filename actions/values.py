"""Placeholder values converted to the Python type a database driver wants for a parameter.

Placeholder values are str / int / bytes / JSON values; asyncpg and cassandra-driver want
each bind parameter's exact type (a str for text, an int for bigint, bytes for a blob...).
Each backend's `coerce.py` maps its own type names to these converters, once per prepared
statement; the same conversion then runs for every event.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from bridge.backend import PermanentError

Convert = Callable[[Any], Any]


def text(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        # text cannot hold invalid UTF-8; binary columns keep payloads byte-exact
        return value.decode("utf-8", "replace")
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def binary(value: Any) -> Any:
    if value is None or isinstance(value, bytes):
        return value
    return text(value).encode("utf-8")


def integer(value: Any) -> Any:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    try:
        return int(value if not isinstance(value, bytes) else value.decode())
    except (TypeError, ValueError):
        raise PermanentError(f"{value!r} is not an integer") from None


def floating(value: Any) -> Any:
    return None if value is None else float(value)


def decimal(value: Any) -> Any:
    return None if value is None else Decimal(str(value))


def boolean(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    return str(value).lower() in ("true", "1", "t", "yes")


def timestamp(value: Any) -> Any:
    """`${timestamp}` is Unix milliseconds."""
    if value is None or isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromtimestamp(float(value) / 1000, tz=dt.UTC)


def json_text(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return json.dumps(value, ensure_ascii=False)


def uuid_value(value: Any) -> Any:
    if value is None or isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(text(value))
    except ValueError:
        raise PermanentError(f"{value!r} is not a UUID") from None


def by_type(names: dict[Convert, tuple[str, ...]]) -> dict[str, Convert]:
    """A coerce.py table: each database type name to its converter, from the names of each converter."""
    return {name: convert for convert, type_names in names.items() for name in type_names}
