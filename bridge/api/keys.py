"""API keys at run time: who a request is, what its key's scope lets it do on each route, when
each key was last used, and the keys read again on SIGHUP (the config's `api.keys`,
bridge/conf/apikeys.py).

What each route needs is in scopes.py. `GET /api/v1/keys` shows an admin each key's name, scope
and last use (time and address): never a key or its hash.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from bridge.api.answers import ApiFace
from bridge.conf.apikeys import ApiKey, find_key
from bridge.conf.hosts import is_loopback

log = logging.getLogger(__name__)

ANONYMOUS = ApiKey("anonymous-loopback", "", "admin")  # api.allow_anonymous_loopback: the operator's own machine


class Keys:
    """The keys in force and their last use."""

    def __init__(self, keys: Mapping[str, ApiKey], anonymous_loopback: bool) -> None:
        self.keys = dict(keys)
        self.anonymous_loopback = anonymous_loopback
        self.last_used: dict[str, tuple[float, str]] = {}  # name -> (Unix time, address)

    def caller(self, request: web.Request) -> ApiKey | None:
        """The key a request presents (or the anonymous loopback caller), or None: refused."""
        header = request.headers.get("Authorization", "")
        scheme, _, presented = header.partition(" ")
        if scheme.lower() == "bearer" and presented.strip() and self.keys:
            return find_key(self.keys, presented.strip())
        if not header and self.anonymous_loopback and request.remote and is_loopback(request.remote):
            return ANONYMOUS
        return None

    def used(self, key: ApiKey, request: web.Request) -> None:
        self.last_used[key.name] = (time.time(), request.remote or "")

    def replace(self, keys: Mapping[str, ApiKey]) -> None:
        """SIGHUP: the keys of the config read again. A removed key is refused from now on; a
        kept one keeps its last use."""
        before = set(self.keys)
        self.keys = dict(keys)
        for name in before - set(keys):
            self.last_used.pop(name, None)
        added, removed = sorted(set(keys) - before), sorted(before - set(keys))
        log.info("api: keys reloaded: %d keys (added %s, removed %s)", len(keys), added or "none", removed or "none")

    def describe(self) -> list[dict[str, Any]]:
        listed = []
        for name, key in sorted(self.keys.items()):
            when, where = self.last_used.get(name, (None, None))
            listed.append({"name": name, "scope": key.scope, "last_used": when, "last_from": where})
        return listed


def key_routes(api: ApiFace, prefix: str) -> list[web.RouteDef]:
    return [web.get(f"{prefix}/keys", KeyRoutes(api).listed, allow_head=False)]


class KeyRoutes:
    def __init__(self, api: ApiFace) -> None:
        self.api = api

    async def listed(self, request: web.Request) -> web.Response:
        return self.api.page(request, ((key["name"], key) for key in self.api.access.describe()))
