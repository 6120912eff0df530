"""The Redis command table rules are checked against (actions/redis/commands.py) agrees with the real server."""

from __future__ import annotations

import redis as redis_sync

from actions.redis.commands import ARITY


def test_every_command_of_the_server_is_known_with_its_arity(redis_db: redis_sync.Redis) -> None:
    server = {name.upper(): int(info["arity"]) for name, info in redis_db.command().items()}
    missing = sorted(set(server) - set(ARITY))
    assert missing == []
    # ZRANK / ZREVRANK take WITHSCORE from 7.2 on: the table keeps the newer, looser arity
    looser = {"ZRANK": -3, "ZREVRANK": -3}
    differ = {
        name: (ARITY[name], arity) for name, arity in server.items() if ARITY[name] not in (arity, looser.get(name))
    }
    assert differ == {}
