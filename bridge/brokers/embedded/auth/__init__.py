"""Authentication of the embedded broker (docs/security.md): `make_gate(config)` builds its Gate.

Users come from `broker.auth.password_file` (Mosquitto's format, passwords.py) and
`broker.auth.backend` (a database, as EMQX 4 kept them: users.py, hashes.py); gate.py decides.
What a logged-in client may do comes from `permissions_for` (the ACL's seam).
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.brokers.embedded.access import ALLOW_ALL, Permissions
from bridge.brokers.embedded.auth.aclsource import acl_from_config
from bridge.brokers.embedded.auth.gate import AuthGate
from bridge.brokers.embedded.auth.hashes import parse_password_hash
from bridge.brokers.embedded.auth.passwords import PasswordFile
from bridge.brokers.embedded.auth.users import CachedUsers, open_store
from bridge.conf.config import Config
from bridge.conf.hosts import is_loopback

__all__ = ["AuthGate", "make_gate", "permissions_for", "takeover_of"]


@dataclass(frozen=True, slots=True)
class Everything:
    """A superuser's permissions: every topic, `$SYS` too."""

    superuser: bool = True

    def may_publish(self, topic: str) -> bool:
        return True

    def may_subscribe(self, topic_filter: str) -> bool:
        return True

    def may_read(self, topic: str) -> bool:
        return True


SUPERUSER = Everything()


async def permissions_for(username: str | None, clientid: str, superuser: bool) -> Permissions:
    """What a client may do once logged in.

    Without an ACL (broker.acl.*) every client may do what the anonymous broker allows; with one,
    make_gate asks `Acl.permissions_for` instead (aclsource.py).
    """
    return SUPERUSER if superuser else ALLOW_ALL


def authenticates(config: Config) -> bool:
    """Whether any source of users is configured (then the defaults get stricter)."""
    return bool(config["broker.auth.password_file"] or config["broker.auth.backend"])


def allow_anonymous(config: Config) -> bool:
    """`broker.allow_anonymous`, or its default (docs/security.md#1-anonymous-access-and-the-start-up-check):
    only when every listener is loopback."""
    value = config.settings.get("broker.allow_anonymous")
    if value is not None:
        return bool(value)
    listeners = [
        address
        for key, address in config.settings.items()
        if key.startswith("broker.listener.") and key.count(".") == 2 and address is not None
    ]
    return all(is_loopback(host) for host, _port in listeners)


def takeover_of(config: Config) -> str:
    """`broker.takeover`, or its default: same_user once users are checked, else any."""
    value: str | None = config["broker.takeover"]
    if value is not None:
        return value
    return "same_user" if authenticates(config) else "any"


def make_gate(config: Config, *, anonymous: bool | None = None) -> AuthGate:
    """The gate for `config`; raises PasswordFileError if the password file cannot be used."""
    path = config["broker.auth.password_file"]
    backend = config["broker.auth.backend"]
    acl = acl_from_config(config)  # broker.acl.*: None when no ACL is configured
    return AuthGate(
        allow_anonymous=allow_anonymous(config) if anonymous is None else anonymous,
        permissions_for=acl.permissions_for if acl is not None else permissions_for,
        acl=acl,
        password_file=PasswordFile(path) if path else None,
        users=CachedUsers(open_store(config.pools[backend])) if backend else None,
        password_hash=parse_password_hash(config["broker.auth.password_hash"]),
    )
