"""The embedded broker's own plain-TCP transport (bridge/brokers/embedded/tcp.py), on real
loopback sockets, under asyncio's loop and uvloop's: the asyncio transport contract the broker's
connections rely on (order of callbacks, buffering and flow control, close, abort, half-close),
what a peer that resets or a process out of file descriptors does to it, and that a closed
listener leaves no descriptor behind."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from bridge.brokers.embedded import tcp

pytestmark = pytest.mark.skipif(not tcp.available(), reason="the broker's own transport needs epoll (Linux)")

LOOPS = ["asyncio", "uvloop"]


def run(kind: str, test: Callable[[], Awaitable[None]]) -> None:
    if kind == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    else:
        factory = asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(asyncio.wait_for(test(), 60))


class Recorder(asyncio.Protocol):
    """Every callback in order; what was received."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.received = bytearray()
        self.transport: Any = None
        self.lost: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()
        self.got: asyncio.Event = asyncio.Event()
        self.peername: Any = None

    def connection_made(self, transport: Any) -> None:
        self.events.append("made")
        self.transport = transport
        self.peername = transport.get_extra_info("peername")  # as accept() gave it (tcp.Poller.accepted)

    def data_received(self, data: bytes) -> None:
        self.events.append("data")
        self.received += data
        self.got.set()

    def eof_received(self) -> bool:
        self.events.append("eof")
        return False

    def pause_writing(self) -> None:
        self.events.append("pause")

    def resume_writing(self) -> None:
        self.events.append("resume")

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append(("lost", type(exc).__name__ if exc is not None else None))
        self.lost.set_result(exc)

    async def wait_for(self, size: int) -> None:
        while len(self.received) < size:
            self.got.clear()
            await self.got.wait()


class Listening:
    """A tcp.Server on a free loopback port and the protocols it made."""

    def __init__(self, server: tcp.Server, made: list[Recorder], arrived: asyncio.Event) -> None:
        self.server = server
        self.made = made
        self.arrived = arrived

    @property
    def port(self) -> int:
        return int(self.server.sockets[0].getsockname()[1])

    async def accepted(self, count: int = 1) -> Recorder:
        while len(self.made) < count:
            self.arrived.clear()
            await self.arrived.wait()
        return self.made[count - 1]


async def listen(protocol: type[Recorder] = Recorder) -> Listening:
    made: list[Recorder] = []
    arrived = asyncio.Event()

    def factory() -> Recorder:
        made.append(protocol())
        arrived.set()
        return made[-1]

    server = await tcp.serve(factory, "127.0.0.1", 0, backlog=100)
    return Listening(server, made, arrived)


async def client(port: int, receive_buffer: int | None = None) -> socket.socket:
    sock = socket.socket()
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return sock


async def read_all(sock: socket.socket) -> bytes:
    """What the client reads until the server's end of file (or a reset)."""
    loop, got = asyncio.get_running_loop(), bytearray()
    while True:
        try:
            chunk = await loop.sock_recv(sock, 1 << 16)
        except ConnectionResetError:
            return bytes(got)
        if not chunk:
            return bytes(got)
        got += chunk


def pattern(size: int) -> bytes:
    return bytes(i % 251 for i in range(size))


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("kind", LOOPS)
def test_bytes_arrive_in_order_and_the_clients_close_is_an_end_of_file(kind: str) -> None:
    async def test() -> None:
        listening = await listen()
        sock = await client(listening.port)
        server_side = await listening.accepted()
        sent = pattern(300_000)
        await asyncio.get_running_loop().sock_sendall(sock, sent)
        await server_side.wait_for(len(sent))
        sock.close()
        assert await server_side.lost is None
        assert bytes(server_side.received) == sent
        assert server_side.events[0] == "made"
        assert server_side.events[-2:] == ["eof", ("lost", None)]
        assert server_side.events.count(("lost", None)) == 1
        peer = server_side.transport.get_extra_info("peername")
        assert peer is None  # asked after the close: the default, not an error
        listening.server.close()

    run(kind, test)


