"""Redis needs no schema; `hookbridge schema` prints the key layout it writes (docs/backends/redis.md#keys)."""

from __future__ import annotations

LAYOUT = """\
# Redis key layout written by hookbridge (nothing to create: keys appear on first write)
mqtt:client:<clientid>         hash    state 1/0, online_at, offline_at (`undefined` until the first disconnect), node
mqtt:node:<node>               hash    clientid -> connect time (Unix seconds; ms with timestamps = milliseconds)
mqtt:sub:<clientid>            hash    topic -> qos; written by applications, read by on_subscribe_lookup
mqtt:msg:<topic>               zset    member msgid, score = publish time in ms (ties: msgid order)
mqtt:msg:<msgid>               hash    id, from, qos, topic, payload, ts (Unix seconds, or ms), retain (true/false)
mqtt:retain:<topic>            zset    the msgid of the topic's retained message (one member)
mqtt:acked:<clientid>:<topic>  string  last acked msgid of a pubsub subscription (`0`: before everything)
mqtt:acked_owner               hash    offset key -> owning clientid, for keys a `:` makes ambiguous
mqtt:event_log                 stream  on_event_log entries: event, ts (ms), clientid, username, node, topic, ...
mqtt:index:msg                 zset    topic index: topics that have a mqtt:msg:<topic> set (score 0, member topic)
mqtt:index:retain              zset    topic index: topics that have a mqtt:retain:<topic> set
mqtt:index:built               string  1 once the index holds the topics written before it (DEL + restart: rebuild)
# type = cluster: the two indexes are mqtt:index:{msg} and mqtt:index:{retain} (one slot each), each with a
# hash of stamps beside it, mqtt:index:{msg}:stamps (topic -> counter) (docs/backends/redis.md#redis-cluster)
"""


def describe() -> str:
    return LAYOUT
