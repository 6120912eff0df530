"""At least once (docs/architecture.md#at-least-once-nothing-dropped-silently) on every backend: its server stopped for 30 s while 20,000 QoS 1 messages flow."""

from __future__ import annotations

import asyncio
import time

from conformance.stores import Store, rules_for
from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import Client

OUTAGE = 30.0
MESSAGES = 20_000


async def test_server_down_for_30s_while_20000_messages_flow(make_bridge: BridgeFactory, store: Store) -> None:
    bridge = await make_bridge(
        rules_for(store.db),
        pools=store.pool_config(),
        extra_config=f"backend.{store.db}.pool1.retry_backoff_max = 1s\n",
    )
    publishers = [await Client(mqtt_port(bridge), f"dev{n}").connected() for n in range(4)]
    sent = [[(f"fault/dev{n}", b"dev%d %05d" % (n, i)) for i in range(MESSAGES // 4)] for n in range(4)]

    async def flow(start: int, end: int) -> None:
        await asyncio.gather(*(p.publish_many(m[start:end]) for p, m in zip(publishers, sent, strict=True)))

    per_device = MESSAGES // 4
    await flow(0, per_device // 4)  # a quarter before the outage
    await asyncio.to_thread(store.stop_server)
    stopped = time.monotonic()
    starts = range(per_device // 4, per_device * 3 // 4, per_device // 40)
    for step, start in enumerate(starts, 1):  # half of them during the outage, spread over its 30 s
        await flow(start, start + per_device // 40)
        await asyncio.sleep(max(0.0, stopped + OUTAGE * step / len(starts) - time.monotonic()))
    assert not bridge.health()[0]
    await asyncio.to_thread(store.start_server)
    await flow(per_device * 3 // 4, per_device)  # the last quarter after it
    await asyncio.wait_for(bridge.idle(), 180)
    for publisher in publishers:
        await publisher.disconnect()

    for n in range(4):  # everything, once, in publish order per publisher
        assert [m.payload for m in await store.messages(f"fault/dev{n}")] == [p for _, p in sent[n]]
    assert await store.message_count() == MESSAGES
    counts = bridge.metrics.rules[f"{store.db}.message.publish.1"]
    assert (counts["succeeded"], counts["failed"], counts["dropped"]) == (MESSAGES, 0, 0)
    assert counts["spooled"] > 0
    assert bridge.health()[0]
