"""/healthz reports the durable store like a pool (docs/operations.md#health-get-healthz): ready only
while its commits work and its disk has `broker.durable_min_free` free.

Before, /healthz answered ready with the store's disk full. Both ways in are tested without
root: the free-space threshold by its setting, a failing commit by a file-size limit on the
bridge's process (writes past it fail with EFBIG, as on a full disk).
"""

from __future__ import annotations

import json
from pathlib import Path

from bridge.brokers.embedded.codec import MQTT_3_1_1, Publish, encode
from support.bridges import BridgeFactory
from support.process import BridgeProcess
from support.raw import RawClient


def _durable(directory: Path, extra: str = "") -> str:
    return f"broker.durable_sessions = on\nbroker.durable_dir = {directory}\n{extra}"


async def test_a_disk_below_durable_min_free_is_not_ready(make_bridge: BridgeFactory, tmp_path: Path) -> None:
    roomy = await make_bridge(rules="", pools="", extra_config=_durable(tmp_path / "roomy"))
    ready, detail = roomy.health()
    assert ready, detail
    store = detail["durable"]
    assert store["up"] and store["writable"] and store["free_bytes"] >= store["min_free_bytes"] == 64 << 20

    # more free space than any disk here has: the store's disk counts as full
    full = await make_bridge(
        rules="", pools="", extra_config=_durable(tmp_path / "full", "broker.durable_min_free = 1024TB\n")
    )
    ready, detail = full.health()
    assert not ready
    store = detail["durable"]
    assert not store["up"] and store["writable"], store
    assert "below broker.durable_min_free" in store["error"] and str(tmp_path / "full") in store["error"]


async def test_a_store_that_cannot_write_turns_healthz_503(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    bridge = BridgeProcess(home, "", "", _durable(home / "durable"))
    bridge.start(file_size_limit=512 << 10)  # no file of the bridge may pass 512 KB: a full disk
    clients: list[RawClient] = []
    try:
        bridge.wait_for(bridge.ready, "/healthz ready")
        assert bridge.metric("hookbridge_broker_durable_store_up") == 1
        absent, _ = await RawClient.connect(bridge.mqtt_port, "absent", clean_session=False)
        clients.append(absent)
        assert (await absent.subscribe(1, ("fill/#", 1))).reason_codes == [1]
        absent.abort()  # its session stays: what is published to fill/# is stored for it
        filler, _ = await RawClient.connect(bridge.mqtt_port, "filler")
        clients.append(filler)
        payload = b"x" * (4 << 10)
        await filler.send_bytes(
            b"".join(encode(Publish(f"fill/{n}", payload, 1, packet_id=n), MQTT_3_1_1) for n in range(1, 301))
        )

        def unwritable() -> bool:
            answer = bridge.get("/healthz")
            return answer is not None and answer[0] == 503 and not json.loads(answer[1])["durable"]["writable"]

        bridge.wait_for(unwritable, "/healthz 503: the durable store cannot write")
        answer = bridge.get("/healthz")
        assert answer is not None
        store = json.loads(answer[1])["durable"]
        assert not store["up"] and store["error"], store
        assert bridge.metric("hookbridge_broker_durable_store_up") == 0
    finally:
        for client in clients:
            client.abort()
        bridge.stop()
