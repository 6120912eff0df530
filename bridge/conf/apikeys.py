"""API keys: stored as SHA-256 hashes in the config (`api.keys = <name>:sha256:<hex>, ...`),
presented as `Authorization: Bearer <key>`, compared in constant time (hmac.compare_digest)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re

_ENTRY = re.compile(r"([A-Za-z0-9_.-]{1,64}):sha256:([0-9a-fA-F]{64})")


def parse_api_keys(text: str) -> dict[str, str]:
    """`name:sha256:<64 hex digits>`, comma-separated; {name: hex digest}. Empty: no keys."""
    keys: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        match = _ENTRY.fullmatch(part)
        if match is None:
            # the value may be a key pasted by mistake: never shown back
            raise ValueError(
                "each API key is <name>:sha256:<64 hex digits> (the SHA-256 of the key, never the key: "
                "`printf %s KEY | sha256sum`)"
            )
        if match[1] in keys:
            raise ValueError(f"API key name {match[1]!r} is given twice")
        keys[match[1]] = match[2].lower()
    return keys


parse_api_keys.__doc__ = "`<name>:sha256:<hex>`, comma-separated (the SHA-256 of each key)"


def key_name(keys: dict[str, str], presented: str) -> str | None:
    """The name of the key `presented` is, or None. Every stored hash is compared (no early exit)."""
    digest = hashlib.sha256(presented.encode("utf-8", "surrogateescape")).hexdigest()
    found = None
    for name, stored in keys.items():
        if hmac.compare_digest(digest, stored):
            found = name
    return found


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
