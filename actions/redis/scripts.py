"""Lua scripts for writes that must be atomic or conditional (one round trip each).

Each script names every key it touches in KEYS, except the hashes of older
retained messages in `retain_set` / `retain_clear`, whose ids are only known
inside the script (single-node deployments; the docs/backends/redis.md#keys layout).

The scripts that create or empty a topic's sorted set also add or remove the topic in the
topic index (index.py) in the same script, so the index never disagrees with the data.
"""

from __future__ import annotations

# KEYS: msg hash, topic zset, retain zset, message topic index
# ARGV: msgid, score, expire, from, qos, topic, payload, ts, retain
STORE = """
local retained_set = redis.call('TYPE', KEYS[3]).ok == 'zset'
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'from', ARGV[4], 'qos', ARGV[5], 'topic', ARGV[6],
           'payload', ARGV[7], 'ts', ARGV[8], 'retain', ARGV[9])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[4], 0, ARGV[6])
if tonumber(ARGV[3]) > 0 and not (retained_set and redis.call('ZSCORE', KEYS[3], ARGV[1])) then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
return 1
"""

# Shared by the two retain scripts: a retained key EMQX 4.4 wrote as a string or a hash (not
# migrated) is left as it is, and this job fails with an error naming it (not the batch).
SORTED_SET_OR_NONE = """
local function refuse_other_type(key)
  local kind = redis.call('TYPE', key).ok
  if kind ~= 'zset' and kind ~= 'none' then
    return redis.error_reply('HOOKBRIDGE_WRONGTYPE ' .. key .. ' is a ' .. kind ..
      ', not the sorted set hookbridge keeps (EMQX 4.4 wrote it so): left as it is;' ..
      ' hookbridge migrate-emqx44 converts it')
  end
end
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

# KEYS: msg hash, retain zset, topic zset, retained topic index
# ARGV: msgid, score, expire, from, qos, topic, payload, ts, retain, the message's own expiry (0: none)
# A retained message's hash lives while it is retained (no expired_time), or until its own MQTT 5
# message expiry: then the retain lookup finds no hash and sends nothing.
RETAIN_SET = (
    _RELEASE
    + SORTED_SET_OR_NONE
    + """
local refused = refuse_other_type(KEYS[2])
if refused then return refused end
local expire = tonumber(ARGV[3])
for _, old in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do release(old, ARGV[1], expire, KEYS[3]) end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'from', ARGV[4], 'qos', ARGV[5], 'topic', ARGV[6],
           'payload', ARGV[7], 'ts', ARGV[8], 'retain', ARGV[9])
local own = tonumber(ARGV[10])
if own > 0 then redis.call('EXPIRE', KEYS[1], own) else redis.call('PERSIST', KEYS[1]) end
redis.call('DEL', KEYS[2])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[4], 0, ARGV[6])
return 1
"""
)

# KEYS: retain zset, topic zset, retained topic index     ARGV: expire, topic
RETAIN_CLEAR = (
    _RELEASE
    + SORTED_SET_OR_NONE
    + """
local refused = refuse_other_type(KEYS[1])
if refused then return refused end
local expire = tonumber(ARGV[1])
for _, old in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do release(old, '', expire, KEYS[2]) end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[3], ARGV[2])
return 1
"""
)

# KEYS: topic zset, msg hash, retain zset, message topic index     ARGV: msgid, topic
ACK_QUEUE = """
redis.call('ZREM', KEYS[1], ARGV[1])
local retained = redis.call('TYPE', KEYS[3]).ok == 'zset' and redis.call('ZSCORE', KEYS[3], ARGV[1])
if not retained then redis.call('DEL', KEYS[2]) end
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('ZREM', KEYS[4], ARGV[2]) end
return 1
"""

# KEYS: topic zset (messages or retained), its topic index     ARGV: topic, members to remove...
# Expired ids leave the topic's set; the topic leaves the index once its set is gone (Redis
# deletes an empty sorted set). Also drops an index entry whose set was deleted by hand.
FORGET = """
for i = 2, #ARGV, 1000 do redis.call('ZREM', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV))) end
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('ZREM', KEYS[2], ARGV[1]) end
return 1
"""

# KEYS: a topic index, then sorted sets found by SCAN     ARGV: their topics, in KEYS order
# Building the index beside running writers: a set deleted since the SCAN saw it is skipped
# (its deleting script already removed the topic); a set created since is indexed by its writer.
INDEX_ADD = """
local added = 0
for i = 2, #KEYS do
  if redis.call('TYPE', KEYS[i]).ok == 'zset' then
    added = added + redis.call('ZADD', KEYS[1], 0, ARGV[i - 1])
  end
end
return added
"""

# Pubsub offsets. An offset key two (clientid, filter) pairs could share (keys.ACKED_OWNER) is
# owned by the client that created it (or, for one made before owners were recorded, the first
# that subscribes again): another client's reads, moves and deletes of it are refused.
_OWNED = """
local function owned(key, owners, clientid, ambiguous)
  if ambiguous ~= '1' then return true end
  local owner = redis.call('HGET', owners, key)
  return owner == clientid
end
"""

# KEYS: offset key, owners hash     ARGV: clientid, ambiguous (1/0)
# Returns {0} refused, {1} no offset yet, {2, msgid} the offset.
OFFSET_GET = """
if ARGV[2] == '1' then
  local owner = redis.call('HGET', KEYS[2], KEYS[1])
  if owner and owner ~= ARGV[1] then return {0} end
  if not owner and redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[2], KEYS[1], ARGV[1]) end
end
local value = redis.call('GET', KEYS[1])
if value then return {2, value} end
return {1}
"""

# KEYS: offset key, owners hash     ARGV: clientid, ambiguous (1/0), first offset
OFFSET_CREATE = """
if ARGV[2] == '1' then
  local owner = redis.call('HGET', KEYS[2], KEYS[1])
  if owner and owner ~= ARGV[1] then return 0 end
  redis.call('HSET', KEYS[2], KEYS[1], ARGV[1])
end
redis.call('SET', KEYS[1], ARGV[3], 'NX')
return 1
"""

# KEYS: offset keys (mqtt:acked:<clientid>:<filter>), then the owners hash
# ARGV: msgid, clientid, then per offset key its ambiguous flag (1/0)
# An offset moves only forward, and only where a pubsub fetch created it.
# Ids are fixed-width upper-case hex, so string order is time order.
ADVANCE = (
    _OWNED
    + """
local owners = KEYS[#KEYS]
local moved = 0
for i = 1, #KEYS - 1 do
  local key = KEYS[i]
  local current = redis.call('GET', key)
  if current and current < ARGV[1] and owned(key, owners, ARGV[2], ARGV[2 + i]) then
    redis.call('SET', key, ARGV[1])
    moved = moved + 1
  end
end
return moved
"""
)

# KEYS: offset key, owners hash     ARGV: clientid, ambiguous (1/0)
ACKED_DELETE = """
if ARGV[2] == '1' then
  local owner = redis.call('HGET', KEYS[2], KEYS[1])
  if owner and owner ~= ARGV[1] then return 0 end
  redis.call('HDEL', KEYS[2], KEYS[1])
end
return redis.call('DEL', KEYS[1])
"""

ALL = {
    "store": STORE,
    "retain_set": RETAIN_SET,
    "retain_clear": RETAIN_CLEAR,
    "ack_queue": ACK_QUEUE,
    "advance": ADVANCE,
    "acked_delete": ACKED_DELETE,
}
