"""API keys: stored as SHA-256 hashes in the config (`api.keys = <name>:sha256:<hex>[:<scope>], ...`),
presented as `Authorization: Bearer <key>`, compared in constant time (hmac.compare_digest).

Each key has a scope: `admin` (the default, so a key written before scopes existed keeps doing
what it did) may do everything; `read` may only read (bridge/api/scopes.py says what each route
needs)."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass

SCOPES = ("read", "admin")
_ENTRY = re.compile(r"([A-Za-z0-9_.-]{1,64}):sha256:([0-9a-fA-F]{64})(?::([a-z]+))?")


@dataclass(frozen=True)
class ApiKey:
    name: str
    digest: str  # the key's SHA-256, lower-case hex
    scope: str = "admin"  # one of SCOPES


def parse_api_keys(text: str) -> dict[str, ApiKey]:
    """`name:sha256:<64 hex digits>[:read|:admin]`, comma-separated; {name: ApiKey}. Empty: no keys."""
    keys: dict[str, ApiKey] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        match = _ENTRY.fullmatch(part)
        if match is None:
            # the value may be a key pasted by mistake: never shown back
            raise ValueError(
                "each API key is <name>:sha256:<64 hex digits>[:read|:admin] (the SHA-256 of the key, never the "
                "key: `printf %s KEY | sha256sum`)"
            )
        name, digest, scope = match[1], match[2].lower(), match[3] or "admin"
        if scope not in SCOPES:
            raise ValueError(f"API key {name!r}: the scope is read or admin, not {scope!r}")
        if name in keys:
            raise ValueError(f"API key name {name!r} is given twice")
        keys[name] = ApiKey(name, digest, scope)
    return keys


parse_api_keys.__doc__ = (
    "`<name>:sha256:<hex>[:read|:admin]`, comma-separated (the SHA-256 of each key; scope `admin` by default)"
)


def find_key(keys: Mapping[str, ApiKey], presented: str) -> ApiKey | None:
    """The key `presented` is, or None. Every stored hash is compared (no early exit)."""
    digest = hashlib.sha256(presented.encode("utf-8", "surrogateescape")).hexdigest()
    found = None
    for key in keys.values():
        if hmac.compare_digest(digest, key.digest):
            found = key
    return found


def key_name(keys: Mapping[str, ApiKey], presented: str) -> str | None:
    """The name of the key `presented` is, or None."""
    found = find_key(keys, presented)
    return found.name if found is not None else None
