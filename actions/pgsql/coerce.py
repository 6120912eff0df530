"""Bound values of `sql` actions converted to the types PostgreSQL infers for each parameter
(the converters are shared with the other backends: actions/values.py)."""

from __future__ import annotations

from actions import values as v
from actions.values import Convert

_BY_TYPE = v.by_type(
    {
        v.text: ("text", "varchar", "bpchar", "name", "unknown"),
        v.binary: ("bytea",),
        v.integer: ("int2", "int4", "int8"),
        v.floating: ("float4", "float8"),
        v.decimal: ("numeric",),
        v.boolean: ("bool",),
        v.timestamp: ("timestamptz", "timestamp"),
        v.json_text: ("json", "jsonb"),
    }
)


def converters(type_names: list[str]) -> list[Convert]:
    return [_BY_TYPE.get(name, v.text) for name in type_names]
