"""The naive way of bench.mqtt_bench: a paho-mqtt subscriber (QoS 1) that writes each message
before it takes the next (paho acknowledges a message when its callback returns).
Redis: HSET, ZADD, EXPIRE round trips with redis-py; PostgreSQL: one autocommitted INSERT per
message, awaited. Same command line as bench.mqtt_sketch; stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import signal
import threading
import time
from collections.abc import Callable

import asyncpg
import paho.mqtt.client as paho
import redis as redis_sync
from paho.mqtt.enums import CallbackAPIVersion

from actions.redis import keys
from bench.mqtt_sketch import host_port, parse_args
from bench.pgsql_bench import INSERT
from bridge.msgid import MsgIdGenerator

Write = Callable[[str, bytes], None]


def redis_write(target: str, expire: int) -> Write:
    host, port = host_port(target)
    r = redis_sync.Redis(host=host, port=port, protocol=2)
    ids = MsgIdGenerator("naive")

    def write(topic: str, payload: bytes) -> None:
        msgid = ids.next()
        key = keys.message(msgid)
        fields = {"id": msgid, "from": "", "qos": 1, "topic": topic, "payload": payload, "ts": int(time.time())}
        r.hset(key, mapping=fields)  # type: ignore[arg-type]
        r.zadd(keys.topic_list(topic), {msgid: keys.score(msgid)})
        r.expire(key, expire)

    return write


def pgsql_write(target: str, expire: int) -> Write:
    loop = asyncio.new_event_loop()
    conn = loop.run_until_complete(asyncpg.connect(target))
    ids = MsgIdGenerator("naive")

    def write(topic: str, payload: bytes) -> None:
        arrived = dt.datetime.now(dt.UTC)
        row = (ids.next(), "", topic, 1, False, payload, arrived, arrived + dt.timedelta(seconds=expire))
        loop.run_until_complete(conn.execute(INSERT, *row))

    return write


def main(args: argparse.Namespace) -> None:
    write = (redis_write if args.db == "redis" else pgsql_write)(args.target, args.expired_time)
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=args.client_id, protocol=paho.MQTTv311)
    client.on_message = lambda _client, _userdata, msg: write(msg.topic, bytes(msg.payload))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    host, port = host_port(args.broker)
    client.connect(host, port)
    client.subscribe(args.filter, 1)
    client.loop_start()
    stop.wait()
    client.disconnect()
    client.loop_stop()


if __name__ == "__main__":
    main(parse_args())
