"""Lua scripts of a `type = cluster` pool: each touches ONE key, or keys of one hash slot.

A Redis Cluster runs a script only when all its keys hash to one slot, and the seed-003 layout
spreads a message over several (its hash, its topic's list, the index). So on a cluster the
single-node scripts (scripts.py) become steps (cluster_functions.py), and the steps that must be
conditional or atomic are these. Each is idempotent: a batch replayed after a failure converges.
"""

from __future__ import annotations

from actions.redis.scripts import SORTED_SET_OR_NONE

# KEYS: msg hash     ARGV: msgid, expire, from, qos, topic, payload, ts, retain
# The hash of a retained message, stored by on_message_publish / on_message_store. A retain rule
# may already hold it, and then made it persist (TTL -1): it keeps that, as the single-node script
# keeps it by looking in the retained set (another slot here). A replay keeps the earlier deadline.
STORE_HASH = """
local ttl = redis.call('TTL', KEYS[1])
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'from', ARGV[3], 'qos', ARGV[4], 'topic', ARGV[5],
           'payload', ARGV[6], 'ts', ARGV[7], 'retain', ARGV[8])
local expire = tonumber(ARGV[2])
if expire > 0 and ttl ~= -1 and (ttl < 0 or ttl > expire) then redis.call('EXPIRE', KEYS[1], expire) end
return 1
"""

# KEYS: retain zset (mqtt:retain:<topic>)     ARGV: msgid ('' clears), score
# Returns the ids to release. The newer id wins whatever order retains (or their replays) come
# in: ids are fixed-width hex, so string order is publish order. A retain older than the one held
# releases itself; a replay of the one held changes nothing.
RETAIN_SWAP = (
    SORTED_SET_OR_NONE
    + """
local refused = refuse_other_type(KEYS[1])
if refused then return refused end
local held = redis.call('ZRANGE', KEYS[1], 0, -1)
if ARGV[1] == '' then
  redis.call('DEL', KEYS[1])
  return held
end
for _, old in ipairs(held) do
  if old == ARGV[1] then return {} end
  if old > ARGV[1] then return {ARGV[1]} end
end
redis.call('DEL', KEYS[1])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return held
"""
)

# KEYS: offset key     ARGV: msgid
# A pubsub offset moves only forward, and only where a pubsub fetch created it.
ADVANCE_ONE = """
local current = redis.call('GET', KEYS[1])
if current and current < ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1])
  return 1
end
return 0
"""

# KEYS: a topic index, its stamps hash (one slot: hash tag)     ARGV: topics
# The index entry of a topic that was just written, and a new stamp, so that a trim that saw the
# topic's set empty before this write does not drop the entry (INDEX_DROP).
INDEX_TOUCH = """
for _, topic in ipairs(ARGV) do
  redis.call('ZADD', KEYS[1], 0, topic)
  redis.call('HINCRBY', KEYS[2], topic, 1)
end
return #ARGV
"""

# KEYS: a topic index, its stamps hash     ARGV: topic, the stamp read before the set was seen empty
# Drops the entry only if no write touched the topic since: a write that came in between either
# re-stamped it (the drop is skipped) or comes after the drop and adds the topic again.
INDEX_DROP = """
local stamp = redis.call('HGET', KEYS[2], ARGV[1]) or ''
if stamp ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
"""

ALL = {
    "store_hash": STORE_HASH,
    "retain_swap": RETAIN_SWAP,
    "advance_one": ADVANCE_ONE,
    "index_touch": INDEX_TOUCH,
}
