"""The banned list through the API (bridge/brokers/embedded/bans.py holds it):

- `GET /api/v1/bans`: the bans in force, sorted by (as, who), paged;
- `POST /api/v1/bans` `{"as": "clientid"|"username"|"address", "who": ..., "reason": ...,
  "until": <Unix seconds> or "duration": <seconds>}`: ban (for ever when neither is given); the
  connected clients it covers are closed at once;
- `DELETE /api/v1/bans/{as}/{who}`: lift it (`who` may hold `/`: `address/10.0.0.0/8`).

EMQX's names (`as`, `who`, `by`, `at`, `until`), so an operator's scripts carry over.
"""

from __future__ import annotations

import time

from aiohttp import web

from bridge.api.answers import ApiError, ApiFace, mqtt_string, reply
from bridge.brokers.embedded.bans import KINDS, BanError, make_ban


def ban_routes(api: ApiFace, prefix: str) -> list[web.RouteDef]:
    handlers = BanRoutes(api)
    return [
        web.get(f"{prefix}/bans", handlers.listed, allow_head=False),
        web.post(f"{prefix}/bans", handlers.add),
        web.delete(f"{prefix}/bans/{{as}}/{{who:.+}}", handlers.lift),
    ]


class BanRoutes:
    def __init__(self, api: ApiFace) -> None:
        self.api = api

    async def listed(self, request: web.Request) -> web.Response:
        broker = self.api.embedded()
        return self.api.page(request, ((f"{ban.kind}/{ban.who}", ban.describe()) for ban in broker.bans.listed()))

    async def add(self, request: web.Request) -> web.Response:
        api = self.api
        broker = api.embedded()
        body = await api.body(request)
        now = time.time()
        until = body.get("until")
        if "duration" in body:
            duration = body["duration"]
            if until is not None:
                raise ApiError(400, "give until or duration, not both")
            if isinstance(duration, bool) or not isinstance(duration, int | float) or duration <= 0:
                raise ApiError(400, "duration must be a number of seconds above 0")
            until = now + duration
        who = body.get("who")
        if isinstance(who, str):
            mqtt_string(who, "who")
        reason, by = body.get("reason", ""), api.who(request) or ""
        try:
            ban = make_ban(body.get("as"), who, reason=reason, by=by, until=until, now=now)
        except BanError as bad:
            raise ApiError(400, str(bad)) from None
        api.changed(request, "banned %s %r until %s", ban.kind, ban.who, ban.until or "ever")
        kicked = broker.ban(ban)
        return reply({**ban.describe(), "kicked": kicked}, 201)

    async def lift(self, request: web.Request) -> web.Response:
        broker = self.api.embedded()
        kind = request.match_info["as"]
        if kind not in KINDS:
            raise ApiError(400, f"as must be one of {', '.join(KINDS)}")
        who = mqtt_string(request.match_info["who"], "who")
        lifted = broker.bans.remove(kind, who)
        if lifted is None:
            raise ApiError(404, "no such ban")
        self.api.changed(request, "lifted the ban on %s %r", kind, who)
        return reply({"lifted": lifted.describe()})
