"""Redis command names and arities, so a `commands` action is checked when the rules load.

Supported servers are Redis 6.2 to 8.x. The table is the union of their commands: a name any of
them knows is accepted (the server in use may still be older). Arity is Redis's own (COMMAND
INFO): N means exactly N words with the name, -N at least N, 0 not checked (newer commands
whose arity this table does not pin). The Redis 7.0 part is verified against the real server
by tests/integration/test_redis_command_table.py. Module commands (`JSON.SET`, `FT.SEARCH`)
have a dot in their name and are not checked: which modules a server loads is its own choice.
"""

from __future__ import annotations

import difflib

# Redis 7.0 (COMMAND), with ZRANK / ZREVRANK at 7.2's arity (WITHSCORE made them -3).
_REDIS_7_0 = """
    ACL:-2 APPEND:3 ASKING:1 AUTH:-2 BGREWRITEAOF:1 BGSAVE:-1 BITCOUNT:-2 BITFIELD:-2 BITFIELD_RO:-2 BITOP:-4
    BITPOS:-3 BLMOVE:6 BLMPOP:-5 BLPOP:-3 BRPOP:-3 BRPOPLPUSH:4 BZMPOP:-5 BZPOPMAX:-3 BZPOPMIN:-3 CLIENT:-2
    CLUSTER:-2 COMMAND:-1 CONFIG:-2 COPY:-3 DBSIZE:1 DEBUG:-2 DECR:2 DECRBY:3 DEL:-2 DISCARD:1 DUMP:2 ECHO:2
    EVAL:-3 EVALSHA:-3 EVALSHA_RO:-3 EVAL_RO:-3 EXEC:1 EXISTS:-2 EXPIRE:-3 EXPIREAT:-3 EXPIRETIME:2 FAILOVER:-1
    FCALL:-3 FCALL_RO:-3 FLUSHALL:-1 FLUSHDB:-1 FUNCTION:-2 GEOADD:-5 GEODIST:-4 GEOHASH:-2 GEOPOS:-2 GEORADIUS:-6
    GEORADIUSBYMEMBER:-5 GEORADIUSBYMEMBER_RO:-5 GEORADIUS_RO:-6 GEOSEARCH:-7 GEOSEARCHSTORE:-8 GET:2 GETBIT:3
    GETDEL:2 GETEX:-2 GETRANGE:4 GETSET:3 HDEL:-3 HELLO:-1 HEXISTS:3 HGET:3 HGETALL:2 HINCRBY:4 HINCRBYFLOAT:4
    HKEYS:2 HLEN:2 HMGET:-3 HMSET:-4 HRANDFIELD:-2 HSCAN:-3 HSET:-4 HSETNX:4 HSTRLEN:3 HVALS:2 INCR:2 INCRBY:3
    INCRBYFLOAT:3 INFO:-1 KEYS:2 LASTSAVE:1 LATENCY:-2 LCS:-3 LINDEX:3 LINSERT:5 LLEN:2 LMOVE:5 LMPOP:-4 LOLWUT:-1
    LPOP:-2 LPOS:-3 LPUSH:-3 LPUSHX:-3 LRANGE:4 LREM:4 LSET:4 LTRIM:4 MEMORY:-2 MGET:-2 MIGRATE:-6 MODULE:-2
    MONITOR:1 MOVE:3 MSET:-3 MSETNX:-3 MULTI:1 OBJECT:-2 PERSIST:2 PEXPIRE:-3 PEXPIREAT:-3 PEXPIRETIME:2 PFADD:-2
    PFCOUNT:-2 PFDEBUG:3 PFMERGE:-2 PFSELFTEST:1 PING:-1 PSETEX:4 PSUBSCRIBE:-2 PSYNC:-3 PTTL:2 PUBLISH:3
    PUBSUB:-2 PUNSUBSCRIBE:-1 QUIT:-1 RANDOMKEY:1 READONLY:1 READWRITE:1 RENAME:3 RENAMENX:3 REPLCONF:-1
    REPLICAOF:3 RESET:1 RESTORE:-4 RESTORE-ASKING:-4 ROLE:1 RPOP:-2 RPOPLPUSH:3 RPUSH:-3 RPUSHX:-3 SADD:-3 SAVE:1
    SCAN:-2 SCARD:2 SCRIPT:-2 SDIFF:-2 SDIFFSTORE:-3 SELECT:2 SET:-3 SETBIT:4 SETEX:4 SETNX:3 SETRANGE:4
    SHUTDOWN:-1 SINTER:-2 SINTERCARD:-3 SINTERSTORE:-3 SISMEMBER:3 SLAVEOF:3 SLOWLOG:-2 SMEMBERS:2 SMISMEMBER:-3
    SMOVE:4 SORT:-2 SORT_RO:-2 SPOP:-2 SPUBLISH:3 SRANDMEMBER:-2 SREM:-3 SSCAN:-3 SSUBSCRIBE:-2 STRLEN:2
    SUBSCRIBE:-2 SUBSTR:4 SUNION:-2 SUNIONSTORE:-3 SUNSUBSCRIBE:-1 SWAPDB:3 SYNC:1 TIME:1 TOUCH:-2 TTL:2 TYPE:2
    UNLINK:-2 UNSUBSCRIBE:-1 UNWATCH:1 WAIT:3 WATCH:-2 XACK:-4 XADD:-5 XAUTOCLAIM:-6 XCLAIM:-6 XDEL:-3 XGROUP:-2
    XINFO:-2 XLEN:2 XPENDING:-3 XRANGE:-4 XREAD:-4 XREADGROUP:-7 XREVRANGE:-4 XSETID:-3 XTRIM:-4 ZADD:-4 ZCARD:2
    ZCOUNT:4 ZDIFF:-3 ZDIFFSTORE:-4 ZINCRBY:4 ZINTER:-3 ZINTERCARD:-3 ZINTERSTORE:-4 ZLEXCOUNT:4 ZMPOP:-4
    ZMSCORE:-3 ZPOPMAX:-2 ZPOPMIN:-2 ZRANDMEMBER:-2 ZRANGE:-4 ZRANGEBYLEX:-4 ZRANGEBYSCORE:-4 ZRANGESTORE:-5
    ZRANK:-3 ZREM:-3 ZREMRANGEBYLEX:4 ZREMRANGEBYRANK:4 ZREMRANGEBYSCORE:4 ZREVRANGE:-4 ZREVRANGEBYLEX:-4
    ZREVRANGEBYSCORE:-4 ZREVRANK:-3 ZSCAN:-3 ZSCORE:3 ZUNION:-3 ZUNIONSTORE:-4
"""
# Redis 6.2 only (removed in 7.0), then 7.2 (WAITAOF), 7.4 (hash field expiry), 8.0 (HGETDEL,
# HGETEX, HSETEX, vector sets) and 8.2 (XDELEX, XACKDEL).
_OTHER_VERSIONS = """
    STRALGO:-2
    HEXPIRE:-6 HEXPIREAT:-6 HEXPIRETIME:-5 HGETDEL:-5 HGETEX:-5 HPERSIST:-5 HPEXPIRE:-6 HPEXPIREAT:-6
    HPEXPIRETIME:-5 HPTTL:-5 HSETEX:-6 HTTL:-5 VADD:0 VCARD:0 VDIM:0 VEMB:0 VGETATTR:0 VINFO:0 VLINKS:0
    VRANDMEMBER:0 VREM:0 VSETATTR:0 VSIM:0 WAITAOF:4 XACKDEL:0 XDELEX:0
"""