@pytest.mark.parametrize("kind", LOOPS)
def test_the_peer_and_local_addresses_and_socket_options(kind: str) -> None:
    async def test() -> None:
        listening = await listen()
        sock = await client(listening.port)
        accepted = await listening.accepted()
        transport = accepted.transport
        assert accepted.peername == transport.get_extra_info("peername") == sock.getsockname()
        assert transport.get_extra_info("sockname") == sock.getpeername()
        view = transport.get_extra_info("socket")
        assert view.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1  # as asyncio's transports
        view.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
        assert view.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) >= 8192
        assert transport.get_extra_info("cipher", "none") == "none"
        transport.close()
        assert await read_all(sock) == b""
        sock.close()
        listening.server.close()

    run(kind, test)


@pytest.mark.parametrize("kind", LOOPS)
def test_output_the_client_does_not_read_is_kept_paused_and_resumed(kind: str) -> None:
    async def test() -> None:
        listening = await listen()
        sock = await client(listening.port, receive_buffer=4096)
        server_side = await listening.accepted()
        transport = server_side.transport
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        transport.set_write_buffer_limits(high=64 << 10)
        assert transport.get_write_buffer_limits() == (16 << 10, 64 << 10)
        sent = pattern(1 << 20)
        for start in range(0, len(sent), 10_000):
            transport.write(sent[start : start + 10_000])
        assert transport.get_write_buffer_size() > 64 << 10  # the socket took little of it
        assert server_side.events.count("pause") == 1
        loop, got = asyncio.get_running_loop(), bytearray()
        while len(got) < len(sent):
            got += await loop.sock_recv(sock, 1 << 16)
        assert bytes(got) == sent
        assert server_side.events.count("resume") == 1
        assert server_side.events.index("pause") < server_side.events.index("resume")
        assert transport.get_write_buffer_size() == 0
        transport.close()
        sock.close()
        await server_side.lost
        listening.server.close()

    run(kind, test)


@pytest.mark.parametrize("kind", LOOPS)
def test_close_writes_what_is_kept_first_and_abort_does_not(kind: str) -> None:
    async def test() -> None:
        listening = await listen()
        closing = await client(listening.port, receive_buffer=4096)
        aborting = await client(listening.port, receive_buffer=4096)
        first, second = await listening.accepted(1), await listening.accepted(2)
        sent = pattern(1 << 20)
        for side in (first, second):
            side.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            side.transport.write(sent)
            assert side.transport.get_write_buffer_size() > 0
        first.transport.close()
        second.transport.abort()
        assert first.transport.is_closing() and second.transport.is_closing()
        first.transport.write(b"after the close")  # ignored, as asyncio's
        assert await second.lost is None  # at once, the output dropped
        assert not first.lost.done()  # not before its output is written
        assert await read_all(closing) == sent
        assert await first.lost is None
        assert len(await read_all(aborting)) < len(sent)
        for side in (first, second):
            assert side.events.count(("lost", None)) == 1
        closing.close()
        aborting.close()
        listening.server.close()

    run(kind, test)


@pytest.mark.parametrize("kind", LOOPS)
def test_write_eof_half_closes_after_the_output_and_reading_goes_on(kind: str) -> None:
    async def test() -> None:
        listening = await listen()
        sock = await client(listening.port)
        server_side = await listening.accepted()
        transport = server_side.transport
        assert transport.can_write_eof()
        transport.write(b"goodbye")
        transport.write_eof()
        transport.write(b"not sent")  # after the half-close: nothing
        assert await read_all(sock) == b"goodbye"
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(sock, b"late acks")
        await server_side.wait_for(len(b"late acks"))
        sock.close()
        assert await server_side.lost is None
        assert bytes(server_side.received) == b"late acks"
        listening.server.close()

    run(kind, test)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_paused_connection_whose_client_resets_does_not_spin_and_ends_on_resume(kind: str) -> None:
    async def test() -> None:
        listening = await listen()
        sock = await client(listening.port)
        server_side = await listening.accepted()
        transport = server_side.transport
        transport.pause_reading()
        assert not transport.is_reading()
        sock.sendall(b"unread")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # a reset: epoll reports it whatever was asked for
        # A level-triggered report nobody takes would run the loop flat out: the loop stays idle.
        started = time.process_time()
        await asyncio.sleep(0.5)
        assert time.process_time() - started < 0.25
        assert not server_side.lost.done()
        transport.resume_reading()
        exc = await server_side.lost
        assert exc is None or isinstance(exc, ConnectionResetError)
        listening.server.close()

    run(kind, test)


