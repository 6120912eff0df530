"""Bound values of `cql` actions converted to the CQL type of each bind marker
(the converters are shared with the other backends: actions/values.py)."""

from __future__ import annotations

from typing import Any

from actions import values as v
from actions.values import Convert

_BY_TYPE: dict[str, Convert] = {
    "text": v.text,
    "varchar": v.text,
    "ascii": v.text,
    "blob": v.binary,
    "tinyint": v.integer,
    "smallint": v.integer,
    "int": v.integer,
    "bigint": v.integer,
    "varint": v.integer,
    "counter": v.integer,
    "float": v.floating,
    "double": v.floating,
    "decimal": v.decimal,
    "boolean": v.boolean,
    "timestamp": v.timestamp,
    "uuid": v.uuid_value,
    "timeuuid": v.uuid_value,
}


def converters(prepared: Any) -> list[Convert]:
    """One converter per bind marker of a prepared statement (text for types not listed)."""
    return [_BY_TYPE.get(getattr(column.type, "typename", ""), v.text) for column in prepared.column_metadata]
