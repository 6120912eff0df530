"""`AfterCommit` (bridge/brokers/embedded/aftercommit.py) without a socket or a store: held writes
go out in the order they were held, each once its commit is done and everything before it is out;
a failed commit is waited for again; the connection hears when nothing is held any more; what a
closed connection held is dropped."""

from __future__ import annotations

import asyncio

from bridge.brokers.embedded.aftercommit import AfterCommit


class Socket:
    def __init__(self) -> None:
        self.writes: list[tuple[bytes, int]] = []
        self.drained = 0

    def write(self, data: bytes, packets: int) -> None:
        self.writes.append((data, packets))

    def drain(self) -> None:
        self.drained += 1


async def turn() -> None:
    for _ in range(3):  # done callbacks run on the next loop turns
        await asyncio.sleep(0)


async def test_writes_leave_in_order_once_their_commits_are_done() -> None:
    loop = asyncio.get_running_loop()
    socket = Socket()
    held = AfterCommit(socket.write, socket.drain)
    first, second = loop.create_future(), loop.create_future()
    held.hold(b"a", 1, first, None)
    held.hold(b"b", 1, None, None)  # no commit of its own: only its place behind `a`
    held.hold(b"c", 2, second, None)
    assert held.bytes == 3
    second.set_result(None)  # a later commit done first: nothing may overtake `a`
    await turn()
    assert socket.writes == [] and socket.drained == 0
    first.set_result(None)
    await turn()
    assert socket.writes == [(b"abc", 4)]  # the run in one write
    assert held.bytes == 0 and socket.drained == 1


async def test_a_failed_commit_is_waited_for_again() -> None:
    loop = asyncio.get_running_loop()
    socket = Socket()
    held = AfterCommit(socket.write, socket.drain)
    failed, retried = loop.create_future(), loop.create_future()
    asked: list[int] = []

    def commit() -> asyncio.Future[None]:
        asked.append(1)
        return retried  # the journal writes the same state with its next commit

    held.hold(b"pubrel", 1, failed, commit)
    failed.cancel()
    await turn()
    assert socket.writes == [] and asked == [1]
    retried.set_result(None)
    await turn()
    assert socket.writes == [(b"pubrel", 1)] and socket.drained == 1


async def test_a_failed_commit_with_nothing_pending_since_lets_it_go() -> None:
    loop = asyncio.get_running_loop()
    socket = Socket()
    held = AfterCommit(socket.write, socket.drain)
    failed = loop.create_future()
    held.hold(b"x", 1, failed, lambda: None)  # the retry already committed it: nothing pending
    failed.cancel()
    await turn()
    assert socket.writes == [(b"x", 1)]


async def test_what_a_closed_connection_held_is_dropped() -> None:
    loop = asyncio.get_running_loop()
    socket = Socket()
    held = AfterCommit(socket.write, socket.drain)
    commit = loop.create_future()
    held.hold(b"publish", 1, commit, None)
    held.drop()  # the connection ended first: its session's window sends it again next time
    assert held.bytes == 0
    commit.set_result(None)
    await turn()
    assert socket.writes == [] and socket.drained == 0
