"""Each stored or retained message reaches a subscription once.

Several rules may answer one new subscription (a queue fetch and a retain
lookup can both hold the same retained message; overlapping fetch rules can
match the same topics). The log remembers, per subscription event, which ids
were already delivered, and drops repeats before they reach the broker.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from bridge.brokers.base import BrokerSource, Delivery
from bridge.events import SessionSubscribed

_Key = tuple[str, str, str | None]


class DeliveryLog:
    def __init__(self, capacity: int = 10_000) -> None:
        self._sent: OrderedDict[_Key, set[str]] = OrderedDict()
        self._capacity = capacity

    def fresh(self, event: SessionSubscribed, deliveries: Sequence[Delivery]) -> list[Delivery]:
        key = (event.clientid, event.topic, event.live_from_msgid)
        sent = self._sent.get(key)
        if sent is None:
            sent = self._sent[key] = set()
            if len(self._sent) > self._capacity:
                self._sent.popitem(last=False)
        else:
            self._sent.move_to_end(key)
        fresh = [d for d in deliveries if d.msgid not in sent]
        sent.update(d.msgid for d in fresh)
        return fresh

    async def deliver(
        self, broker: BrokerSource, event: SessionSubscribed, deliveries: Sequence[Delivery]
    ) -> list[Delivery]:
        """Deliver what this subscription has not had yet; returns what was sent."""
        fresh = self.fresh(event, deliveries)
        if fresh:
            await broker.deliver(event.clientid, fresh)
        return fresh
