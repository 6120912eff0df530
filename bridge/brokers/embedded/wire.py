"""`Wire`: what a client's protocol (channel.Channel) asks of its socket side
(connection.Connection; a recorder in tests/unit/test_channel.py), and `Hangup`, how it says the
connection ends. The channel holds no socket: its bytes go out, and its end is carried out,
through these few members alone.
"""

from __future__ import annotations

from enum import Enum
from typing import Protocol

from bridge.brokers.embedded.aftercommit import Commit


class Hangup(Enum):
    """How the socket side ends a connection the channel closed (Wire.hang_up)."""

    LINGER = "linger"  # half-close, read (and drop) what still comes for a moment: the DISCONNECT is read
    FLUSH = "flush"  # close once what is buffered is written (the PUBACK before a DISCONNECT)
    ABORT = "abort"  # drop it now


class Wire(Protocol):
    """What a channel asks of its socket side (connection.Connection; a test gives a recorder):
    bytes out, the end of the connection, and the socket's facts its deadlines are counted from."""

    @property
    def opened(self) -> float: ...  # monotonic time the socket was accepted
    @property
    def last_packet(self) -> float: ...  # monotonic time of its last complete packet
    @property
    def not_reading(self) -> bool: ...  # reading is paused: time that does not count
    @property
    def busy(self) -> bool: ...  # packets read and not yet handed to the broker (a CONNECT being decided)

    def write(self, data: bytes, packets: int = 1) -> None: ...
    # A packet of the session's outgoing stream (PUBLISH, PUBREL; a PUBCOMP of a durable
    # session): after what was written so, and once `commit` (None: nothing to wait for) is
    # done (aftercommit.py: what a durable session's client may see only once it is stored).
    def write_ordered(self, data: bytes, packets: int, commit: Commit | None) -> None: ...
    def pump(self) -> None: ...  # deliver the session's queue soon, as far as the socket takes it (deliveries)
    def pump_now(self, first: bytes) -> None: ...  # write `first` (a CONNACK) with the queue's first turn, now
    def hang_up(self, how: Hangup) -> None: ...  # the channel closed: end the socket, then the broker's teardown
    def abandon(self) -> None: ...  # its teardown did not end within the stop's grace: cancel its task
