"""The embedded broker's acknowledgement queue (bridge/brokers/embedded/acks.py) without a socket:
acks leave in arrival order once their messages are kept, a run in one write, bounded, and a
message that was not kept is never acknowledged."""

from __future__ import annotations

import asyncio

from bridge.brokers.embedded.acks import AckQueue


class Wire:
    """Where the queue's acknowledgements go: each write as a list, and the losses."""

    def __init__(self) -> None:
        self.writes: list[list[bytes]] = []
        self.pubacks = 0
        self.lost = 0

    def send(self, acks: list[bytes], pubacks: int) -> None:
        self.writes.append(acks)
        self.pubacks += pubacks

    def on_lost(self) -> None:
        self.lost += 1


def queue(limit: int = 8) -> tuple[AckQueue, Wire]:
    wire = Wire()
    return AckQueue(limit, wire.send, wire.on_lost), wire


async def turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_acks_wait_for_every_older_message_then_leave_in_one_write() -> None:
    acks, wire = queue()
    loop = asyncio.get_running_loop()
    first, second, third = (loop.create_future() for _ in range(3))
    await acks.add(first, b"A1", 1)
    await acks.add(second, b"A2", 2)
    await acks.add(third, b"A3", 1)
    third.set_result(None)
    second.set_result(None)
    await turns()
    assert wire.writes == [] and len(acks) == 3  # the oldest is not kept yet
    first.set_result(None)
    await turns()
    assert wire.writes == [[b"A1", b"A2", b"A3"]] and wire.pubacks == 2 and len(acks) == 0


async def test_an_ack_with_nothing_to_keep_goes_out_at_once() -> None:
    acks, wire = queue()
    await acks.add(None, b"A", 1)
    await turns()
    assert wire.writes == [[b"A"]]


async def test_a_message_not_kept_is_never_acknowledged() -> None:
    acks, wire = queue()
    loop = asyncio.get_running_loop()
    kept, failed, after = loop.create_future(), loop.create_future(), loop.create_future()
    for future, ack in ((kept, b"A1"), (failed, b"A2"), (after, b"A3")):
        await acks.add(future, ack, 1)
    kept.set_result(None)
    failed.cancel()
    after.set_result(None)
    await turns()
    assert wire.writes == [[b"A1"]] and wire.lost == 1 and len(acks) == 0


async def test_add_waits_past_the_limit_until_room_is_made() -> None:
    acks, wire = queue(limit=2)
    loop = asyncio.get_running_loop()
    held = [loop.create_future() for _ in range(2)]
    for n, future in enumerate(held):
        await acks.add(future, b"A%d" % n, 1)
    third = asyncio.ensure_future(acks.add(None, b"A2", 1))
    await turns()
    assert not third.done() and len(acks) == 2  # bounded: the third waits
    held[0].set_result(None)
    await turns(5)
    assert third.done() and wire.writes == [[b"A0"]] and len(acks) == 2
    held[1].set_result(None)
    await turns(5)
    assert wire.writes[1:] == [[b"A1", b"A2"]]


async def test_drained_waits_for_every_ack_to_go_out() -> None:
    acks, wire = queue()
    future = asyncio.get_running_loop().create_future()
    await acks.add(future, b"A", 1)
    drained = asyncio.ensure_future(acks.drained())
    await turns()
    assert not drained.done()
    future.set_result(None)
    await turns(5)
    assert drained.done() and wire.writes == [[b"A"]]


async def test_closing_releases_the_waiters_and_takes_nothing_more() -> None:
    acks, wire = queue(limit=1)
    future = asyncio.get_running_loop().create_future()
    await acks.add(future, b"A1", 1)
    waiting = asyncio.ensure_future(acks.add(None, b"A2", 1))
    drained = asyncio.ensure_future(acks.drained())
    await turns()
    assert not waiting.done() and not drained.done()
    acks.close()
    await turns()
    assert waiting.done() and drained.done()
    await acks.add(None, b"A3", 1)  # after close: dropped, the client sends it again
    future.set_result(None)
    await turns()
    assert wire.writes == [[b"A1"]]
