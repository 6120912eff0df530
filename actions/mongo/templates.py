"""`template` actions on MongoDB: a Jinja2 template renders JSON naming the writes to make.

The rendered text is one operation object or a list of them, named like PyMongo's methods:

    {"insert_one": "<collection>", "document": {...}}
    {"update_one": "<collection>", "filter": {...}, "update": {"$set": {...}}, "upsert": true}
    {"update_many": "<collection>", "filter": {...}, "update": {...}}
    {"delete_one": "<collection>", "filter": {...}}
    {"delete_many": "<collection>", "filter": {...}}

Every `{{ value }}` is bound, never spliced: the template renders a marker in its place
(quoted or not: `"{{ clientid }}"` and `{{ qos }}` both work), the text is parsed as JSON,
and only then are the markers replaced by the event's values, typed (bytes stay binary,
numbers stay numbers). So a value can never add a key, an operator or a brace; a value
that is itself a document (`{{ json }}`, `{{ payload.x }}`) must not contain a field name
starting with `$` or holding a `.`, or the action fails with a message saying so. Field
names (keys) cannot come from event data at all.
"""

from __future__ import annotations

import json
import re
from typing import Any

from actions.mongo.functions import Write
from bridge.backend import PermanentError
from bridge.plugin import MARK_RE, StatementTemplate, Values

# A JSON string literal, or a marker outside any string.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\x00\d+\x00', re.DOTALL)
_COLLECTION = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,119}$")
_PARTS = {
    "insert_one": ("document",),
    "update_one": ("filter", "update"),
    "update_many": ("filter", "update"),
    "delete_one": ("filter",),
    "delete_many": ("filter",),
}
# Operators that run JavaScript on the server: never, whoever wrote them.
_CODE_OPERATORS = frozenset({"$where", "$function", "$accumulator"})


def render_writes(template: StatementTemplate, values: Values) -> list[Write]:
    text, bound = template.render_text(values)
    try:
        rendered = json.loads(_TOKEN.sub(_escape_marker, text))
    except json.JSONDecodeError as exc:
        raise PermanentError(f"{template.display} did not render JSON: {exc.msg} at offset {exc.pos}") from None
    operations = rendered if isinstance(rendered, list) else [rendered]
    return [_write(template.display, _fill(op, bound, "$"), n) for n, op in enumerate(operations, 1)]


def _escape_marker(match: re.Match[str]) -> str:
    token = match.group(0)
    if token.startswith('"'):
        return MARK_RE.sub(lambda m: f"\\u0000{m.group(1)}\\u0000", token)
    return f'"\\u0000{token[1:-1]}\\u0000"'  # an unquoted {{ value }}: a JSON string holding the marker


def _fill(node: Any, bound: list[Any], path: str) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, item in node.items():
            if "\x00" in key:
                raise PermanentError(f"at {path}: a field name cannot come from event data")
            out[key] = _fill(item, bound, f"{path}.{key}")
        return out
    if isinstance(node, list):
        return [_fill(item, bound, f"{path}[{n}]") for n, item in enumerate(node)]
    if isinstance(node, str) and "\x00" in node:
        pieces = MARK_RE.split(node)
        if len(pieces) == 3 and not pieces[0] and not pieces[2]:
            return _data(bound[int(pieces[1])], path)
        return "".join(_text(bound[int(p)]) if n % 2 else p for n, p in enumerate(pieces))
    return node


def _data(value: Any, path: str) -> Any:
    """A bound value as a document value: checked so that it holds data only."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or key.startswith("$") or "." in key or "\x00" in key:
                raise PermanentError(f"at {path}: event data has the field name {key!r}, refused (not data)")
            _data(item, f"{path}.{key}")
    elif isinstance(value, list):
        for n, item in enumerate(value):
            _data(item, f"{path}[{n}]")
    return value


def _code_operator(node: Any) -> str | None:
    if isinstance(node, dict):
        for key, item in node.items():
            if key in _CODE_OPERATORS:
                return str(key)
            found = _code_operator(item)
            if found:
                return found
    elif isinstance(node, list):
        for item in node:
            found = _code_operator(item)
            if found:
                return found
    return None


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _write(display: str, op: Any, n: int) -> Write:
    where = f"{display}: operation {n}"
    if not isinstance(op, dict):
        raise PermanentError(f'{where}: expected an object such as {{"insert_one": "<collection>", ...}}')
    methods = [method for method in _PARTS if method in op]
    if len(methods) != 1:
        raise PermanentError(f"{where}: needs exactly one of {', '.join(_PARTS)}")
    method = methods[0]
    collection = op[method]
    if not isinstance(collection, str) or not _COLLECTION.match(collection) or collection.startswith("system."):
        raise PermanentError(f"{where}: bad collection name {collection!r}")
    parts = _PARTS[method]
    options = {"upsert"} if method.startswith("update") else set()
    unknown = set(op) - {method, *parts, *options}
    if unknown:
        raise PermanentError(f"{where}: unknown keys {', '.join(sorted(unknown))}")
    for part in parts:
        if not isinstance(op.get(part), dict):
            raise PermanentError(f"{where}: {part!r} must be an object")
        code = _code_operator(op[part])
        if code:
            raise PermanentError(f"{where}: {code} runs JavaScript on the server; not allowed")
    if "update" in parts and not (op["update"] and all(key.startswith("$") for key in op["update"])):
        raise PermanentError(f"{where}: 'update' must hold update operators such as $set")
    # Your statements, your order; a duplicate key is an error like any other.
    return Write(
        collection,
        method,
        tuple(op[part] for part in parts),
        upsert=bool(op.get("upsert", False)),
        duplicate_ok=False,
        ordered=True,
        idempotent=False,
    )
