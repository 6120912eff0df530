"""A gate that applies the ACL and checks no password (until the user gate lands).

Stand-in for auth/__init__.py's `make_gate` (the auth branch): every client logs in under the
user name it presents and gets that user's ACL. The real gate verifies the password first and
then asks `Acl.permissions_for` the same way.
"""

from __future__ import annotations

import logging

from bridge.brokers.embedded.access import Login, Verdict
from bridge.brokers.embedded.auth.aclsource import Acl, AclBackendDown

log = logging.getLogger(__name__)


class AclGate:
    def __init__(self, acl: Acl) -> None:
        self.acl = acl

    async def login(self, login: Login) -> Verdict:
        try:
            permissions = await self.acl.permissions_for(login.username, login.clientid)
        except AclBackendDown as exc:
            log.warning("client %r: its ACL cannot be read (%s): login refused", login.clientid, exc)
            return Verdict(False, "login_backend_down")
        return Verdict(True, username=login.username, permissions=permissions, authenticated=login.username is not None)

    async def close(self) -> None:
        await self.acl.close()
