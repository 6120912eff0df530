"""The client TLS context, built in one place, and its files checked the way `run` loads them.

`client_context` is what every client connection of the bridge uses (PostgreSQL, Cassandra, the
external broker); `tls_problems` builds the same context so `check` refuses what would stop the
start. Only where TLS is on: the broker connection in the external modes, every pool with `ssl = on`,
and the embedded broker's TLS listeners (bridge/brokers/embedded/listeners.py, which words its
problems with `load_problem`). A key protected by a passphrase is refused (nothing could type
it in).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any


def _no_passphrase() -> str:
    raise ValueError("the key is protected by a passphrase; give an unencrypted key")


def reason(exc: Exception) -> str:
    if isinstance(exc, ssl.SSLError):
        return f"not a PEM file this needs ({exc.reason or exc})"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


def client_context(cafile: str, certfile: str = "", keyfile: str = "", verify: bool = True) -> ssl.SSLContext:
    """A client's TLS context: the server verified against `cafile` (empty: the system's CAs)
    unless `verify` is off, and a client certificate when `certfile` is given."""
    context = ssl.create_default_context(cafile=cafile or None)
    if certfile:
        context.load_cert_chain(certfile, keyfile or None, password=_no_passphrase)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def server_files_context(certfile: str, keyfile: str = "") -> ssl.SSLContext:
    """A server's TLS context from its certificate and key (no client certificates asked for)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certfile, keyfile or None, password=_no_passphrase)
    return context


def http_listener_context(settings: Mapping[str, Any]) -> ssl.SSLContext | None:
    """`metrics.listener`'s TLS (`metrics.listener.certfile`, `.keyfile`); None when not set."""
    certfile = settings["metrics.listener.certfile"]
    return server_files_context(certfile, settings["metrics.listener.keyfile"]) if certfile else None


def settings_context(settings: Mapping[str, Any], prefix: str = "") -> ssl.SSLContext | None:
    """The context of a pool's (or, with prefix "broker.", the broker's) `ssl*` keys; None when off."""
    if not settings[f"{prefix}ssl"]:
        return None
    cafile, certfile, keyfile = (settings[f"{prefix}ssl.{name}"] for name in ("cafile", "certfile", "keyfile"))
    return client_context(cafile, certfile, keyfile, bool(settings[f"{prefix}ssl.verify"]))


def tls_problems(settings: Mapping[str, Any], prefix: str) -> list[tuple[str, str]]:
    """(key, message) for each TLS file under `prefix` ("broker." or "") that cannot be loaded."""
    cafile, certfile, keyfile = (settings[f"{prefix}ssl.{name}"] for name in ("cafile", "certfile", "keyfile"))
    try:
        client_context(cafile)
    except (OSError, ssl.SSLError) as exc:
        return [(f"{prefix}ssl.cafile", f"cannot load {cafile}: {reason(exc)}")]
    if keyfile and not certfile:
        return [
            (f"{prefix}ssl.keyfile", f"{prefix}ssl.keyfile needs {prefix}ssl.certfile (the certificate it goes with)")
        ]
    try:
        client_context(cafile, certfile, keyfile)
    except (OSError, ssl.SSLError, ValueError) as exc:
        return [load_problem(exc, f"{prefix}ssl.", certfile, keyfile)]
    return []


def load_problem(exc: Exception, prefix: str, certfile: str, keyfile: str) -> tuple[str, str]:
    """(key, message) for a certificate and key that failed to load (keys under `prefix`)."""
    key = f"{prefix}keyfile" if keyfile and isinstance(exc, ValueError) else f"{prefix}certfile"
    shown = f"{certfile} and {keyfile}" if keyfile else certfile
    return (key, f"cannot load {shown}: {reason(exc)}")