class Failing(Recorder):
    def data_received(self, data: bytes) -> None:
        if data.startswith(b"fail"):
            raise RuntimeError("this protocol failed")
        super().data_received(data)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_protocol_that_fails_closes_its_own_connection_only(kind: str, caplog: pytest.LogCaptureFixture) -> None:
    async def test() -> None:
        listening = await listen(Failing)
        bad, good = await client(listening.port), await client(listening.port)
        bad_side, good_side = await listening.accepted(1), await listening.accepted(2)
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(bad, b"fail now")
        assert await bad_side.lost is None
        await loop.sock_sendall(good, b"still here")
        await good_side.wait_for(len(b"still here"))
        assert not good_side.lost.done()
        for sock in (bad, good):
            sock.close()
        await good_side.lost
        listening.server.close()

    with caplog.at_level(logging.ERROR, logger="bridge.brokers.embedded"):
        run(kind, test)
    assert "client connection failed; closed" in caplog.text
    assert "this protocol failed" in caplog.text


@pytest.mark.parametrize("kind", LOOPS)
def test_a_closed_listener_refuses_new_clients_serves_its_own_and_leaves_no_descriptor(kind: str) -> None:
    async def test() -> None:
        before = open_descriptors()
        listening = await listen()
        sock = await client(listening.port)
        server_side = await listening.accepted()
        port = listening.port
        listening.server.close()
        assert not listening.server.is_serving()
        await listening.server.wait_closed()
        with pytest.raises(ConnectionRefusedError):
            await client(port)
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(sock, b"after the listener")
        await server_side.wait_for(len(b"after the listener"))
        sock.close()
        await server_side.lost
        await asyncio.sleep(0)
        assert open_descriptors() == before  # the listening socket, the accepted one, the epoll

    run(kind, test)


@contextlib.contextmanager
def no_free_descriptor() -> Iterator[None]:
    """The soft open-file limit at the lowest free descriptor: the next accept fails (EMFILE)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest = os.dup(0)
    os.close(lowest)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize("kind", LOOPS)
def test_out_of_descriptors_accepting_pauses_and_no_waiting_client_is_lost(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def test() -> None:
        listening = await listen()
        loop = asyncio.get_running_loop()
        waiting = [socket.socket() for _ in range(3)]  # made before the limit: the clients have theirs
        for sock in waiting:
            sock.setblocking(False)
        with no_free_descriptor():
            for sock in waiting:
                await loop.sock_connect(sock, ("127.0.0.1", listening.port))  # the kernel's backlog takes it
            await asyncio.sleep(0.3)
            assert listening.made == []  # accept failed: nothing made, nothing closed
        for index, sock in enumerate(waiting, start=1):
            server_side = await listening.accepted(index)  # after the pause, accepting resumes
            await loop.sock_sendall(sock, b"hello")
            await server_side.wait_for(5)
            sock.close()
            await server_side.lost
        listening.server.close()

    with caplog.at_level(logging.ERROR, logger="bridge.brokers.embedded"):
        run(kind, test)
    assert "accepting a connection failed" in caplog.text


LAST_WORDS = pattern(1 << 19)  # more than the socket takes at once: buffered


class WritesOnResume(Recorder):
    """Writes its last words and closes from resume_writing, as a protocol may."""

    def resume_writing(self) -> None:
        super().resume_writing()
        self.transport.write(LAST_WORDS)
        self.transport.close()


@pytest.mark.parametrize("kind", LOOPS)
def test_output_written_from_resume_writing_goes_out_before_the_close(kind: str) -> None:
    async def test() -> None:
        listening = await listen(WritesOnResume)
        sock = await client(listening.port, receive_buffer=4096)
        server_side = await listening.accepted()
        transport = server_side.transport
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        transport.set_write_buffer_limits(high=64 << 10, low=0)  # resumed once all is written
        sent = pattern(1 << 20)
        transport.write(sent)
        assert server_side.events.count("pause") == 1
        assert await read_all(sock) == sent + LAST_WORDS
        assert await server_side.lost is None
        sock.close()
        listening.server.close()

    run(kind, test)