ARITY: dict[str, int] = {
    name: int(arity) for name, arity in (word.split(":") for word in (_REDIS_7_0 + _OTHER_VERSIONS).split())
}

# Commands that would block, or change the state of, the pooled connection every rule shares.
REFUSED: dict[str, str] = {
    **dict.fromkeys(
        ("BLPOP", "BRPOP", "BLMOVE", "BLMPOP", "BRPOPLPUSH", "BZPOPMIN", "BZPOPMAX", "BZMPOP", "WAIT", "WAITAOF"),
        "it blocks a pooled connection",
    ),
    **dict.fromkeys(
        ("SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE", "MONITOR"),
        "it turns a pooled connection into a listener",
    ),
    **dict.fromkeys(
        ("SELECT", "AUTH", "HELLO", "RESET", "QUIT", "MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH"),
        "it changes the state of a pooled connection (the pool's settings choose database and login)",
    ),
    **dict.fromkeys(("SYNC", "PSYNC", "REPLCONF", "SHUTDOWN"), "it is not a command for a client"),
}


def command_problem(words: list[str]) -> str | None:
    """Why `words` (a command split on spaces) cannot run as a rule's command, or None.

    A name holding a placeholder is only known per event, so it is not checked.
    """
    name = words[0].upper()
    if "${" in name or "." in name:
        return None
    arity = ARITY.get(name)
    if arity is None:
        close = difflib.get_close_matches(name, list(ARITY), n=1)
        return f"unknown Redis command {words[0]!r}" + (f" (did you mean {close[0]}?)" if close else "")
    if name in REFUSED:
        return f"Redis {name} cannot run in a rule: {REFUSED[name]}"
    given = len(words) - 1
    if arity > 0 and len(words) != arity:
        return f"Redis {name} takes {arity - 1} argument{'s' if arity != 2 else ''}, got {given}"
    if arity < 0 and len(words) < -arity:
        return f"Redis {name} takes at least {-arity - 1} argument{'s' if arity != -2 else ''}, got {given}"
    return None


def statement_problem(text: str) -> str | None:
    """A `commands` action's command, checked when the rules load (PLUGIN's `check_statement`)."""
    return command_problem(text.split())
