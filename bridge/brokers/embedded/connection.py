"""One client connection of the embedded broker: the socket side of a client (an asyncio
protocol over the project's codec). It owns the client's `Channel` (channel.py: what its packets
mean, with no socket), feeds it, writes what it returns, does the flow control and the close.

Bytes come in through `data_received`, are decoded by a strict incremental `Decoder` (a bad
packet closes the connection before any of it is handled) and become work items in `inbox`,
which one task (`_serve`, started only while there is work, so an idle connection holds no
task) hands to the broker in arrival order; acks and pings are answered at once (Channel.handle).

One connection's share of the loop (`TURN_PACKETS`, `TURN_BYTES`): whatever it sends, a
connection has at most so many packets handled and so many bytes written in answer before the
others get their turn; the rest of what it sent waits in its decoder, unread, until the next turn.

Bounded per connection (bridge/brokers/embedded/limits.py): the decoder refuses a packet over
`max_packet_size` as soon as its fixed header is read; a full inbox stops reading from the
socket; acknowledgements waiting for their messages to be kept are bounded (acks.py); bytes
written and not yet taken by the client are bounded by `max_output_bytes`: past it delivery
pauses (the session's queue bounds apply) and so does reading from the socket, since every
packet read may be answered (PUBACK, PINGRESP, PUBREL, PUBCOMP, a WebSocket pong), until the
client has taken all but a quarter of it; outgoing QoS 1/2 by the in-flight window (inflight.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

from mypy_extensions import mypyc_attr

from bridge.brokers.embedded.aftercommit import AfterCommit, Commit
from bridge.brokers.embedded.channel import AckAgain, Channel, Host, Refusal
from bridge.brokers.embedded.client import Client, Inbound, Peer
from bridge.brokers.embedded.codec import CodecError, Connect, Decoder, Subscribe, Unsubscribe
from bridge.brokers.embedded.limits import decoder_bounds
from bridge.brokers.embedded.wire import Hangup
from bridge.brokers.eventloop import running_loop

log = logging.getLogger("bridge.brokers.embedded")


class Core(Host, Protocol):
    """What a connection asks of the broker (broker.Broker): the packets that touch sessions
    and routing go there, in the connection's arrival order."""

    output_pauses: int  # times a connection's reading paused for its unsent output

    def accept(self, conn: Client) -> bool: ...  # False: refused (broker.max_connections)

    async def connect(self, conn: Client, packet: Connect) -> None: ...

    async def publish_inbound(self, conn: Client, items: Sequence[Inbound]) -> None: ...

    async def subscribe(self, conn: Client, packet: Subscribe) -> None: ...

    async def unsubscribe(self, conn: Client, packet: Unsubscribe) -> None: ...

    async def teardown(self, conn: Client) -> None: ...


# Work items waiting for the connection's task before reading from the socket pauses.
INBOX_SIZE = 256
# PUBLISH packets in a row handed to the broker at once (broker.publish_inbound): a burst goes
# through the rules in one pass and out to each subscriber in one write; bounded so that one
# busy publisher does not hold the loop for long.
PUBLISH_RUN = 64
# One connection's budget per loop turn, whatever the packet types (docs/security.md#what-each-limit-bounds):
# packets decoded and handled, and bytes written to it (acknowledgements, PINGRESPs, SUBACKs...).
# Past either, the bytes after the packets handled wait in the decoder and the socket is not
# read until the next turn, or, if its output is over max_output_bytes, until the client has
# taken it (pause_writing): every other connection is served in between. A PINGREQ flood once
# held the loop for a whole 256 KB read (128,000 packets) per turn.
TURN_PACKETS = 256
TURN_BYTES = 64 << 10
# Seconds a connection closed with a DISCONNECT stays half-open so the client can read it.
_LINGER = 1.0
END = None  # the inbox item that ends the connection's task


