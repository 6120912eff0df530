"""Publish, subscribe and deliver: what a client (or the bridge) does to a session.

The whole path of a publish is here, in one file: a run of a client's PUBLISH packets
(`publish_inbound`, from its connection's task), every other message (`publish`: wills, the API,
`$SYS`), both through `_publish_begin` / `_publish_end`. Shared by the client's message loop
(broker.py: SUBSCRIBE, UNSUBSCRIBE) and the bridge's own calls (`EmbeddedBroker.subscribe()` /
`deliver()`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Protocol

from mypy_extensions import mypyc_attr

from bridge.brokers.base import Delivery, DeliveryError
from bridge.brokers.embedded.codec import MQTT_3_1_1, split_shared
from bridge.brokers.embedded.codec.filters import subscription_filter_error
from bridge.brokers.embedded.durable import hold_incoming
from bridge.brokers.embedded.router import Message, Router, target_of
from bridge.brokers.embedded.sessions import Outgoing, SessionState, Subscription
from bridge.brokers.embedded.stream import EventStream, Kept
from bridge.brokers.eventloop import running_loop
from bridge.events import Event, Hookpoint, MessagePublish, SessionSubscribed, SessionUnsubscribed
from bridge.msgid import MsgIdGenerator

if TYPE_CHECKING:
    from bridge.brokers.embedded.client import Client, Inbound

log = logging.getLogger("bridge.brokers.embedded")

_QOS = (0, 1, 2)


class Publisher(Protocol):
    """Who a message is published by: a client's session, or the bridge itself (OwnPublisher).
    Its message.publish events go through its event stream, in the order it published."""

    @property
    def clientid(self) -> str: ...

    @property
    def username(self) -> str | None: ...

    @property
    def level(self) -> int: ...

    @property
    def stream(self) -> EventStream: ...


class OwnPublisher:
    """The bridge publishing in its own name (a retained delete from the API or `ctl`), through
    the path a client's PUBLISH takes, so the rules see it: its events carry an empty client id
    and no user name, in an event stream of their own."""

    __slots__ = ("stream",)
    clientid = ""
    username = None
    level = MQTT_3_1_1  # the events' ${proto_ver}: no client, no protocol of its own

    def __init__(self, stream: EventStream) -> None:
        self.stream = stream


class Publishing:
    """A publish between _publish_begin and _publish_end."""

    __slots__ = ("message", "on_routed", "stored", "taken", "ticket")

    def __init__(
        self,
        message: Message,
        ticket: int,
        stored: asyncio.Future[None] | None,
        taken: asyncio.Future[Kept] | None,
    ) -> None:
        self.message = message
        self.ticket = ticket
        self.stored = stored  # durable sessions: done once the journal committed the message
        self.taken = taken  # done once the rules took the event (its result: the kept future)
        # Called with the rules' kept future in the step the message is routed (so logged): a
        # durable session's QoS 2 id is committed with it (durable/journal.py hold_incoming).
        self.on_routed: Callable[[Kept], None] | None = None


# Compiled (bridge/extensions.py); Broker (broker.py, interpreted: mypyc has no async generators)
# derives from it.
@mypyc_attr(allow_interpreted_subclasses=True)
class FlowsMixin:
    node: str
    msgids: MsgIdGenerator
    router: Router
    states: dict[str, SessionState]
    expiring: dict[str, float]  # msgid -> monotonic deadline of messages published with an expiry
    own_publisher: OwnPublisher
    # The sink's Dispatcher.wants and Dispatcher.skipped (None: a sink that wants every event).
    _wants: Callable[[Hookpoint, str, str | None], bool] | None
    _skipped: Callable[[Hookpoint], None] | None

    def should_post(self, hookpoint: Hookpoint, clientid: str, topic: str | None = None) -> bool:
        """Whether to build and post an event of `hookpoint`: the sink wants it. One it does not
        want is counted here as skipped, so the sink's event counters stay whole: the one place
        every event the broker skips (a publish here, a delivery or an ack in channel.py) is counted."""
        if self._wants is None or self._wants(hookpoint, clientid, topic):
            return True
        if self._skipped is not None:
            self._skipped(hookpoint)
        return False

    def loaded(self, state: SessionState) -> SessionState:
        raise NotImplementedError  # Broker.loaded: a restored durable session's queue read back

    async def publish_own(self, message: Message) -> Kept:
        """Publish `message` in the bridge's own name, as a client's PUBLISH is published (the
        retained store, message.publish to the rules, routing in msgid order); returns its kept
        future, done once every rule's action for it is committed or spooled (None: no rule)."""
        accepted: list[Kept] = []

        async def accept(kept: Kept) -> None:
            accepted.append(kept)

        await self.publish(message, self.own_publisher, peername="api", accepted=accept)
        return accepted[0]

    async def publish_inbound(self, conn: Client, items: Sequence[Inbound]) -> None:
        """A client's PUBLISH packets that came in a row, in order: every one is begun (id,
        retained store, routing turn) and their events posted as one run before the first is
        acknowledged and routed, so a burst costs one pass through the rules, one future for the
        run and one write to each subscriber rather than a few loop turns per message."""
        state = conn.state
        assert state is not None
        begun: list[tuple[Inbound, Publishing | None]] = []
        run: list[Event] = []  # the events of the run, posted together
        in_run: list[Publishing] = []
        for item in items:
            if item.refused:
                log.info("client %r may not publish to %r: dropped", state.clientid, item.topic)
                begun.append((item, None))
                continue
            message = Message(
                self.msgids.next(),
                item.topic,
                item.payload,
                item.qos,
                item.retain,
                state.clientid,
                item.properties,
                item.expires,
            )
            events = len(run)
            begins = self._publish_begin(state, conn.peer.address, message, item.qos > 0, run=run)
            if len(run) > events:
                in_run.append(begins)
            if item.qos == 2 and state.durable:  # its packet id is committed with the message
                begins.on_routed = partial(hold_incoming, state, item.packet_id)
            begun.append((item, begins))
        if run:
            # Nothing else ran since the first of them was begun: their place in the client's
            # stream is the one each had when it was begun.
            taken = state.stream.post_run(run)
            for joined in in_run:
                joined.taken = taken
        ended = 0
        try:
            for item, publishing in begun:
                ended += 1
                if publishing is None:
                    if item.ack is not None:
                        await conn.accepted(item, None)
                    continue
                await self._publish_end(publishing, None, conn if item.qos else None, item)
        finally:
            for _, publishing in begun[ended:]:
                if publishing is not None:
                    self._publish_abandon(publishing)

    async def publish(
        self,
        message: Message,
        publisher: Publisher | None = None,
        *,
        peername: str = "",
        accepted: Callable[[Kept], Awaitable[None]] | None = None,
        durable_retain: bool = True,
    ) -> int:
        """The one way a message is published: a client's will, a message the API publishes as a
        client or as nobody, the broker's own `$SYS` values (a run of a client's PUBLISH packets
        takes the same two steps, begun together: publish_inbound). Returns how many sessions it
        was routed to.

        `publisher` None: the broker itself publishes (no message.publish event, nobody to
        acknowledge). `accepted` runs once the bridge has the event, with its kept future (the
        client's PUBACK / PUBREC waits for that: docs/architecture.md#acknowledged-means-kept),
        before routing, which may wait for earlier messages. `durable_retain` False: a retained
        value the durable store does not keep (`$SYS`, made again at every start).
        `message.msgid` must have been made by the caller just before.
        """
        begun = self._publish_begin(publisher, peername, message, accepted is not None, durable_retain=durable_retain)
        return await self._publish_end(begun, accepted)

    def _publish_begin(
        self,
        state: Publisher | None,
        peername: str,
        message: Message,
        acked: bool,
        *,
        durable_retain: bool = True,
        run: list[Event] | None = None,
    ) -> Publishing:
        """The part of a publish that does not wait: its place in the retained store, the
        routing order and the client's event stream. A run of a client's PUBLISH packets begins
        them all before the first ends, so their events reach the rules in one turn of the loop
        and their messages go out in one write (the QoS 1 path with rules: docs/benchmarks.md).
        With `run`, the event is appended to it rather than posted (the caller posts the run)."""
        if message.expires:
            self.expiring[message.msgid] = message.expires
        if message.retain:
            # Stored in the same step as the id is made: a subscription whose
            # live_from is later than this id gets the message as retained.
            self.router.store_retained(message, durable=durable_retain)
        ticket = self.router.sequencer.enter()
        journal = self.router.journal
        # Durable sessions: the ack also waits for the commit that logs the message for them.
        stored = running_loop().create_future() if journal is not None and acked else None
        if state is None:  # the broker's own message: no event, no client to acknowledge
            return Publishing(message, ticket, stored, None)
        stream = state.stream
        # Nothing takes the event (no rule for this topic, no fetch page waiting): with the
        # stream idle, skipping it keeps the client's event order and saves a task and two loop
        # turns per message; the event is still counted (should_post).
        # In a run, once one event is in it the rest follow (as if the stream were busy).
        taken = None
        if run or not stream.idle or self.should_post(Hookpoint.MESSAGE_PUBLISH, state.clientid, message.topic):
            event = self._publish_event(state, peername, message)
            if run is not None:
                run.append(event)
            else:
                taken = stream.post(event, wait=True)
        return Publishing(message, ticket, stored, taken)

    async def _publish_end(
        self,
        publishing: Publishing,
        accepted: Callable[[Kept], Awaitable[None]] | None,
        client: Client | None = None,
        item: Inbound | None = None,
    ) -> int:
        """Acknowledge (once kept) and route a begun publish; must follow every _publish_begin.
        Returns how many sessions it was routed to. The acknowledgement: `accepted`, or a
        client's own PUBLISH `item` acknowledged to `client` (a client's every QoS 1 and 2
        message: no closure and no coroutine of its own)."""
        sequencer = self.router.sequencer
        stored = publishing.stored
        routed = False
        sessions = 0
        try:
            kept: Kept = None
            if publishing.taken is not None:
                kept = await publishing.taken
            if client is not None:
                assert item is not None
                await client.accepted(item, kept if stored is None else both(kept, stored))
            elif accepted is not None:
                await accepted(kept if stored is None else both(kept, stored))
            if not sequencer.ready(publishing.ticket):
                await sequencer.wait(publishing.ticket)
            sessions = self.router.route(publishing.message)
            routed = True
            if publishing.on_routed is not None:
                publishing.on_routed(kept)
        finally:
            if routed:
                sequencer.leave(publishing.ticket)
            else:
                self._publish_abandon(publishing)  # not routed: the client is not told it was kept
        if stored is not None:
            journal = self.router.journal
            _chain(journal.committed() if journal is not None else None, stored)
        return sessions

    def _publish_abandon(self, publishing: Publishing) -> None:
        """A begun publish that will not end (its connection's task was cancelled): it gives up
        its place in the routing order, unrouted and unacknowledged."""
        self.router.sequencer.leave(publishing.ticket)
        if publishing.stored is not None:
            publishing.stored.cancel()

    def _publish_event(self, state: Publisher, peername: str, message: Message) -> MessagePublish:
        # Positional, in the order of MessagePublish's fields: compiled code calls an interpreted
        # class with keywords through a dict, 655 against 208 ns for this one (every message's
        # path; tests/integration/test_embedded_broker.py::test_publish_delivered_acked_events and
        # test_mqtt5_hooks.py hold every field).
        return MessagePublish(
            message.msgid,  # msgid
            state.clientid,  # clientid
            state.username,  # username
            message.topic,  # topic
            message.qos,  # qos
            message.payload,  # payload
            message.retain,  # retain
            self.node,  # node
            peername,  # peername
            time.time(),  # timestamp
            state.level,  # proto_ver
            message.properties.user_property,  # user_properties
            message.properties.message_expiry_interval,  # expiry
        )

    def _add_subscription(
        self, state: SessionState, sub: Subscription, *, retain_handling: int
    ) -> asyncio.Future[Kept] | None:
        """Subscribe, queue the matching retained messages, post session.subscribed.

        `sub.live_from` is set here. Returns the event's future (done once the sink took it),
        or None when the filter or QoS is invalid (SUBACK failure code). `retain_handling` is
        5.0's: 0 send retained messages, 1 only for a new subscription, 2 never; 3 is a proxy
        subscription of an offline session: the broker queues none, the retain lookup may.
        """
        if subscription_filter_error(sub.filter) or sub.qos not in _QOS:
            return None
        # Made in the same step as the subscription is added (no await between):
        # every message routed to it from now on has a greater id.
        sub.live_from = self.msgids.next()
        is_new = self.router.subscribe(state, sub)
        live_from = sub.live_from
        if not is_new:
            # The subscription was replaced, not re-created: routing keeps its
            # original live_from so no message falls between the two.
            live_from = self.msgids.next()
        sent: list[str] = []
        group, topic_filter = split_shared(sub.filter)
        # [MQTT-3.3.1-6], re-sent on a repeated SUBSCRIBE [MQTT-3.8.4-3]; never for a shared one.
        send_retained = retain_handling == 0 or (retain_handling == 1 and is_new)
        if group is None and send_retained:
            for retained in self.router.retained_for(topic_filter, time.monotonic()):
                if not state.permissions.may_read(retained.topic):
                    continue
                out = Outgoing(
                    retained.msgid,
                    retained.topic,
                    retained.payload,
                    min(sub.qos, retained.qos),
                    True,
                    retained.from_clientid,
                    (sub.filter,),
                    retained.properties,
                    retained.expires,
                    (sub.identifier,) if sub.identifier else (),
                )
                self._log_for(state, out)
                state.enqueue(out)
                sent.append(retained.topic)
        state.touch(whole=True)
        event = SessionSubscribed(
            clientid=state.clientid,
            username=state.username,
            node=self.node,
            topic=sub.filter,
            qos=sub.qos,
            timestamp=time.time(),
            is_new=is_new,
            persistent=not state.clean,
            live_from_msgid=live_from,
            retained_sent=frozenset(sent),
            send_retained=send_retained or retain_handling == 3,
            proto_ver=state.level,
        )
        return state.stream.post(event, wait=True)

    def _remove_subscription(self, state: SessionState, topic_filter: str) -> tuple[bool, asyncio.Future[Kept]]:
        existed = self.router.unsubscribe(state, topic_filter)
        state.touch(whole=True)
        event = SessionUnsubscribed(
            clientid=state.clientid,
            username=state.username,
            node=self.node,
            topic=topic_filter,
            timestamp=time.time(),
            proto_ver=state.level,
        )
        future = state.stream.post(event, wait=True)
        assert future is not None
        return existed, future

    def proxy_unsubscribe(self, clientid: str, topic_filter: str) -> bool:
        """Unsubscribe a session on its behalf (the API); False when it had no such subscription
        (or no session). session.unsubscribed is posted in the client's event order, not awaited."""
        state = self.states.get(clientid)
        if state is None:
            return False
        existed, _posted = self._remove_subscription(state, topic_filter)
        return existed

    def proxy_subscribe(self, clientid: str, topic_filter: str, qos: int) -> bool:
        """Subscribe a session on its behalf; False when it has no session."""
        error = subscription_filter_error(topic_filter)
        if error:
            raise ValueError(error)
        if qos not in _QOS:
            raise ValueError(f"qos must be 0, 1 or 2, not {qos!r}")
        state = self.states.get(clientid)
        if state is None:
            return False
        self.loaded(state)  # its queue as it was before this subscription
        # The event is posted in the client's order but not awaited here: the
        # caller may be running inside the sink (a rule on client.connected).
        self._add_subscription(state, Subscription(topic_filter, qos, ""), retain_handling=0 if state.connected else 3)
        return True

    def deliver_to(self, clientid: str, deliveries: Sequence[Delivery]) -> None:
        """Queue messages to exactly one session, in order; an expired message is skipped."""
        state = self.states.get(clientid)
        if state is None:
            raise DeliveryError(f"client {clientid!r} has no session")
        self.loaded(state)  # these go after what it was owed before
        for delivery in deliveries:
            if delivery.qos not in _QOS:
                raise ValueError(f"qos must be 0, 1 or 2, not {delivery.qos!r}")
        now = time.monotonic()
        for delivery in deliveries:
            expires = self.expiring.get(delivery.msgid, 0.0)
            if expires and expires <= now:
                continue  # 5.0 message expiry: never delivered once expired, fetched or not
            if not state.permissions.may_read(delivery.topic):
                continue  # the ACL: not even a fetched message reaches a client that may not read it
            # [MQTT-3.3.4-3]: sent as a result of the subscription, so it carries its identifier
            sub = state.subscriptions.get(delivery.filter)
            ids = (sub.identifier,) if sub is not None and sub.identifier else ()
            out = Outgoing(
                delivery.msgid,
                delivery.topic,
                bytes(delivery.payload),
                delivery.qos,
                delivery.retain,
                delivery.from_clientid,
                (delivery.filter,),
                expires=expires,
                subscription_ids=ids,
            )
            self._log_for(state, out)
            state.enqueue(out)

    def _log_for(self, state: SessionState, out: Outgoing) -> None:
        """A message given to one durable session outside routing (a retained message sent on
        subscribe, a fetched one) is logged for that session alone."""
        journal = self.router.journal
        if journal is None or not state.durable or not out.qos:
            return
        out.seq = journal.reserve()
        message = Message(
            out.msgid, out.topic, out.payload, out.qos, out.retain, out.from_clientid, out.properties, out.expires
        )
        journal.log(out.seq, message, targets={state.clientid: target_of(out)})


def both(kept: Kept, stored: asyncio.Future[None]) -> asyncio.Future[None]:
    """Done when the rules kept a message and the durable store committed it; cancelled when
    either failed."""
    if kept is None:
        return stored
    joint: asyncio.Future[None] = running_loop().create_future()

    def check(_: object) -> None:
        if joint.done():
            return
        if kept.cancelled() or stored.cancelled():
            joint.cancel()
        elif kept.done() and stored.done():
            joint.set_result(None)

    kept.add_done_callback(check)
    stored.add_done_callback(check)
    return joint


def _chain(source: asyncio.Future[None] | None, target: asyncio.Future[None]) -> None:
    """Settle `target` as `source` settles (at once when there is no source)."""
    if source is None:
        target.set_result(None)
        return

    def settle(_: object) -> None:
        if target.done():
            return
        if source.cancelled():
            target.cancel()
        else:
            target.set_result(None)

    source.add_done_callback(settle)
