"""The plain-TCP listener's own transport: every connection's socket in one epoll.

Why not the event loop's transport: uvloop's costs about 1,200 bytes per connection (its
`TCPTransport`, libuv's handle, a weak reference), half of what an idle connection of a fleet
costs (docs/benchmarks.md#memory-per-idle-connection). Here a connection's transport is a small
slotted object over its file descriptor, kept in the poller's table; the loop watches one epoll
file descriptor for all of them (`add_reader`), and the sockets it reports ready are read and
written here. TLS and WebSocket listeners keep the loop's transports (TLS is asyncio's); so does
a system without epoll.

It keeps asyncio's transport contract as the broker's `Connection` uses it: `connection_made`
first and `connection_lost` once, last, from the loop (never inside a call of the protocol's
own); a read of at most `READ_SIZE` bytes per socket and ready report, so that every ready
connection gets its turn; what the socket does not take at once is buffered, with
`pause_writing` past the high-water mark and `resume_writing` at the low one (a quarter of it, as
asyncio's); `close` ends after the buffer is written, `abort` at once; `write_eof` half-closes
after it; an end of file from the client is `eof_received`, then a close.

Level-triggered: a socket whose reading is paused and whose peer is gone (an error or a hang-up,
which epoll reports whatever was asked for) is taken out of the epoll until reading resumes, so
that a paused connection cannot make the loop spin.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import select
import socket
from collections.abc import Callable
from typing import Any

from bridge.brokers.eventloop import running_loop

log = logging.getLogger("bridge.brokers.embedded")

# Bytes read from one socket per ready report (uvloop reads up to 256 KiB; a connection's turn
# is bounded by what it decodes anyway, connection.TURN_PACKETS / TURN_BYTES).
READ_SIZE = 64 << 10
# Ready sockets taken from the epoll per loop step; more stay ready for the next step.
EVENTS_PER_STEP = 512
# Seconds accepting stops when the process is out of file descriptors (as asyncio does).
_OUT_OF_FILES_PAUSE = 1.0
_OUT_OF_FILES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)

_READ = select.EPOLLIN if hasattr(select, "EPOLLIN") else 1
_WRITE = select.EPOLLOUT if hasattr(select, "EPOLLOUT") else 4
_GONE = (select.EPOLLERR | select.EPOLLHUP) if hasattr(select, "EPOLLERR") else 24

_DEFAULT_HIGH = 64 << 10


def available() -> bool:
    """The transport needs epoll (Linux)."""
    return hasattr(select, "epoll")


class Poller:
    """One epoll for the sockets of one listener's connections, watched by the loop. Its table
    is a list indexed by file descriptor (they are small and dense): 8 bytes a connection."""

    __slots__ = ("_count", "_epoll", "_listening", "_loop", "_transports", "accepted")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._epoll = select.epoll()
        self._transports: list[SocketTransport | None] = []
        self._count = 0
        self._listening = True
        # The socket being adopted and its peer's address as accept() gave it: what
        # connection_made asks for, without a socket object and a system call per connection.
        self.accepted: tuple[int, Any] | None = None
        loop.add_reader(self._epoll.fileno(), self._ready)

    def adopt(self, fd: int, address: Any, protocol: asyncio.Protocol) -> None:
        """Serve an accepted socket: non-blocking; no Nagle delay (as asyncio's transports), which
        Linux's accept() copies from the listening socket (`serve` sets it there)."""
        os.set_blocking(fd, False)
        self._epoll.register(fd, _READ)
        transport = SocketTransport(self, fd, protocol)
        transports = self._transports
        if fd >= len(transports):
            transports.extend([None] * (max(fd + 1, 2 * len(transports)) - len(transports)))
        transports[fd] = transport
        self._count += 1
        self.accepted = (fd, address)
        try:
            protocol.connection_made(transport)  # type: ignore[arg-type]
        except Exception:
            log.exception("connection_made failed; connection closed")
            transport.abort()
        finally:
            self.accepted = None

    def watch(self, fd: int, mask: int) -> None:
        self._epoll.modify(fd, mask)

    def rewatch(self, fd: int, mask: int) -> None:
        self._epoll.register(fd, mask)

    def unwatch(self, fd: int) -> None:
        self._epoll.unregister(fd)

    def forget(self, fd: int, watched: bool) -> None:
        """The socket is about to be closed: out of the epoll and the table."""
        if watched:
            self._epoll.unregister(fd)
        self._transports[fd] = None
        self._count -= 1
        if not self._listening and not self._count:
            self._close()

    def stop_listening(self) -> None:
        """The listener closed: the epoll goes once its last connection has."""
        self._listening = False
        if not self._count:
            self._close()

    def _close(self) -> None:
        if self._epoll.closed:
            return
        self._loop.remove_reader(self._epoll.fileno())
        self._epoll.close()

    def _ready(self) -> None:
        try:
            events = self._epoll.poll(0, EVENTS_PER_STEP)
        except InterruptedError:
            return
        transports = self._transports
        for fd, mask in events:
            transport = transports[fd]
            if transport is None:  # closed earlier in this step
                continue
            try:
                transport.ready(mask)
            except Exception:  # a protocol's callback failed: that connection ends, not the others
                log.exception("client connection failed; closed")
                transport.abort()


# A transport's state in one small integer (CPython shares those: no object per connection):
# what the epoll is asked to report (_READ, _WRITE) and these.
_PAUSED = 2  # pause_writing was called, resume_writing not yet
_UNWATCHED = 32  # out of the epoll (paused, and the peer is gone)
_CLOSING = 64  # close() or abort(): the socket closes once its output is written
_EOF = 128  # write_eof(): the socket half-closes once its output is written
_ASKED = _READ | _WRITE

# (high, low) write buffer limits, one tuple per distinct pair rather than two integers per
# connection (a fleet's connections share their limits).
_LIMITS: dict[tuple[int, int], tuple[int, int]] = {}


def _limits(high: int, low: int) -> tuple[int, int]:
    pair = (high, low)
    return _LIMITS.setdefault(pair, pair)


class SocketTransport:
    """One connection's socket (asyncio.Transport's methods that the broker uses)."""

    __slots__ = ("_fd", "_flags", "_limits", "_out", "_poller", "_protocol")

    def __init__(self, poller: Poller, fd: int, protocol: asyncio.Protocol) -> None:
        self._poller = poller
        self._fd = fd  # -1 once closed
        self._protocol: asyncio.Protocol | None = protocol
        self._flags = _READ
        self._out: bytearray | None = None  # written and not taken by the socket yet
        self._limits = _limits(_DEFAULT_HIGH, _DEFAULT_HIGH // 4)

    # -- what the epoll reports ----------------------------------------------------------

    def ready(self, mask: int) -> None:
        if mask & (_READ | _GONE) and self._flags & _READ:
            self._read()
        if self._fd >= 0 and mask & (_WRITE | _GONE) and self._flags & _WRITE:
            self._write_out()
        if self._fd >= 0 and mask & _GONE and not self._flags & _ASKED:
            # Reported whatever was asked: out of the epoll until reading resumes, which then
            # reads the end (or the error) and closes.
            self._flags |= _UNWATCHED
            self._poller.unwatch(self._fd)

    def _read(self) -> None:
        try:
            data = os.read(self._fd, READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._shut(exc)
            return
        protocol = self._protocol
        if protocol is None:
            return
        if data:
            protocol.data_received(data)
            return
        self._ask(self._flags & ~_READ)
        if not protocol.eof_received():
            self.close()

    def _write_out(self) -> None:
        out = self._out
        if out is None:
            self._ask(self._flags & ~_WRITE)
            return
        try:
            sent = os.write(self._fd, out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._shut(exc)
            return
        del out[:sent]
        if out:
            if self._flags & _PAUSED and len(out) <= self._limits[1]:
                self._resume_writing()
            return
        self._out = None
        self._ask(self._flags & ~_WRITE)
        if self._flags & _PAUSED:
            self._resume_writing()  # the protocol may write again in it: then this is not the end
        # Asked through a method: after `self._out = None` above mypy takes the attribute for None,
        # and the compiled build turned `self._out is not None` into a failing cast.
        if self.get_write_buffer_size():
            return
        if self._flags & _CLOSING:
            self._shut(None)
        elif self._flags & _EOF:
            try:
                self._shutdown_write()
            except OSError as exc:
                self._shut(exc)

    def _resume_writing(self) -> None:
        self._flags &= ~_PAUSED
        if self._protocol is not None:
            self._protocol.resume_writing()

    def _ask(self, asked: int) -> None:
        """Have the epoll report `asked` (of _READ, _WRITE) for this socket."""
        flags = self._flags
        if asked & _ASKED == flags & _ASKED or self._fd < 0:
            return
        asked &= _ASKED
        if not flags & _UNWATCHED:
            self._poller.watch(self._fd, asked)
        elif asked:
            flags &= ~_UNWATCHED
            self._poller.rewatch(self._fd, asked)
        self._flags = (flags & ~_ASKED) | asked

    # -- asyncio.Transport --------------------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if self._fd < 0:
            return default
        if name == "peername":
            accepted = self._poller.accepted
            if accepted is not None and accepted[0] == self._fd:
                return accepted[1]
        view = SocketView(self._fd)
        try:
            if name == "peername":
                return view.getpeername()
            if name == "sockname":
                return view.getsockname()
        except OSError:
            return default
        return view if name == "socket" else default

    def get_protocol(self) -> asyncio.BaseProtocol | None:
        return self._protocol

    def is_closing(self) -> bool:
        return bool(self._flags & _CLOSING)

    def is_reading(self) -> bool:
        return bool(self._flags & _READ)

    def pause_reading(self) -> None:
        self._ask(self._flags & ~_READ)

    def resume_reading(self) -> None:
        if not self._flags & _CLOSING:
            self._ask(self._flags | _READ)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is None:
            high = _DEFAULT_HIGH if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._limits = _limits(high, low)
        self._check_high()

    def get_write_buffer_size(self) -> int:
        out = self._out
        return len(out) if out is not None else 0

    def get_write_buffer_limits(self) -> tuple[int, int]:
        high, low = self._limits
        return low, high

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._flags & (_CLOSING | _EOF) or not data:
            return
        out = self._out
        if out is not None:
            out += data
            self._check_high()
            return
        try:
            sent = os.write(self._fd, data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._shut(exc)
            return
        if sent == len(data):
            return
        self._out = bytearray(memoryview(data)[sent:])
        self._ask(self._flags | _WRITE)
        self._check_high()

    def writelines(self, chunks: Any) -> None:
        self.write(b"".join(chunks))

    def _check_high(self) -> None:
        flags = self._flags
        if not flags & _PAUSED and self.get_write_buffer_size() > self._limits[0] and self._protocol is not None:
            self._flags = flags | _PAUSED
            self._protocol.pause_writing()

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        if self._flags & (_CLOSING | _EOF):
            return
        self._flags |= _EOF
        if self._out is None:
            self._shutdown_write()

    def _shutdown_write(self) -> None:
        SocketView(self._fd).shutdown(socket.SHUT_WR)

    def close(self) -> None:
        if self._flags & _CLOSING:
            return
        self._ask(self._flags & ~_READ)
        self._flags |= _CLOSING
        if self._out is None:
            self._shut(None)

    def abort(self) -> None:
        self._shut(None)

    def _shut(self, exc: Exception | None) -> None:
        """Close the socket now; the protocol hears of it from the loop (connection_lost)."""
        fd = self._fd
        if fd < 0:
            return
        self._fd = -1
        self._out = None
        self._poller.forget(fd, not self._flags & _UNWATCHED)
        self._flags = _CLOSING
        os.close(fd)
        running_loop().call_soon(self._lost, exc)

    def _lost(self, exc: Exception | None) -> None:
        protocol, self._protocol = self._protocol, None
        if protocol is not None:
            protocol.connection_lost(exc)


class SocketView:
    """A connection's socket as `get_extra_info("socket")` gives it: its options and addresses,
    but not its close or its data, which are the transport's (as asyncio's TransportSocket). No
    socket object is kept per connection: each call wraps the descriptor for its length."""

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def _call(self, name: str, *args: Any) -> Any:
        sock = socket.socket(fileno=self._fd)  # asks the descriptor its family and type
        try:
            return getattr(sock, name)(*args)
        finally:
            sock.detach()

    def getpeername(self) -> Any:
        return self._call("getpeername")

    def getsockname(self) -> Any:
        return self._call("getsockname")

    def getsockopt(self, *args: Any) -> Any:
        return self._call("getsockopt", *args)

    def setsockopt(self, *args: Any) -> None:
        self._call("setsockopt", *args)

    def shutdown(self, how: int) -> None:
        self._call("shutdown", how)


class Server:
    """Listening sockets whose connections get `SocketTransport`s, one poller for all of them
    (asyncio.Server's methods that the broker uses: `sockets`, `close`, `wait_closed`)."""

    def __init__(self, sockets: list[socket.socket], factory: Callable[[], asyncio.Protocol], backlog: int) -> None:
        self._loop = running_loop()
        self._backlog = backlog
        self._factory = factory
        self._poller = Poller(self._loop)
        self.sockets: tuple[socket.socket, ...] = tuple(sockets)
        self._serving = True
        for sock in sockets:
            self._listen(sock)

    def _listen(self, sock: socket.socket) -> None:
        self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(self._backlog):  # as asyncio: up to a whole backlog per loop step
            try:
                fd, address = sock._accept()  # type: ignore[attr-defined]  # a descriptor, no socket object
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_FILES:
                    # As asyncio: stop accepting for a moment rather than spin on the backlog.
                    log.error("accepting a connection failed: %s; accepting again in %.0f s", exc, _OUT_OF_FILES_PAUSE)
                    self._loop.remove_reader(sock.fileno())
                    self._loop.call_later(_OUT_OF_FILES_PAUSE, self._accept_again, sock)
                    return
                continue  # ECONNABORTED and the like: that client is gone
            try:
                self._poller.adopt(fd, address, self._factory())
            except OSError as exc:  # the socket failed between accept and setup
                log.info("an accepted connection failed at once: %s", exc)
                os.close(fd)
            except Exception:
                log.exception("serving an accepted connection failed; closed")
                os.close(fd)

    def _accept_again(self, sock: socket.socket) -> None:
        if self._serving:
            self._listen(sock)

    def close(self) -> None:
        if not self._serving:
            return
        self._serving = False
        for sock in self.sockets:
            self._loop.remove_reader(sock.fileno())
            sock.close()
        self._poller.stop_listening()

    def is_serving(self) -> bool:
        return self._serving

    async def wait_closed(self) -> None:
        return None


async def serve(factory: Callable[[], asyncio.Protocol], host: str | None, port: int, backlog: int) -> Server:
    """Bind as `loop.create_server` does: every address `host` resolves to (all interfaces when
    None), address reuse on, IPv6 sockets IPv6 only."""
    loop = running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # its connections inherit it
            try:
                sock.bind(address)
            except OSError as exc:
                why = f"error while attempting to bind on address {address!r}: {exc.strerror}"
                raise OSError(exc.errno, why) from None
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    if not sockets:
        raise OSError(f"{host!r} resolves to no address")
    return Server(sockets, factory, backlog)
