"""The gate the broker core asks once per CONNECT (access.Gate), built by `make_gate`.

Who is let in:
- a client certificate's common name, where the TLS listener takes it as the user name
  (`Login.cert_cn` is set only then): that user, authenticated by the certificate;
- a user name with the right password, from the password file first, else the database;
- no user name: only when anonymous access is allowed.
An unknown user or a wrong password is refused whatever `allow_anonymous` says; a database that
does not answer refuses the login (`login_backend_down`), it never lets one in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bridge.accounts import BackendDown
from bridge.brokers.embedded.access import Login, Permissions, Verdict
from bridge.brokers.embedded.auth.aclsource import Acl, AclBackendDown
from bridge.brokers.embedded.auth.hashes import PasswordHash
from bridge.brokers.embedded.auth.passwords import PasswordFile, PasswordFileError
from bridge.brokers.embedded.auth.users import CachedUsers

log = logging.getLogger("bridge.brokers.embedded.auth")

DOWN_REPORT_INTERVAL = 10.0  # seconds between two warnings that the user database is down

# (username or None, clientid, superuser) -> what the client may do (the ACL's seam)
PermissionsFor = Callable[[str | None, str, bool], Awaitable[Permissions]]


@dataclass(frozen=True, slots=True)
class _Proved:
    username: str
    superuser: bool = False


class AuthGate:
    def __init__(
        self,
        *,
        allow_anonymous: bool,
        permissions_for: PermissionsFor,
        password_file: PasswordFile | None = None,
        users: CachedUsers | None = None,
        password_hash: PasswordHash | None = None,
        acl: Acl | None = None,
    ) -> None:
        self.allow_anonymous = allow_anonymous
        self.password_file = password_file
        self.users = users
        self.password_hash = password_hash or PasswordHash("sha256")
        self._permissions_for = permissions_for
        self.acl = acl  # reloaded and closed with the users; permissions_for reads it
        self._down_reported_at = -DOWN_REPORT_INTERVAL
        self._down_unreported = 0

    @property
    def authenticates(self) -> bool:
        """Whether any source of users is configured."""
        return self.password_file is not None or self.users is not None

    async def login(self, login: Login) -> Verdict:
        try:
            return await self._login(login)
        except AclBackendDown as exc:  # the client's ACL cannot be read: never in without it
            log.warning("login of client %r refused: its ACL could not be read (%s)", login.clientid, exc)
            return Verdict(False, "login_backend_down")

    async def _login(self, login: Login) -> Verdict:
        if login.cert_cn is not None:
            return await self._let_in(login, _Proved(login.cert_cn))
        if login.username is None:
            if not self.allow_anonymous:
                return Verdict(False, "login_not_authorized")
            return Verdict(True, permissions=await self._permissions_for(None, login.clientid, False))
        if not self.authenticates:
            # No users to check a name against: it is a label, let in only as anonymous.
            if not self.allow_anonymous:
                return Verdict(False, "login_not_authorized")
            permissions = await self._permissions_for(login.username, login.clientid, False)
            return Verdict(True, username=login.username, permissions=permissions)
        try:
            proved = await self._check(login.username, login.password)
        except BackendDown as exc:
            self._report_down(login.username, exc)
            return Verdict(False, "login_backend_down")
        if proved is None:
            return Verdict(False, "login_bad_credentials")
        return await self._let_in(login, proved)

    def _report_down(self, username: str, exc: BackendDown) -> None:
        """One warning per DOWN_REPORT_INTERVAL: a fleet reconnecting must not flood the log."""
        now = time.monotonic()
        if now - self._down_reported_at < DOWN_REPORT_INTERVAL:
            self._down_unreported += 1
            return
        more = f"; {self._down_unreported} more logins refused since the last report" if self._down_unreported else ""
        log.warning("login of user %r refused: the user database did not answer (%s)%s", username, exc, more)
        self._down_reported_at, self._down_unreported = now, 0

    async def permissions_of(self, username: str | None, clientid: str) -> Permissions:
        """access.Gate.permissions_of: as _login gives them, without the password (the login that
        made the session proved it); a superuser is one as long as the user database says so.
        Raises AclBackendDown or BackendDown when a database that holds them does not answer."""
        superuser = False
        if username is not None and self.users is not None:
            in_file = self.password_file is not None and username in self.password_file
            record = None if in_file else await self.users.find(username)
            superuser = record is not None and record.superuser
        return await self._permissions_for(username, clientid, superuser)

    async def _let_in(self, login: Login, proved: _Proved) -> Verdict:
        permissions = await self._permissions_for(proved.username, login.clientid, proved.superuser)
        return Verdict(True, username=proved.username, permissions=permissions, authenticated=True)

    async def _check(self, username: str, password: bytes | None) -> _Proved | None:
        """The user if the password is right; None if unknown or wrong; BackendDown if not known."""
        if self.password_file is not None and username in self.password_file:
            return _Proved(username) if await self.password_file.check(username, password) else None
        if self.users is None or password is None:
            return None
        record = await self.users.find(username)
        if record is None:
            return None
        if not await self.password_hash.matches_async(password, record.password, record.salt):
            return None
        return _Proved(username, record.superuser)

    def reload(self) -> list[str]:
        """SIGHUP: read the password file again; returns its problems (the old users stay then)."""
        if self.users is not None:
            self.users.clear()  # a changed password or a removed user counts from now on
        problems = self.acl.reload() if self.acl is not None else []
        if self.password_file is None:
            return problems
        try:
            self.password_file.reload()
        except PasswordFileError as exc:
            return problems + str(exc).splitlines()
        log.info("password file %s reloaded: %d users", self.password_file.path, len(self.password_file.users))
        return problems

    async def close(self) -> None:
        if self.users is not None:
            await self.users.close()
        if self.acl is not None:
            await self.acl.close()
