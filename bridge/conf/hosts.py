"""What a configured or connecting host name says about who can reach it."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach `host`: 127.0.0.0/8, ::1 (bracketed or not) or
    localhost. A host name is not: it may resolve to anything."""
    if host.lower().removesuffix(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
