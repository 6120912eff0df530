"""Redis commands packed by hiredis (C) instead of redis-py's asyncio connection (Python).

redis-py's asyncio `Connection.pack_command` builds each command in Python; measured under the
embedded broker's publish path with `rules/redis.conf` it was the largest single cost in the
bridge process (about 12% of its CPU, py-spy). hiredis, already installed for reply parsing,
packs the same RESP bytes in C. Arguments here are always bytes, str, int or float (what hiredis
accepts); a command name of two words ("SCRIPT LOAD") is split as redis-py splits it.
"""

from __future__ import annotations

from typing import Any

import hiredis
import redis.asyncio as aioredis


class _HiredisPacking:
    def pack_command(self, *args: Any) -> list[bytes]:
        name = args[0]
        if (isinstance(name, str) and " " in name) or (isinstance(name, bytes) and b" " in name):
            args = (*name.split(), *args[1:])
        return [hiredis.pack_command(args)]


class PackedConnection(_HiredisPacking, aioredis.Connection):
    pass


class PackedSSLConnection(_HiredisPacking, aioredis.SSLConnection):
    pass
