"""The hand-tuned baseline of bench.mqtt_bench: what a well-written subscriber script that does
the bridge's writes looks like when it acknowledges on receipt (and so can lose what it holds
when killed, which the bridge must not).

gmqtt with `optimistic_acknowledgement=True` sends each PUBACK as the PUBLISH arrives; the
handler only appends to a buffer. One writer task takes everything buffered whenever it is free
and writes it as one batch, so batches grow with the load:
- Redis: per message the commands of the bridge's `store` script (actions/redis/scripts.py) with
  the same keys and fields: HSET of the message hash, ZADD to the topic's list, ZADD to the topic
  index, EXPIRE; one non-transactional pipeline per batch, packed and parsed by hiredis on a
  plain socket. (The script also checks the retained set before EXPIRE: these messages are
  never retained, so a script of this kind would not.)
- PostgreSQL: the bridge's rows, one COPY into mqtt_msg per batch and the batch's topics into
  mqtt_topic, in one transaction.

    python -m bench.mqtt_sketch --db redis|pgsql --target 127.0.0.1:6379|postgresql://... \
        --broker 127.0.0.1:1883 --filter 'bench/#' --client-id sketch-1 [--expired-time 3600]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import gmqtt
import hiredis

from actions.redis import keys
from bench.pgsql_bench import COLUMNS, INSERT_TOPICS
from bridge.msgid import MsgIdGenerator

Message = tuple[str, bytes]  # topic, payload
Writer = Callable[[list[Message]], Awaitable[None]]


def parse_args() -> argparse.Namespace:
    """The command line of this script and of bench.mqtt_naive."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", choices=("redis", "pgsql"), required=True)
    parser.add_argument("--target", required=True, help="Redis host:port or a PostgreSQL DSN")
    parser.add_argument("--broker", default="127.0.0.1:1883")
    parser.add_argument("--filter", required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--expired-time", type=int, default=3600)
    return parser.parse_args()


def host_port(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def pack(command: tuple[Any, ...]) -> bytes:
    packed: bytes = hiredis.pack_command(command)
    return packed


async def redis_writer(target: str, expire: int) -> tuple[Writer, Any]:
    """Commands packed by hiredis in C, sent on one socket, the replies parsed by hiredis in bulk:
    redis-py's pipeline packs and parses each command in Python, about 100 µs per message here."""
    reader, writer = await asyncio.open_connection(*host_port(target))
    replies = hiredis.Reader()
    ids = MsgIdGenerator("sketch")

    async def write(batch: list[Message]) -> None:
        now, packed = int(time.time()), []
        for topic, payload in batch:
            msgid = ids.next()
            key, name = keys.message(msgid), keys.enc(topic)
            packed += [
                pack(
                    (b"HSET", key, b"id", msgid, b"from", b"", b"qos", 1, b"topic", name, b"payload", payload,
                     b"ts", now, b"retain", b"false")
                ),
                pack((b"ZADD", keys.topic_list(topic), keys.score(msgid), msgid)),
                pack((b"ZADD", keys.MSG_INDEX, 0, name)),
                pack((b"EXPIRE", key, expire)),
            ]  # fmt: skip
        writer.write(b"".join(packed))
        for _ in range(len(packed)):
            while (reply := replies.gets()) is False:
                replies.feed(await reader.read(1 << 16))
            if isinstance(reply, hiredis.ReplyError):
                raise reply

    async def close() -> None:
        writer.close()
        await writer.wait_closed()

    return write, close


async def pgsql_writer(target: str, expire: int) -> tuple[Writer, Any]:
    conn = await asyncpg.connect(target)
    ids = MsgIdGenerator("sketch")
    keep = dt.timedelta(seconds=expire)

    async def write(batch: list[Message]) -> None:
        arrived = dt.datetime.now(dt.UTC)
        rows = [(ids.next(), "", topic, 1, False, payload, arrived, arrived + keep) for topic, payload in batch]
        async with conn.transaction():
            await conn.execute(INSERT_TOPICS, sorted({topic for topic, _ in batch}))
            await conn.copy_records_to_table("mqtt_msg", records=rows, columns=COLUMNS)

    return write, conn.close


class Buffer:
    """Messages received and acknowledged, not written yet."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.filled = asyncio.Event()

    def on_message(self, client: gmqtt.Client, topic: str, payload: bytes, qos: int, properties: Any) -> int:
        self.messages.append((topic, payload))
        self.filled.set()
        return 0

    async def drain(self, write: Writer, stop: asyncio.Event) -> None:
        """Write whatever is buffered, batch after batch, until `stop` and the buffer is empty."""
        while self.messages or not stop.is_set():
            if not self.messages:
                await self.filled.wait()  # set by a message, and by the stop
                self.filled.clear()
                continue
            batch, self.messages = self.messages, []
            await write(batch)


async def serve(args: argparse.Namespace) -> None:
    """Receive and write concurrently until SIGTERM."""
    make = redis_writer if args.db == "redis" else pgsql_writer
    write, close = await make(args.target, args.expired_time)
    buffer, stop = Buffer(), asyncio.Event()

    def on_term() -> None:
        stop.set()
        buffer.filled.set()  # wakes the writer to finish

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, on_term)
    client = gmqtt.Client(args.client_id, clean_session=True, optimistic_acknowledgement=True)
    client.on_message = buffer.on_message
    host, port = host_port(args.broker)
    await client.connect(host, port)
    client.subscribe(args.filter, qos=1)
    writing = asyncio.create_task(buffer.drain(write, stop))
    await stop.wait()
    await client.disconnect()
    await writing
    await close()


def run(coroutine: Awaitable[None]) -> None:
    """asyncio.run on uvloop when it is installed."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(coroutine)  # type: ignore[arg-type]
    else:
        uvloop.run(coroutine)  # type: ignore[arg-type]


if __name__ == "__main__":
    run(serve(parse_args()))
