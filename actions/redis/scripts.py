"""Lua scripts for writes that must be atomic or conditional (one round trip each).

Each script names every key it touches in KEYS, except the hashes of older
retained messages in `retain_set` / `retain_clear`, whose ids are only known
inside the script (single-node deployments; SPEC 5.1 layout).
"""

from __future__ import annotations

# KEYS: msg hash, topic zset, retain zset
# ARGV: msgid, score, expire, from, qos, topic, payload, ts, retain
STORE = """
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'from', ARGV[4], 'qos', ARGV[5], 'topic', ARGV[6],
           'payload', ARGV[7], 'ts', ARGV[8], 'retain', ARGV[9])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
if tonumber(ARGV[3]) > 0 and not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
return 1
"""

# Shared by the two retain scripts: let go of the message that was retained.
# Its hash expires like any stored message (expire > 0); with no expiry it is
# deleted unless the topic's message list still holds it.
_RELEASE = """
local function release(old, keep, expire, topic_zset)
  if old == keep then return end
  local key = 'mqtt:msg:' .. old
  if expire > 0 then
    redis.call('EXPIRE', key, expire)
  elseif not redis.call('ZSCORE', topic_zset, old) then
    redis.call('DEL', key)
  end
end
"""

# KEYS: msg hash, retain zset, topic zset
# ARGV: msgid, score, expire, from, qos, topic, payload, ts, retain
RETAIN_SET = (
    _RELEASE
    + """
local expire = tonumber(ARGV[3])
for _, old in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do release(old, ARGV[1], expire, KEYS[3]) end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'from', ARGV[4], 'qos', ARGV[5], 'topic', ARGV[6],
           'payload', ARGV[7], 'ts', ARGV[8], 'retain', ARGV[9])
redis.call('PERSIST', KEYS[1])
redis.call('DEL', KEYS[2])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return 1
"""
)

# KEYS: retain zset, topic zset     ARGV: expire
RETAIN_CLEAR = (
    _RELEASE
    + """
local expire = tonumber(ARGV[1])
for _, old in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do release(old, '', expire, KEYS[2]) end
redis.call('DEL', KEYS[1])
return 1
"""
)

# KEYS: topic zset, msg hash, retain zset     ARGV: msgid
ACK_QUEUE = """
redis.call('ZREM', KEYS[1], ARGV[1])
if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then redis.call('DEL', KEYS[2]) end
return 1
"""

# KEYS: offset keys (mqtt:acked:<clientid>:<filter>)     ARGV: msgid
# An offset moves only forward, and only where a pubsub fetch created it.
# Ids are fixed-width upper-case hex, so string order is time order.
ADVANCE = """
local moved = 0
for _, key in ipairs(KEYS) do
  local current = redis.call('GET', key)
  if current and current < ARGV[1] then
    redis.call('SET', key, ARGV[1])
    moved = moved + 1
  end
end
return moved
"""

ALL = {
    "store": STORE,
    "retain_set": RETAIN_SET,
    "retain_clear": RETAIN_CLEAR,
    "ack_queue": ACK_QUEUE,
    "advance": ADVANCE,
}
