"""Publish, subscribe and deliver: what a client (or the bridge) does to a session.

Shared by the client's message loop (broker.py) and the bridge's own calls
(`EmbeddedBroker.subscribe()` / `deliver()`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

from bridge.brokers.base import Delivery, DeliveryError
from bridge.brokers.embedded.lane import Kept
from bridge.brokers.embedded.router import Router, Sequencer
from bridge.brokers.embedded.sessions import Outgoing, SessionState
from bridge.events import MessagePublish, SessionSubscribed, SessionUnsubscribed
from bridge.msgid import MsgIdGenerator
from bridge.topics import filter_error

_QOS = (0, 1, 2)


class FlowsMixin:
    node: str
    msgids: MsgIdGenerator
    router: Router
    states: dict[str, SessionState]

    async def _publish(
        self,
        state: SessionState | None,
        peername: str,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        accepted: Callable[[Kept], Awaitable[None]] | None = None,
    ) -> None:
        """Emit message.publish for a client's message, then route it (in msgid order).

        `accepted` runs once the bridge has the event, with its kept future (the client's
        PUBACK / PUBREC waits for that: SPEC 6.3), before routing, which may wait for earlier
        messages. `state` is None for the broker's own messages (amqtt plugins): routed, no event.
        """
        clientid = state.clientid if state is not None else ""
        msgid = self.msgids.next()
        if retain:
            # Stored in the same step as the id is made: a subscription whose
            # live_from is later than this id gets the message as retained.
            self.router.store_retained(msgid, topic, payload, qos, clientid)
        previous, mine = self.router.sequencer.enter()
        try:
            kept: Kept = None
            if state is not None:
                event = MessagePublish(
                    msgid=msgid,
                    clientid=clientid,
                    username=state.username,
                    topic=topic,
                    qos=qos,
                    payload=payload,
                    retain=retain,
                    node=self.node,
                    peername=peername,
                    timestamp=time.time(),
                )
                kept = await state.lane.emit(event)
            if accepted is not None:
                await accepted(kept)
            await Sequencer.wait(previous)
            self.router.route(msgid, topic, payload, qos, clientid)
        finally:
            self.router.sequencer.leave(mine)

    def _add_subscription(
        self, state: SessionState, topic_filter: str, qos: int, *, send_retained: bool
    ) -> asyncio.Future[Kept] | None:
        """Subscribe, queue the matching retained messages, post session.subscribed.

        Returns the event's future (done once the sink took it), or None when
        the filter or QoS is invalid (SUBACK failure code).
        """
        if filter_error(topic_filter) or qos not in _QOS:
            return None
        # Made in the same step as the subscription is added (no await between):
        # every message routed to it from now on has a greater id.
        live_from = self.msgids.next()
        is_new = self.router.subscribe(state, topic_filter, qos, live_from)
        if not is_new:
            # The subscription was replaced, not re-created: routing keeps its
            # original live_from so no message falls between the two.
            live_from = self.msgids.next()
        sent: list[str] = []
        if send_retained:  # [MQTT-3.3.1-6], re-sent on a repeated SUBSCRIBE [MQTT-3.8.4-3]
            for retained in self.router.retained_for(topic_filter):
                state.enqueue(
                    Outgoing(
                        retained.msgid,
                        retained.topic,
                        retained.payload,
                        min(qos, retained.qos),
                        True,
                        retained.from_clientid,
                        (topic_filter,),
                    )
                )
                sent.append(retained.topic)
        event = SessionSubscribed(
            clientid=state.clientid,
            username=state.username,
            node=self.node,
            topic=topic_filter,
            qos=qos,
            timestamp=time.time(),
            is_new=is_new,
            persistent=not state.clean,
            live_from_msgid=live_from,
            retained_sent=frozenset(sent),
        )
        return state.lane.post(event, wait=True)

    def _remove_subscription(self, state: SessionState, topic_filter: str) -> asyncio.Future[Kept]:
        self.router.unsubscribe(state, topic_filter)
        event = SessionUnsubscribed(
            clientid=state.clientid,
            username=state.username,
            node=self.node,
            topic=topic_filter,
            timestamp=time.time(),
        )
        future = state.lane.post(event, wait=True)
        assert future is not None
        return future

    def proxy_subscribe(self, clientid: str, topic_filter: str, qos: int) -> bool:
        """Subscribe a session on its behalf; False when it has no session."""
        error = filter_error(topic_filter)
        if error:
            raise ValueError(error)
        if qos not in _QOS:
            raise ValueError(f"qos must be 0, 1 or 2, not {qos!r}")
        state = self.states.get(clientid)
        if state is None:
            return False
        # The event is posted in the client's order but not awaited here: the
        # caller may be running inside the sink (a rule on client.connected).
        self._add_subscription(state, topic_filter, qos, send_retained=state.connected)
        return True

    def deliver_to(self, clientid: str, deliveries: Sequence[Delivery]) -> None:
        """Queue messages to exactly one session, in order."""
        state = self.states.get(clientid)
        if state is None:
            raise DeliveryError(f"client {clientid!r} has no session")
        for delivery in deliveries:
            if delivery.qos not in _QOS:
                raise ValueError(f"qos must be 0, 1 or 2, not {delivery.qos!r}")
        for delivery in deliveries:
            state.enqueue(
                Outgoing(
                    delivery.msgid,
                    delivery.topic,
                    bytes(delivery.payload),
                    delivery.qos,
                    delivery.retain,
                    delivery.from_clientid,
                    (delivery.filter,),
                )
            )
