"""The configured ACL (`broker.acl.*`): what the login gate asks for a client's `Permissions`.

    acl = acl_from_config(config)          # None when no ACL is configured
    await acl.start()
    permissions = await acl.permissions_for(username, clientid, superuser=False)  # at CONNECT
    acl.reload()                           # SIGHUP: re-read the file; [] or its problems

The file's entries and a database's are used together (denies first, then grants, then
`broker.acl.nomatch`). A SIGHUP reload applies to connected clients too, at their next check:
their permissions are rebuilt once when they see the file changed (`LivePermissions`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from bridge.accounts import Entry
from bridge.brokers.embedded.access import Permissions
from bridge.brokers.embedded.auth.acl import ClientPermissions
from bridge.brokers.embedded.auth.acldb import AclBackendDown, CachedAcl, open_acl_store
from bridge.brokers.embedded.auth.aclfile import AclFile, load_acl, parse_acl
from bridge.conf.config import Config, PoolConfig
from bridge.conf.errors import ConfError, ConfErrors, Position

log = logging.getLogger(__name__)

__all__ = ["Acl", "AclBackendDown", "acl_from_config", "acl_problems"]


class Acl:
    def __init__(self, path: str, file: AclFile | None, store: CachedAcl | None, nomatch: bool) -> None:
        self.path, self.file, self.store, self.nomatch = path, file, store, nomatch
        self.version = 0  # bumped by each reload that changed the file's entries

    async def start(self) -> None:
        return None  # the database stores connect on first use: a server down now refuses logins, not the start

    async def close(self) -> None:
        if self.store is not None:
            await self.store.close()

    def file_entries(self, username: str | None) -> tuple[Entry, ...]:
        return self.file.entries_for(username) if self.file is not None else ()

    async def permissions_for(self, username: str | None, clientid: str, superuser: bool = False) -> Permissions:
        """The client's permissions; raises AclBackendDown when its database does not answer."""
        stored: list[Entry] = []
        if self.store is not None and not superuser:
            stored = await self.store.entries(username, clientid)
        if self.file is None:
            return ClientPermissions(stored, username, clientid, nomatch=self.nomatch, superuser=superuser)
        return LivePermissions(self, stored, username, clientid, superuser)

    def reload(self) -> list[str]:
        """Re-read the ACL file and forget cached database entries (SIGHUP). On problems in the
        file its entries loaded before stay."""
        if self.store is not None:
            self.store.clear()
        if self.file is None:
            return []
        try:
            file = load_acl(self.path)
        except ConfErrors as exc:
            return [str(error) for error in exc.errors]
        if file != self.file:
            self.file = file
            self.version += 1
        return []


class LivePermissions:
    """A client's permissions from the ACL file (and its database rows), rebuilt after a reload."""

    __slots__ = ("_acl", "_clientid", "_now", "_stored", "_username", "_version", "superuser")

    def __init__(self, acl: Acl, stored: list[Entry], username: str | None, clientid: str, superuser: bool) -> None:
        self._acl, self._stored, self._username, self._clientid = acl, stored, username, clientid
        self.superuser = superuser
        self._version = -1
        self._now = self._build()

    def _build(self) -> ClientPermissions:
        acl = self._acl
        self._version = acl.version
        entries = [*acl.file_entries(self._username), *self._stored]
        return ClientPermissions(entries, self._username, self._clientid, nomatch=acl.nomatch, superuser=self.superuser)

    def _current(self) -> ClientPermissions:
        if self._version != self._acl.version:
            self._now = self._build()
        return self._now

    def may_publish(self, topic: str) -> bool:
        return self._current().may_publish(topic)

    def may_subscribe(self, topic_filter: str) -> bool:
        return self._current().may_subscribe(topic_filter)

    def may_read(self, topic: str) -> bool:
        return self._current().may_read(topic)


def acl_from_config(config: Config) -> Acl | None:
    """The configured ACL, or None (no `broker.acl.file` nor `broker.acl.backend`)."""
    path, backend = config["broker.acl.file"], config["broker.acl.backend"]
    if not path and not backend:
        return None
    file = load_acl(path) if path else None
    store = None
    if backend:
        pool: PoolConfig = config.pools[backend]
        store = CachedAcl(open_acl_store(pool), timeout=pool["request_timeout"])
    return Acl(path, file, store, nomatch=config["broker.acl.nomatch"] == "allow")


def acl_problems(path: str, settings: dict[str, Any], at: dict[str, Position]) -> list[ConfError]:
    """What `run` would refuse in the `broker.acl.*` settings (the pool a backend names is checked
    with the other pool references): parse_config asks, so `hookbridge check` reports the ACL
    file's problems with the config's."""
    errors: list[ConfError] = []
    file, backend = settings["broker.acl.file"], settings["broker.acl.backend"]
    if (file or backend) and settings["broker.mode"] != "embedded":
        key = "broker.acl.file" if file else "broker.acl.backend"
        where = at.get(key, Position(path, 1, 1))
        errors.append(ConfError(where, f"{key}: the ACL applies to the embedded broker only"))
    if file:
        try:
            text = Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:  # said at the setting: the file has no line to point at
            reason = exc.strerror if isinstance(exc, OSError) else f"not UTF-8 ({exc.reason})"
            errors.append(ConfError(at.get("broker.acl.file", Position(path, 1, 1)), f"broker.acl.file: {reason}"))
            return errors
        try:
            parse_acl(file, text)
        except ConfErrors as exc:  # at the setting, like the password file: `conf:l:c: key: acl:l:c: ...`
            where = at.get("broker.acl.file", Position(path, 1, 1))
            errors.extend(ConfError(where, f"broker.acl.file: {error}") for error in exc.errors)
    return errors
