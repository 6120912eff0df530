"""The scope an API key needs for each route (bridge/conf/apikeys.py holds the keys' scopes).

Every GET is `read` (a `read` key sees what the dashboard shows, payloads of retained and queued
messages included), except the routes in ADMIN_READS; every other method (kick, subscribe,
publish, delete, ban, purge, reload) is `admin`. No imports: the guard (routes.py) and the
description (openapi.py) both ask it.
"""

from __future__ import annotations

ADMIN_READS = frozenset({"/api/v1/keys"})  # GET routes that show what only an admin may see


def needed_scope(method: str, route: str) -> str:
    """The scope a request needs: `route` is the route's pattern (`/api/v1/clients/{clientid}`)."""
    if method in ("GET", "HEAD") and route not in ADMIN_READS:
        return "read"
    return "admin"
