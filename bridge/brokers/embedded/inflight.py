"""A session's in-flight window: the QoS 1/2 messages sent to its client and not yet
acknowledged, by packet id, in the order they were sent.

Only this type changes the window: the connection sends (`send`), the acknowledgements remove
(`remove`), a durable session restored from the store puts back what it had (`restore`), the
operator purges an offline session's (`clear`). Everything else reads it (the window's size
against the client's Receive Maximum, the resend after a reconnect [MQTT-4.4.0-1], the API's
listing, the durable store's progress row).
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, ValuesView
from typing import Generic, Protocol, TypeVar

from mypy_extensions import mypyc_attr

from bridge.errors import HookbridgeError

# MQTT packet ids are 1..65535 [MQTT-2.3.1-1].
_LAST_PACKET_ID = 65535
# The window of every session with nothing in flight: most of a fleet's (an empty dict is 64
# bytes, docs/benchmarks.md#memory-per-idle-connection). Only read or emptied, never added to:
# `send` and `restore` give a window a dict of its own first.
_NOTHING_IN_FLIGHT: dict[int, object] = {}


class Sent(Protocol):
    """A message that goes out under a packet id (sessions.Outgoing)."""

    packet_id: int


Message = TypeVar("Message", bound=Sent)


# An ordinary Python class in the compiled build too: mypyc compiles no class with an interpreted
# base (HookbridgeError, RuntimeError).
@mypyc_attr(native_class=False)
class NoFreePacketId(HookbridgeError, RuntimeError):
    """Every packet id is held by a message in flight (the window cannot be that large unless
    broker.max_inflight allowed it)."""


class InflightWindow(Generic[Message]):
    """Messages in flight to one client, keyed by packet id; iteration order is send order."""

    __slots__ = ("_last_id", "_messages")

    def __init__(self) -> None:
        self._messages: dict[int, Message] = _NOTHING_IN_FLIGHT  # type: ignore[assignment]
        self._last_id = 0  # the packet id given last: the next one goes on from it

    def __len__(self) -> int:
        return len(self._messages)

    def __contains__(self, packet_id: object) -> bool:
        return packet_id in self._messages

    def __iter__(self) -> Iterator[int]:
        return iter(self._messages)

    def get(self, packet_id: int) -> Message | None:
        return self._messages.get(packet_id)

    def values(self) -> ValuesView[Message]:
        return self._messages.values()

    def items(self) -> ItemsView[int, Message]:
        return self._messages.items()

    def has_room(self, window: int) -> bool:
        """Whether one more message may go out under a window of `window` messages."""
        return len(self._messages) < window

    def send(self, message: Message) -> int:
        """Give `message` a packet id no message in flight holds and hold it until acknowledged."""
        packet_id = self._free_id()
        message.packet_id = packet_id
        self._own()[packet_id] = message
        return packet_id

    def restore(self, message: Message) -> None:
        """Put back a message that was in flight under its own packet id (a durable session)."""
        self._own()[message.packet_id] = message

    def _own(self) -> dict[int, Message]:
        """The window's own dict, to add to (made at its first message)."""
        if self._messages is _NOTHING_IN_FLIGHT:
            self._messages = {}
        return self._messages

    def remove(self, packet_id: int) -> Message | None:
        """The message under `packet_id` leaves the window (acknowledged, or never sent)."""
        return self._messages.pop(packet_id, None)

    def clear(self) -> None:
        self._messages.clear()

    def _free_id(self) -> int:
        messages = self._messages
        for _ in range(_LAST_PACKET_ID):
            self._last_id = self._last_id % _LAST_PACKET_ID + 1
            if self._last_id not in messages:
                return self._last_id
        raise NoFreePacketId("every packet id is in flight")
