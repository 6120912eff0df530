"""The broker-source interface: events in, effects out.

A broker source (the embedded broker, EMQX, a generic MQTT broker) produces
`bridge.events` events and hands each one to the dispatcher's sink. Where the
broker allows it, it also carries out the two effects the fetch / lookup
functions need: subscribe a client on its behalf, and deliver stored messages
to exactly one session.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.errors import HookbridgeError
from bridge.events import Event

# The dispatcher. Awaiting it is the back-pressure point: a source must not
# produce the next event of a client before the previous call returned.
# For a source with `acks_after_commit`, the call returns a future that is done
# once every rule for the event has committed (or failed for good); None means
# there was nothing to wait for (no rule matched, or a sink that does not track).
EventSink = Callable[[Event], Awaitable["asyncio.Future[None] | None"]]

# The same, with a callback instead of a future (the dispatcher's `dispatch`): `on_committed` is
# called once every rule for the event is done; False means no rule matched and it never will be.
# A source that tracks every message (the external modes) saves a future and a loop turn each,
# and the embedded broker one future per run of a client's events (embedded/stream.py).
# `on_committed` None: nobody waits for this event's commit.
CallbackSink = Callable[[Event, Callable[[], None] | None], Awaitable[bool]]


def callback_sink(sink: EventSink) -> CallbackSink:
    """`sink`'s callback form: its own `dispatch` when it has one, else a wrapper around its future."""
    dispatch = getattr(sink, "dispatch", None)
    if dispatch is not None:
        return dispatch  # type: ignore[no-any-return]

    async def wrapped(event: Event, on_committed: Callable[[], None] | None) -> bool:
        committed = await sink(event)
        if committed is None:
            return False
        if on_committed is not None:
            committed.add_done_callback(lambda _: on_committed())
        return True

    return wrapped


@dataclass(frozen=True, slots=True)
class BrokerNumbers:
    """A broker's own numbers at one moment (the embedded broker's: brokers/embedded/traffic.py),
    in Mosquitto's meanings; `$SYS/broker/...` and /metrics both show these."""

    clients_connected: int
    clients_disconnected: int  # sessions kept without a connection
    clients_maximum: int  # most sessions (connected or not) at once
    clients_expired: int
    subscriptions: int  # of every session, shared ones not included
    shared_subscriptions: int
    retained: int  # every retained message, the broker's own `$SYS` ones included
    stored_messages: int  # retained, queued and in-flight messages, each once
    stored_bytes: int  # their payload bytes
    packets_received: int
    packets_sent: int
    publish_received: int
    publish_sent: int
    bytes_received: int
    bytes_sent: int
    publish_bytes_received: int  # payload bytes
    publish_bytes_sent: int
    sockets: int  # network connections accepted
    connections: int  # CONNECTs accepted
    dropped: Mapping[str, int]  # messages dropped, by reason


@dataclass(frozen=True, slots=True)
class Delivery:
    """A stored message the bridge sends to one subscriber (fetch, retain lookup).

    Deliveries are not publish events: they are never routed to other clients
    and never stored again. They do produce message.delivered / message.acked
    events (with this msgid and `filter`), which is how acks reach the offsets.
    """

    msgid: str
    topic: str
    payload: bytes
    qos: int  # already min(message qos, subscription qos)
    retain: bool
    from_clientid: str
    filter: str  # the subscription filter this delivery is for


class DeliveryError(HookbridgeError):
    """The session does not exist (or cannot take messages)."""


class BrokerSource(abc.ABC):
    """Events in, effects out. One instance per `broker.mode`."""

    mode: str = ""  # what it can do for the functions is its mode's declaration (bridge/conf/registry.py)
    # A source that acknowledges a message only after its rules committed (or spooled; every
    # mode, docs/architecture.md#acknowledged-means-kept) has the dispatcher return a "done"
    # future per event (see EventSink).
    acks_after_commit: bool = False

    @abc.abstractmethod
    async def start(self, sink: EventSink) -> None:
        """Start producing events into `sink`. Returns once the source is serving."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stop intake and close connections."""

    async def retire(self) -> None:
        """Before a `stop` for good (a worker scaled down): give up what the broker keeps for this
        bridge between runs (an external broker's session). Nothing to give up by default."""
        return None

    async def subscribe(self, clientid: str, topic: str, qos: int) -> bool:
        """Subscribe `clientid` to `topic` as if it had sent SUBSCRIBE.

        Fires session.subscribed like a client's own subscription. Returns False
        when the client has no session.
        """
        raise NotImplementedError(f"{self.mode} mode cannot subscribe a client on its behalf")

    async def deliver(self, clientid: str, deliveries: Sequence[Delivery]) -> None:
        """Queue `deliveries`, in order, to the one session of `clientid`.

        Offline persistent sessions keep them until the client returns.
        Raises DeliveryError when the session does not exist.
        """
        raise NotImplementedError(f"{self.mode} mode cannot deliver to one session")

    def is_connected(self) -> bool:
        """For /healthz: the source is serving (listening, or connected upstream)."""
        return True

    @property
    def dropped_messages(self) -> int:
        """Messages the source dropped because a bound was hit (counted, never silent)."""
        return 0

    def numbers(self) -> BrokerNumbers | None:
        """The broker's own traffic and state (the embedded broker); None: a broker outside."""
        return None

    async def fresh_numbers(self) -> BrokerNumbers | None:
        """`numbers()` read from the state as it is now, over as many loop turns as that takes
        (the embedded broker's census of a big fleet); what a scrape shows."""
        return self.numbers()

    def report_bridge_status(self, read: Callable[[], Mapping[str, str]]) -> None:
        """Where the broker publishes its status (`$SYS`), also publish `read()`: the bridge's
        own (pools, spool, rules), under `$SYS/broker/hookbridge/`. Brokers outside: nothing."""
        del read  # a broker outside publishes its own `$SYS`; the bridge adds nothing to it

    @property
    def output_pauses(self) -> int:
        """Times a client connection stopped being read because it did not take its output."""
        return 0

    @property
    def durable(self) -> Mapping[str, int]:
        """Durable sessions on: what the store holds ({"sessions": n, "messages": n}); else empty."""
        return {}

    def durable_health(self) -> Mapping[str, Any] | None:
        """Durable sessions on: whether the store can write, for /healthz; None when there is none."""
        return None

    @property
    def refused(self) -> Mapping[str, int]:
        """What the source refused, closed or dropped because one of its limits was hit, by reason.

        The embedded broker counts under the names of `bridge.brokers.embedded.limits.REFUSALS`;
        a source without such limits refuses nothing."""
        return {}

    @property
    def refusal_reasons(self) -> tuple[str, ...]:
        """Every reason `refused` can count, shown from the start (zero) so a rate can be alerted on."""
        return ()

    def reload(self) -> list[str]:
        """SIGHUP: read again what the source reads from files (users, ACL); returns the problems
        found, in which case what was read before stays."""
        return []

    @property
    def inflight(self) -> int:
        """External modes: messages received and not yet acknowledged to the broker."""
        return 0

    async def idle(self) -> None:  # noqa: B027 - optional: sources without an internal queue have nothing to wait for
        """Wait until every event the source has seen was handed to the sink."""

    @property
    def busy(self) -> bool:
        """True while events wait inside the source (see `idle`)."""
        return False
