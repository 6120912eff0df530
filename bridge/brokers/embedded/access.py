"""Who may connect, publish and subscribe: the seam between the broker core and authentication.

The core asks a `Gate` once per CONNECT (`login`); the verdict carries the client's
`Permissions`, which the core then asks synchronously on every SUBSCRIBE, PUBLISH and delivery
(so a database-held ACL is read once per login, not once per message). `OpenGate` is the
anonymous, allow-everything gate of a broker on loopback; bridge/brokers/embedded/auth/ builds
the real ones from `broker.auth.*` / `broker.acl.*` (docs/security.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

# Why a login was refused, as /metrics labels them (hookbridge_broker_refused_total{reason=...}).
LOGIN_REFUSALS = (
    "login_bad_credentials",  # unknown user or wrong password (3.1.1 return code 4, 5.0 0x86)
    "login_not_authorized",  # anonymous when not allowed, or the takeover rule (5 / 0x87)
    "login_backend_down",  # the database holding the users did not answer (3 / 0x88)
    "login_busy",  # its address had its share of password checks waiting (3 / 0x89), auth/checks.py
    "banned",  # a client id, user name or address on the banned list (bans.py; 5 / 0x8A)
)
ACL_REFUSALS = (
    "acl_publish_denied",  # a PUBLISH the ACL refused (dropped; 5.0 PUBACK 0x87)
    "acl_subscribe_denied",  # a SUBSCRIBE filter the ACL refused (SUBACK 0x80 / 0x87)
)


class Permissions(Protocol):
    """What one logged-in client may do; every method is cheap and synchronous."""

    @property
    def superuser(self) -> bool: ...

    def may_publish(self, topic: str) -> bool: ...

    def may_subscribe(self, topic_filter: str) -> bool:
        """For a shared subscription the filter after `$share/<group>/`."""
        ...

    def may_read(self, topic: str) -> bool:
        """Whether a message on `topic` may be delivered to this client (live, retained,
        fetched). `$SYS/...` topics are readable only where an ACL entry allows them."""
        ...


@dataclass(frozen=True, slots=True)
class AllowAll:
    """Everything but publishing to `$SYS` (the broker's own topics): the anonymous broker."""

    superuser: bool = False

    def may_publish(self, topic: str) -> bool:
        return not (topic == "$SYS" or topic.startswith("$SYS/"))

    def may_subscribe(self, topic_filter: str) -> bool:
        return True

    def may_read(self, topic: str) -> bool:
        return True


ALLOW_ALL = AllowAll()


@dataclass(frozen=True, slots=True)
class Login:
    """What a CONNECT presents."""

    clientid: str
    username: str | None
    password: bytes | None
    listener: str  # "tcp", "ssl", "ws" or "wss"
    peername: str
    cert_cn: str | None = None  # the client certificate's common name (TLS with peer certificates)


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    reason: str = ""  # one of LOGIN_REFUSALS when not ok
    username: str | None = None  # the authenticated user name (the certificate CN if so configured)
    permissions: Permissions = field(default=ALLOW_ALL)
    authenticated: bool = False  # a user proved who it is (takeover = same_user compares these)


class Gate(Protocol):
    async def login(self, login: Login) -> Verdict: ...

    async def permissions_of(self, username: str | None, clientid: str) -> Permissions:
        """What a session restored from the durable store may do while its client is away: read
        from the same source as at its CONNECT, for the user and client id it logged in with (the
        store keeps who the client is, not what it may do)."""
        ...

    async def close(self) -> None: ...


class OpenGate:
    """Anyone may connect and do anything (but publish to `$SYS`)."""

    async def login(self, login: Login) -> Verdict:
        return Verdict(True, username=login.username)

    async def permissions_of(self, username: str | None, clientid: str) -> Permissions:
        return ALLOW_ALL

    async def close(self) -> None:
        return None