# Compiled (bridge/extensions.py); listeners.CertConnection (interpreted) derives from it.
@mypyc_attr(allow_interpreted_subclasses=True)
class Connection(asyncio.Protocol):
    """The socket side of one client: reading, its turn's budget, writing, closing; the `Wire`
    of its `channel` (channel.py), which the broker sees as the client (client.Client).

    Slots, and the queues below made only while they hold something: a fleet's idle
    connection costs what it holds, not a dict and four empty deques (docs/benchmarks.md#fleet-scale)."""

    __slots__ = (
        "_pump_soon",
        "broker",
        "channel",
        "decoder",
        "held",
        "inbox",
        "last_packet",
        "lingering",
        "opened",
        "output_logged",
        "raw_pending",
        "reading_paused",
        "serving",
        "transport",
        "turn_bytes",
        "turn_packets",
        "turn_spent",
        "writing_paused",
    )

    def __init__(self, broker: Core, listener: str = "tcp") -> None:
        self.broker = broker
        self.channel = Channel(broker, self, Peer("", listener))
        limits = broker.limits
        self.transport: asyncio.Transport | None = None
        self.decoder = Decoder(limits.max_packet_size, bounds=decoder_bounds(limits))
        self.inbox: deque[Any] | None = None  # made by _queue, dropped by _serve once empty
        self.raw_pending = 0  # packets queued undecided until the session exists
        self.serving: asyncio.Task[None] | None = None
        self.opened = self.last_packet = time.monotonic()
        self.reading_paused = self.writing_paused = False  # the inbox is full / the output buffer is
        self.turn_spent = False  # this turn's budget is spent: reading waits for the next turn
        # Packets handled and bytes written since its last pause for a turn: a connection yields
        # at least once every TURN_PACKETS / TURN_BYTES, however its input was split into reads.
        self.turn_packets = self.turn_bytes = 0
        self.output_logged = False
        self._pump_soon = False
        self.lingering = False  # half-closed after a DISCONNECT, aborted after _LINGER
        self.held: AfterCommit | None = None  # writes waiting for a durable commit (aftercommit.py)

    # -- asyncio protocol --------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        channel = self.channel
        peer, address = transport.get_extra_info("peername"), ""
        if isinstance(peer, tuple):
            host, port = peer[0], peer[1]
            address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        channel.peer = Peer(address, channel.peer.listener, self.certificate_name(transport))
        transport.set_write_buffer_limits(high=self.broker.limits.max_output_bytes)
        if not self.broker.accept(channel):  # broker.max_connections: dropped, nothing said
            channel.reason = "refused"
            transport.abort()

    def certificate_name(self, transport: Any) -> str | None:
        """The client certificate's common name offered as its user name (listeners.CertConnection)."""
        return None

    def data_received(self, data: bytes) -> None:
        channel = self.channel
        if channel.reason is not None:
            if channel.reason == "normal":  # after its DISCONNECT: the acks that still come
                with contextlib.suppress(CodecError):
                    channel.late_acks(self.decoder.feed(data))
            return  # closing: nothing else that still comes is read
        self.broker.traffic.bytes_received += len(data)
        channel.bytes_in += len(data)
        if self.not_reading:  # handed more while paused (the frames of one WebSocket read): later
            self.decoder.keep(data)
            return
        self._take(data)

    def _take(self, data: bytes) -> None:
        """Decode and handle what the client sent, up to this turn's budget (TURN_PACKETS): the
        bytes past it wait in the decoder while the others are served (_spend_turn)."""
        try:
            packets = self.decoder.feed(data, TURN_PACKETS - self.turn_packets)
        except CodecError as error:
            for packet in error.packets:  # the whole packets read before the bad one
                self._on_packet(packet)
            self.channel.refuse_bad_packet(error)
            return
        if packets:
            self.broker.traffic.packets_received += len(packets)
            self.turn_packets += len(packets)
            self.last_packet = time.monotonic()
            for packet in packets:
                self._on_packet(packet)
        if self.decoder.held or self.turn_packets >= TURN_PACKETS:
            self._spend_turn()

    def _spend_turn(self) -> None:
        """This turn's budget is spent: stop reading until the next loop turn (_next_turn)."""
        if self.turn_spent or self.channel.reason is not None:
            return
        self.turn_spent = True
        self._reading()
        running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self.turn_spent = False
        self.turn_packets = self.turn_bytes = 0
        self._reading()

    def eof_received(self) -> bool:
        return False  # close the transport: MQTT has no half-closed connections

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self.channel.reason is None:
            # A reset or a failed write (ECONNRESET, EPIPE, ETIMEDOUT): asyncio logs these only
            # in debug mode, so without this line a client cut off mid-flood left no trace.
            log.info(
                "client %s: connection lost: %s%s",
                self.channel.who(),
                exc.strerror if isinstance(exc, OSError) and exc.strerror else repr(exc),
                " (while its unread output held reading paused)" if self.writing_paused else "",
            )
        self.channel.close("closed")

    def pause_writing(self) -> None:
        """The client has not taken `max_output_bytes`: stop delivering to it and stop reading
        from it (what it sends would be answered into the same buffer: PUBACKs, PINGRESPs) until
        the transport has written all but a quarter of it (resume_writing)."""
        if self.writing_paused:
            return
        self.writing_paused = True
        self.broker.output_pauses += 1
        if not self.output_logged:  # once per connection: a slow reader pauses often
            self.output_logged = True
            log.info(
                "client %s: %d bytes written and not read by the client (broker.max_output_bytes): "
                "reading from it paused until it reads",
                self.channel.who(),
                self.transport.get_write_buffer_size() if self.transport is not None else 0,
            )
        self._reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        self.last_packet = time.monotonic()  # time not spent reading does not count
        self._reading()
        self.pump()

    @property
    def busy(self) -> bool:
        return bool(self.inbox)

    @property
    def not_reading(self) -> bool:
        """Reading from the socket is paused (full inbox, output the client has not taken, or
        this turn's budget spent): time that does not count against the keepalive."""
        return self.reading_paused or self.writing_paused or self.turn_spent

    def _reading(self) -> None:
        """Read from the socket unless the inbox is full, the client does not take its output or
        this turn's budget is spent; what an earlier turn left in the decoder goes first."""
        transport = self.transport
        if transport is None or self.channel.reason is not None:
            return
        if not self.not_reading and self.decoder.held:
            self._take(b"")  # may spend the budget or fill the inbox again: then reading stays paused
            if self.channel.reason is not None:
                return
        if self.not_reading:
            transport.pause_reading()
        else:
            transport.resume_reading()

    # -- reading -----------------------------------------------------------------

    def _on_packet(self, packet: Any) -> None:
        channel = self.channel
        if channel.reason is not None or channel.refusal is not None:
            return
        if channel.state is None or self.raw_pending:
            if type(packet) is Connect:
                channel.speaks(packet.protocol_level)
            else:
                self.raw_pending += 1
            self._queue(packet)
            return
        item = channel.handle(packet)
        if item is not None:
            self._queue(item)

    def _queue(self, item: Any) -> None:
        inbox = self.inbox
        if inbox is None:
            inbox = self.inbox = deque()
        inbox.append(item)
        if len(inbox) >= INBOX_SIZE and not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self._reading()
        if self.serving is None:
            self.serving = running_loop().create_task(self._serve())

    async def _serve(self) -> None:
        """Hand the inbox to the broker, one item at a time, in arrival order."""
        broker, channel = self.broker, self.channel
        inbox = self.inbox
        try:
            while inbox:
                item = inbox.popleft()
                if self.reading_paused and len(inbox) < INBOX_SIZE // 2 and channel.reason is None:
                    self.reading_paused = False
                    self.last_packet = time.monotonic()  # time not spent reading does not count
                    self._reading()
                kind = type(item)
                if kind is Inbound:
                    run = [item]
                    while inbox and type(inbox[0]) is Inbound and len(run) < PUBLISH_RUN:
                        run.append(inbox.popleft())
                    await broker.publish_inbound(channel, run)
                elif item is END:
                    self._finish()
                    await broker.teardown(channel)
                    return
                elif kind is Connect:
                    await broker.connect(channel, item)
                elif kind is AckAgain:
                    await channel.ack_when_kept(item.held.kept, item.ack)
                elif kind is Refusal:
                    if channel.acks is not None:
                        await channel.acks.drained()
                    channel.refuse(item.why, item.code)  # END is queued now, or was when the connection ended
                    while inbox and inbox[0] is not END:
                        inbox.popleft()  # what came after it is not handled
                elif kind is Subscribe:
                    await broker.subscribe(channel, item)
                elif kind is Unsubscribe:
                    await broker.unsubscribe(channel, item)
                else:  # a packet that came before the session existed
                    self.raw_pending -= 1
                    if channel.state is not None and channel.reason is None:
                        decided = channel.handle(item)
                        if decided is not None:
                            inbox.appendleft(decided)
        finally:
            self.serving = None
            if self.inbox:  # an item queued while the task was ending
                self.serving = running_loop().create_task(self._serve())
            else:
                self.inbox = None

    # -- sending -------------------------------------------------------------------

    def write(self, data: bytes, packets: int = 1) -> None:
        if self._put(data, packets):
            self.turn_bytes += len(data)
            if self.turn_bytes > TURN_BYTES:  # answers count against the budget too
                self._spend_turn()

    def _put(self, data: bytes, packets: int) -> bool:
        """Write and count, outside the turn's budget (the pump's deliveries and what AfterCommit
        releases have their room); False when closing. Lingering, the socket is half-closed
        (write_eof): an answer due after the client's DISCONNECT has no one to go to."""
        transport = self.transport
        if transport is None or transport.is_closing() or self.lingering:
            return False
        transport.write(data)
        traffic = self.broker.traffic
        traffic.packets_sent += packets
        traffic.bytes_sent += len(data)
        self.channel.bytes_out += len(data)
        return True

    def write_ordered(self, data: bytes, packets: int, commit: Commit | None) -> None:
        held = self.held
        waits = commit() if commit is not None else None
        if held is None:
            if waits is None:
                self.write(data, packets)
                return
            held = self.held = AfterCommit(self._put, self._drained)
        held.hold(data, packets, waits, commit)

    def _drained(self) -> None:
        """Nothing waits for a commit any more: the room it took is free for the queue."""
        self.held = None
        self.pump()

    def pump(self) -> None:
        """Send queued messages soon (batched: one write per loop step)."""
        if not self._pump_soon and self.channel.connacked:
            self._pump_soon = True
            running_loop().call_soon(self._pump)

    def pump_now(self, first: bytes) -> None:
        """Write `first` (a CONNACK) now, and the queue's first turn in the same write when it
        may go at once (nothing of it waits for a commit)."""
        self._pump(first)

    def _pump(self, first: bytes = b"") -> None:
        self._pump_soon = False
        channel, transport = self.channel, self.transport
        state = channel.state
        if (
            state is None
            or transport is None
            or channel.reason is not None
            or state.conn is not channel
            or self.writing_paused  # resume_writing pumps again
        ):
            if first:
                self.write(first)
            return
        # Not paused means the transport holds at most max_output_bytes (it pauses past it), so
        # room >= 0 and at least one message goes out each turn: the pump always moves.
        held = self.held
        room = self.broker.limits.max_output_bytes - transport.get_write_buffer_size() - (held.bytes if held else 0)
        out, payload_bytes, commit = channel.deliveries(room)
        if first and (not out or commit is not None or held is not None):
            self.write(first)  # alone, ahead of deliveries that wait for a commit
            first = b""
        if out:
            data = b"".join(out)
            traffic = self.broker.traffic
            traffic.publish_sent += len(out)
            traffic.publish_bytes_sent += payload_bytes
            channel.publish_out += len(out)
            room -= len(data)
            if commit is None and held is None:
                self.turn_bytes += len(first)
                self._put(first + data, len(out) + (1 if first else 0))
            else:
                self.write_ordered(data, len(out), commit)
        if room < 0 and out and state.outbox and not self.writing_paused:
            # This turn's room is used up but the transport took the bytes without pausing (the
            # kernel's socket buffer had space), so no resume_writing will come to restart the
            # pump: it goes on in the next loop step, after the other connections had theirs.
            # (The other stops have their own restart: an ack for the window, resume_writing.)
            self.pump()

    # -- closing -------------------------------------------------------------------

    def hang_up(self, how: Hangup) -> None:
        """The channel closed: end the socket as it says, then the broker's teardown (END)."""
        if self.held is not None:
            self.held.drop()
            self.held = None
        transport = self.transport
        if transport is not None and not transport.is_closing():
            if how is Hangup.LINGER:
                self._linger(transport)
            elif how is Hangup.FLUSH:
                transport.close()
            else:
                transport.abort()
        self._queue(END)

    def abandon(self) -> None:
        if self.serving is not None:
            self.serving.cancel()

    def _linger(self, transport: Any) -> None:
        """Closing with unread input would reset the connection, and a reset can discard the
        DISCONNECT before the client reads it: half-close, drain what still comes (ignored) for
        a moment, then close."""
        # TLS has no half-close: there the DISCONNECT just has the moment to reach the client.
        if transport.can_write_eof():
            try:
                transport.write_eof()
            except OSError:  # the peer is already gone (ENOTCONN): nothing to linger for
                transport.abort()
                return
        self.lingering = True
        if self.not_reading:
            transport.resume_reading()
        running_loop().call_later(_LINGER, transport.abort)

    def _finish(self) -> None:
        """Before the broker's teardown: the socket closed, unless it lingers for a DISCONNECT."""
        transport = self.transport
        if transport is not None and not transport.is_closing() and not self.lingering:
            transport.close()
