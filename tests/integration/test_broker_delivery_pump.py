"""Nothing owed to a connected client waits for unrelated traffic (docs/brokers.md#exactly-once).

A `#` subscriber owed 50,000 retained messages, many times `broker.max_output_bytes`: each
loop turn writes at most that much, the kernel's socket buffer takes it without the transport
ever pausing, so no resume_writing restarts delivery; the pump must go on by itself. Before it
did, 34,222 of 50,000 arrived and the rest waited until the client sent something else.
"""

from __future__ import annotations

import pytest

from bridge.brokers.embedded.codec import MQTT_3_1_1, Puback, Publish, encode
from support.bridges import BridgeFactory, mqtt_port
from support.raw import RawClient

RETAINED = 50_000
BATCH = 1_000  # retained PUBLISH packets per write
# (broker.max_output_bytes, payload bytes): what is owed is about 25 times a small bound, and
# 6 times the default one (4 MB, where it was found); the queue stays under max_offline_bytes.
SIZES = [pytest.param(256 << 10, 100, id="256KB"), pytest.param(None, 500, id="default-4MB")]


async def _retain(port: int, payload: bytes) -> None:
    """RETAINED retained messages, one per topic; the PUBACK of a QoS 1 PUBLISH sent after them
    says the broker has handled them all (one client's packets are handled in order)."""
    publisher, _ = await RawClient.connect(port, "pump-pub", level=MQTT_3_1_1)
    for start in range(0, RETAINED, BATCH):
        await publisher.send_bytes(
            b"".join(
                encode(Publish(f"pump/{n}", payload, 0, retain=True), MQTT_3_1_1) for n in range(start, start + BATCH)
            )
        )
    await publisher.send(Publish("pump-done", b"", 1, packet_id=1))
    assert await publisher.recv(timeout=60) == Puback(1)
    publisher.abort()


@pytest.mark.parametrize(("bound", "size"), SIZES)
async def test_a_subscriber_owed_many_times_max_output_bytes_gets_everything(
    make_bridge: BridgeFactory, bound: int | None, size: int
) -> None:
    setting = f"broker.max_output_bytes = {bound}\n" if bound else ""
    bridge = await make_bridge(rules="", pools="", extra_config=setting)
    port = mqtt_port(bridge)
    payload = b"p" * size
    await _retain(port, payload)
    subscriber, _ = await RawClient.connect(port, "pump-sub", level=MQTT_3_1_1)
    assert (await subscriber.subscribe(1, ("pump/#", 0))).reason_codes == [0]
    topics = set()
    for _ in range(RETAINED):
        # The client only reads: a stalled pump shows as a timeout here, not as a slow pass.
        try:
            message = await subscriber.recv()
        except TimeoutError:
            raise AssertionError(f"{len(topics)} of {RETAINED} delivered, then nothing") from None
        assert isinstance(message, Publish), message
        assert message.retain and message.payload == payload
        topics.add(message.topic)
    assert topics == {f"pump/{n}" for n in range(RETAINED)}
    refused = bridge.broker.refused  # type: ignore[attr-defined]
    assert refused["offline_messages"] == refused["offline_bytes"] == refused["queued_bytes"] == 0
    subscriber.abort()
