"""`broker.mode = emqx`: the mqtt mode's session, plus EMQX's system messages, rule events and REST API.

Messages come through the same (shared) subscriptions as in mqtt mode; client
events from `$SYS/brokers/+/clients/+/+`; message.delivered / message.acked
from the rule-engine events a rule republishes under `broker.emqx.event_topic`.
Proxy subscription goes through the REST API. EMQX has no call that delivers
to one session, so fetch and retain lookup are refused at load (its capabilities: mode.py).
"""

from __future__ import annotations

from bridge.brokers.external.clientids import same_bridge
from bridge.brokers.external.emqx.mapping import SYS_ROOT, rule_event, sys_event, sys_filter
from bridge.brokers.external.emqx.rest import EmqxApi
from bridge.brokers.external.mqtt.source import MqttSource
from bridge.events import Event
from bridge.topics import matches


class EmqxSource(MqttSource):
    mode = "emqx"

    def __init__(
        self, *args: object, api: EmqxApi, event_topic: str, sys_root: str = SYS_ROOT, **kwargs: object
    ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.sys_root = sys_root  # "$SYS"; another root only in tests (Mosquitto drops client $SYS publishes)
        self.api = api
        self.event_topic = event_topic
        self.ignored = 0  # control messages that were not the JSON EMQX sends

    def control_subscriptions(self) -> list[tuple[str, int]]:
        # EMQX publishes $SYS messages at QoS 0; the republished rule events come at the rule's QoS (1).
        # Off in workers other than 0 of `run --workers N`: one process takes them all, in order.
        if not self._client_events:
            return []
        return [(sys_filter(self.sys_root), 0), (self.event_topic, 1)]

    def control_events(self, topic: str, payload: bytes) -> list[Event] | None:
        if topic.startswith(self.sys_root + "/"):
            event = sys_event(topic, payload, self.sys_root)
        elif matches(self.event_topic, topic):
            event = rule_event(payload)
        else:
            return None
        if event is None:
            self.ignored += 1
            return []
        if same_bridge(self.upstream.clientid, event.clientid):
            return []  # the bridge's own sessions (every worker's) are not application clients
        return [event]

    async def subscribe(self, clientid: str, topic: str, qos: int) -> bool:
        """POST /api/v5/clients/{clientid}/subscribe; False when the client is offline.

        EMQX then fires its own session.subscribed, which arrives as a $SYS message."""
        return await self.api.subscribe(clientid, topic, qos)

    async def stop(self) -> None:
        await super().stop()
        await self.api.close()
