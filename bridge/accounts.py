"""The records of the embedded broker's users and ACL, as a backend's stores read them from its
database (`users` and `acl` in its plug-in declaration: actions/<db>/auth.py).

Held by the core, not by the broker: a backend names them (through bridge.plugin) without loading
the broker or its MQTT codec. The broker reads them: its users in brokers/embedded/auth/users.py,
its ACL in brokers/embedded/auth/acl.py (what an entry lets a client do) and acldb.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bridge.errors import HookbridgeError

# -- users (`broker.auth.backend`) ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UserRecord:
    password: str  # the stored (hashed) password
    salt: str
    superuser: bool


class BackendDown(HookbridgeError):
    """The database holding the users did not answer (the login is refused, never let in)."""


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _flag(value: Any) -> bool:
    """is_superuser as the databases hold it: 1 / true / "1" / "true"."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def user_record(password: Any, salt: Any, superuser: Any) -> UserRecord | None:
    """A user as a store read it (bytes or text, EMQX's flag spellings); None without a password."""
    if password is None:
        return None
    return UserRecord(_text(password), _text(salt), _flag(superuser))


# -- ACL entries (`broker.acl.*`) ------------------------------------------------------------------

READ = 1  # subscribe and receive (EMQX access 1)
WRITE = 2  # publish (EMQX access 2)
READWRITE = READ | WRITE

ALL_USERS = "$all"  # EMQX: a row for every client
_ACCESS = {1: READ, 2: WRITE, 3: READWRITE}


@dataclass(frozen=True, slots=True)
class Entry:
    access: int  # READ, WRITE or both
    topic_filter: str
    allow: bool = True
    # `%c` / `%u` levels stand for the client id / user name (Mosquitto `pattern` lines,
    # every database row); elsewhere they are literal text.
    substitute: bool = False


def _access(value: Any) -> int | None:
    try:
        return _ACCESS.get(int(value))
    except (TypeError, ValueError):
        return None


def acl_row(topic: Any, access: Any, allow: Any) -> Entry | None:
    """An entry from a row of EMQX 4's ACL layout (topic, access 1/2/3, allow); None if it is not one."""
    bits = _access(access)
    if not isinstance(topic, str) or not topic or bits is None:
        return None  # a row the EMQX layout does not describe: it grants nothing
    return Entry(bits, topic, allow=_truthy(allow), substitute=True)


def _truthy(value: Any) -> bool:
    if isinstance(value, (bytes, str)):
        return value not in (b"0", "0", b"", "", "false", b"false")
    return bool(value)
