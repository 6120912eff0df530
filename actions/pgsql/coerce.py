"""Bound values of `sql` actions converted to the types PostgreSQL infers for each parameter
(the converters are shared with the other backends: actions/values.py)."""

from __future__ import annotations

from actions import values as v
from actions.values import Convert

_BY_TYPE: dict[str, Convert] = {
    "text": v.text,
    "varchar": v.text,
    "bpchar": v.text,
    "name": v.text,
    "unknown": v.text,
    "bytea": v.binary,
    "int2": v.integer,
    "int4": v.integer,
    "int8": v.integer,
    "float4": v.floating,
    "float8": v.floating,
    "numeric": v.decimal,
    "bool": v.boolean,
    "timestamptz": v.timestamp,
    "timestamp": v.timestamp,
    "json": v.json_text,
    "jsonb": v.json_text,
}


def converters(type_names: list[str]) -> list[Convert]:
    return [_BY_TYPE.get(name, v.text) for name in type_names]
