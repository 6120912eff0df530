"""Bound values converted to the types PostgreSQL infers for each parameter.

asyncpg wants Python values of the parameter's exact type (a str for text, an
int for bigint, ...). Placeholder values are str / int / bytes / JSON values,
so each `sql` statement's parameters are converted once their types are known
(from preparing the statement), the same way for every event.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from actions.base import PermanentError

Convert = Callable[[Any], Any]


def _text(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        # text cannot hold invalid UTF-8; bytea columns keep payloads byte-exact
        return value.decode("utf-8", "replace")
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _bytea(value: Any) -> Any:
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


def _numeric(value: Any) -> Any:
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


def _json(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return json.dumps(value, ensure_ascii=False)


_BY_TYPE: dict[str, Convert] = {
    "text": _text,
    "varchar": _text,
    "bpchar": _text,
    "name": _text,
    "unknown": _text,
    "bytea": _bytea,
    "int2": _int,
    "int4": _int,
    "int8": _int,
    "float4": _float,
    "float8": _float,
    "numeric": _numeric,
    "bool": _bool,
    "timestamptz": _timestamp,
    "timestamp": _timestamp,
    "json": _json,
    "jsonb": _json,
}


def converters(type_names: list[str]) -> list[Convert]:
    return [_BY_TYPE.get(name, _text) for name in type_names]
