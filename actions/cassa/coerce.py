"""Bound values converted to the CQL type of each bind marker of a user `cql` statement.

Placeholder values are str / int / bytes / JSON values; the driver wants each
marker's exact Python type (bytes for blob, int for int, ...). The types come
from preparing the statement, once; the same conversion then runs per event.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from actions.base import PermanentError

Convert = Callable[[Any], Any]


def _text(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")  # text cannot hold invalid UTF-8; blob columns keep bytes
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _blob(value: Any) -> Any:
    if value is None or isinstance(value, bytes):
        return value
    return _text(value).encode("utf-8")


def _int(value: Any) -> Any:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    try:
        return int(value if not isinstance(value, bytes) else value.decode())
    except (TypeError, ValueError):
        raise PermanentError(f"{value!r} is not an integer") from None


def _float(value: Any) -> Any:
    return None if value is None else float(value)


def _decimal(value: Any) -> Any:
    return None if value is None else Decimal(str(value))


def _bool(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    return str(value).lower() in ("true", "1", "t", "yes")


def _timestamp(value: Any) -> Any:
    """`${timestamp}` is Unix milliseconds."""
    if value is None or isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromtimestamp(float(value) / 1000, tz=dt.UTC)


def _uuid(value: Any) -> Any:
    if value is None or isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(_text(value))
    except ValueError:
        raise PermanentError(f"{value!r} is not a UUID") from None


_BY_TYPE: dict[str, Convert] = {
    "text": _text,
    "varchar": _text,
    "ascii": _text,
    "blob": _blob,
    "tinyint": _int,
    "smallint": _int,
    "int": _int,
    "bigint": _int,
    "varint": _int,
    "counter": _int,
    "float": _float,
    "double": _float,
    "decimal": _decimal,
    "boolean": _bool,
    "timestamp": _timestamp,
    "uuid": _uuid,
    "timeuuid": _uuid,
}


def converters(prepared: Any) -> list[Convert]:
    """One converter per bind marker of a prepared statement (text for types not listed)."""
    return [_BY_TYPE.get(getattr(column.type, "typename", ""), _text) for column in prepared.column_metadata]
