"""Network addresses in the config: `host:port`, `[IPv6]:port`, lists of them, and URLs.

An address `check` accepts is one `run` can bind or connect to: a host name or an IP address
(IPv6 in brackets, as in a URL), a port in range (0, "any free port", only for listeners).
An address holding a user or password (URL syntax) is refused without echoing it: passwords
have their own secret settings.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from urllib.parse import urlsplit

from bridge.conf.parsers import described, text_problem, unquote

Address = tuple[str, int]

_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)", re.ASCII)
_PORT = re.compile(r"\d{1,5}", re.ASCII)


def host_problem(host: str) -> str | None:
    """Why `host` is not a host name, IPv4 or IPv6 address, or None."""
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"bad IPv6 address {host!r}"
        return None
    labels = host.removesuffix(".").split(".")
    if all(label.isascii() and label.isdigit() for label in labels):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return f"bad IPv4 address {host!r}"
        return None
    if len(host) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        return f"bad host name {host!r}"
    return None


def _credentials_problem(value: str) -> str | None:
    if "@" in value or "://" in value:
        # the text may hold a password: describe it, never echo it
        return "expected host:port, not a URL or user@host (a password goes in its own secret setting)"
    return None


def _split(value: str) -> tuple[str, str]:
    """(host, port text) of `host:port` or `[IPv6]:port`; ValueError naming the expected form."""
    if value.startswith("["):
        host, bracket, rest = value[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise ValueError(f"expected [IPv6 address]:port, got {value!r}")
        if ":" not in host:
            raise ValueError(f"brackets are for an IPv6 address, got {value!r}")
        return host, rest[1:]
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected host:port, got {value!r}")
    if ":" in host:
        raise ValueError(f"an IPv6 address goes in brackets, as [{host}]:{port}, got {value!r}")
    return host, port


def hostport(*, listener: bool = False) -> Callable[[str], Address]:
    """A `host:port` parser; a listener may take port 0 (any free port)."""
    low = 0 if listener else 1

    def parse(text: str) -> Address:
        value = unquote(text).strip()
        problem = text_problem(value) or _credentials_problem(value)
        if problem:
            raise ValueError(problem)
        host, port = _split(value)
        problem = host_problem(host)
        if problem:
            raise ValueError(problem)
        if not _PORT.fullmatch(port):
            raise ValueError(f"expected a port number after the host, got {port!r}")
        if not low <= int(port) <= 65535:
            raise ValueError(f"port {int(port)} is out of range ({low} to 65535)")
        return host, int(port)

    doc = "`host:port` or `[IPv6]:port`" + (" (port 0: any free port)" if listener else "")
    return described(doc, parse)


parse_hostport = hostport()
parse_listener = hostport(listener=True)


def parse_hostports(text: str) -> list[Address]:
    """Several `host:port`, comma-separated."""
    parts = [part.strip() for part in unquote(text).split(",")]
    if not any(parts):
        raise ValueError("expected at least one host:port")
    return [parse_hostport(part) for part in parts if part]


parse_hostports.__doc__ = "`host:port`, comma-separated"


def optional_listener(text: str) -> Address | None:
    """`host:port`, or `off` to disable."""
    return None if unquote(text).strip().lower() in ("off", "") else parse_listener(text)


optional_listener.__doc__ = "`host:port` or `off`"


def http_url(text: str) -> str:
    """An `http://` or `https://` URL with a host and no user or password in it."""
    value = unquote(text).strip()
    problem = text_problem(value)
    if problem:
        raise ValueError(problem)
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError when out of range
    except ValueError:
        raise ValueError("expected a URL such as http://127.0.0.1:18083") from None
    if "@" in parts.netloc:
        raise ValueError("the URL must not hold a user or password (use the api_key and api_secret settings)")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected a URL such as http://127.0.0.1:18083, got {value!r}")
    return value


http_url.__doc__ = "`http://` or `https://` URL"
