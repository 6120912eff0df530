"""The gate the broker core asks once per CONNECT (access.Gate), built by `make_gate`.

Who is let in:
- a client certificate's common name, where the TLS listener takes it as the user name
  (`Login.cert_cn` is set only then): that user, authenticated by the certificate;
- a user name with the right password, from the password file first, else the database;
- no user name: only when anonymous access is allowed.
An unknown user or a wrong password is refused whatever `allow_anonymous` says; a database that
does not answer refuses the login (`login_backend_down`), it never lets one in.

Slow password hashes are checked in the gate's `FairChecks` (checks.py): a bounded queue per
source address and a turn for each address, so wrong passwords flooding from one place do not
hold up the logins from others; past its queue a CONNECT is refused, after BUSY_DELAY (`login_busy`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bridge.accounts import BackendDown
from bridge.brokers.embedded.access import Login, Permissions, Verdict
from bridge.brokers.embedded.auth.aclsource import Acl, AclBackendDown
from bridge.brokers.embedded.auth.checks import FairChecks, TooManyChecks
from bridge.brokers.embedded.auth.hashes import PasswordHash
from bridge.brokers.embedded.auth.passwords import PasswordFile, PasswordFileError
from bridge.brokers.embedded.auth.users import CachedUsers
from bridge.brokers.embedded.throttle import Throttle

log = logging.getLogger("bridge.brokers.embedded.auth")

DOWN_REPORT_INTERVAL = 10.0  # seconds between two warnings that the user database is down
BUSY_REPORT_INTERVAL = 10.0  # seconds between two warnings that an address's checks queue is full
# Seconds a CONNECT refused for its address's full queue waits for its CONNACK: a flood that
# connects again at once would otherwise keep the broker busy accepting and refusing.
BUSY_DELAY = 1.0

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
        checks: FairChecks | None = None,
        busy_delay: float = BUSY_DELAY,
    ) -> None:
        self.allow_anonymous = allow_anonymous
        self.password_file = password_file
        self.users = users
        self.password_hash = password_hash or PasswordHash("sha256")
        self._permissions_for = permissions_for
        self.acl = acl  # reloaded and closed with the users; permissions_for reads it
        self._down_reports = Throttle(DOWN_REPORT_INTERVAL)
        self.checks = checks or FairChecks()
        self.busy_delay = busy_delay
        self._busy_reports = Throttle(BUSY_REPORT_INTERVAL)

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
            proved = await self._check(login.username, login.password, _address(login.peername))
        except BackendDown as exc:
            self._report_down(login.username, exc)
            return Verdict(False, "login_backend_down")
        except TooManyChecks as busy:
            self._report_busy(login.username, busy)
            await asyncio.sleep(self.busy_delay)
            return Verdict(False, "login_busy")
        if proved is None:
            return Verdict(False, "login_bad_credentials")
        return await self._let_in(login, proved)

    def _report_down(self, username: str, exc: BackendDown) -> None:
        """One warning per DOWN_REPORT_INTERVAL: a fleet reconnecting must not flood the log."""
        skipped = self._down_reports.due()
        if skipped is not None:
            more = f"; {skipped} more logins refused since the last report" if skipped else ""
            log.warning("login of user %r refused: the user database did not answer (%s)%s", username, exc, more)

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

    def _report_busy(self, username: str, busy: TooManyChecks) -> None:
        """What happened, once per BUSY_REPORT_INTERVAL (a flood would flood the log too)."""
        skipped = self._busy_reports.due()
        if skipped is not None:
            log.warning(
                "login of user %r refused without checking its password: %s (at most %d per address; "
                "the password checks of other addresses go on)%s",
                username,
                busy,
                self.checks.per_address,
                f"; {skipped} more refused so since the last report" if skipped else "",
            )

    async def _let_in(self, login: Login, proved: _Proved) -> Verdict:
        permissions = await self._permissions_for(proved.username, login.clientid, proved.superuser)
        return Verdict(True, username=proved.username, permissions=permissions, authenticated=True)

    async def _check(self, username: str, password: bytes | None, address: str) -> _Proved | None:
        """The user if the password is right; None if unknown or wrong; BackendDown if not known;
        TooManyChecks if `address` has its share of slow checks waiting already."""
        run = functools.partial(self.checks.run, address)
        if self.password_file is not None and username in self.password_file:
            return _Proved(username) if await self.password_file.check(username, password, run) else None
        if self.users is None or password is None:
            return None
        record = await self.users.find(username)
        if record is None:
            return None
        if not await self.password_hash.matches_async(password, record.password, record.salt, run):
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
        self.checks.close()
        if self.users is not None:
            await self.users.close()
        if self.acl is not None:
            await self.acl.close()


def _address(peername: str) -> str:
    """The host of a `host:port` or `[v6 host]:port` peer name: whose turn a check takes."""
    host = peername.rpartition(":")[0]
    return host.strip("[]") or peername
