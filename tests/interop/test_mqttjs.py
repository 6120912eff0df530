"""MQTT.js (npm `mqtt`, the Node and browser client) against the embedded broker, MQTT 3.1.1 and 5.0.

js/roundtrip.mjs connects a subscriber (persistent session) and a publisher, publishes at QoS 0,
1 and 2, lets one message queue while the subscriber is away, and prints every packet each
client received, as MQTT.js decoded it. The tests here judge that report, against the embedded
broker and against Mosquitto (conftest.py).

MQTT.js is pinned by js/package-lock.json and installed by scripts/test.sh (lib.sh `js_deps`),
or by the `roundtrip` fixture when missing.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from support.services import ROOT

JS = Path(__file__).parent / "js"
MQTT_3_1_1, MQTT_5 = 4, 5

# What roundtrip.mjs attaches to every 5.0 message, as the report shows it (correlation data in hex).
SENT_PROPERTIES = {
    "userProperties": {"origin": "mqtt.js", "tags": ["first", "second"]},
    "contentType": "text/plain; charset=utf-8",
    "payloadFormatIndicator": True,
    "correlationData": "0001feff",
}
SUBSCRIPTION_ID = 7
EXPIRY = 3600


@pytest.fixture(scope="session")
def roundtrip() -> Path:
    subprocess.run(["bash", "-c", ". scripts/lib.sh; js_deps"], cwd=ROOT, check=True)
    return JS / "roundtrip.mjs"


@pytest.fixture(params=["embedded", "mosquitto"])
def port(request: pytest.FixtureRequest) -> int:
    value: int = request.getfixturevalue(request.param)
    return value


def run(script: Path, port: int, version: int) -> dict[str, Any]:
    prefix = f"mqttjs-{version}-{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        ["node", str(script), str(port), str(version), prefix], capture_output=True, text=True, timeout=60, cwd=JS
    )
    assert done.stdout, f"no report (exit {done.returncode}): {done.stderr}"
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["error"] is None, f"failed at {report['step']!r}: {report['error']}\n{done.stdout}"
    assert done.returncode == 0, done.stderr
    report["prefix"] = prefix
    return report


def of(log: list[dict[str, Any]], cmd: str) -> list[dict[str, Any]]:
    return [packet for packet in log if packet["cmd"] == cmd]


def received(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The subscriber's PUBLISH packets by topic level after the prefix (every topic once)."""
    messages = of(report["subscriber"], "publish")
    by_name = {packet["topic"].removeprefix(report["prefix"] + "/"): packet for packet in messages}
    assert len(by_name) == len(messages), f"a message came twice: {messages}"
    return by_name


def test_mqtt_3_1_1_round_trip(roundtrip: Path, port: int) -> None:
    report = run(roundtrip, port, MQTT_3_1_1)
    sub, pub = report["subscriber"], report["publisher"]

    first, back = of(sub, "connack")
    assert (first["returnCode"], first["sessionPresent"]) == (0, False)
    assert (back["returnCode"], back["sessionPresent"]) == (0, True)
    assert [packet["granted"] for packet in of(sub, "suback")] == [[2]]
    assert len(of(sub, "unsuback")) == 1
    # QoS 1 twice (online and offline), QoS 2 once; each flow completed
    assert [p["cmd"] for p in pub if p["cmd"] != "connack"] == ["puback", "pubrec", "pubcomp", "puback"]

    messages = received(report)
    assert sorted(messages) == ["offline", "qos0", "qos1", "qos2"]
    for qos in (0, 1, 2):
        message = messages[f"qos{qos}"]
        assert (message["qos"], message["retain"], message["payload"]) == (qos, False, f"héllo ✓ QoS {qos}")
        assert "properties" not in message
    assert (messages["offline"]["qos"], messages["offline"]["payload"]) == (1, "queued while away")


def test_mqtt_5_round_trip(roundtrip: Path, port: int) -> None:
    report = run(roundtrip, port, MQTT_5)
    sub, pub = report["subscriber"], report["publisher"]

    first, back = of(sub, "connack")
    assert (first["reasonCode"], first["sessionPresent"]) == (0, False)
    assert (back["reasonCode"], back["sessionPresent"]) == (0, True)
    assert [packet["granted"] for packet in of(sub, "suback")] == [[2]]  # reason code 0x02: granted QoS 2
    assert [packet["granted"] for packet in of(sub, "unsuback")] == [[0]]  # MQTT.js's name for the reason codes
    # every acknowledgement of the publisher's messages: success (0x00), the subscriber was there
    acks = [(p["cmd"], p["reasonCode"]) for p in pub if p["cmd"] != "connack"]
    assert acks == [("puback", 0), ("pubrec", 0), ("pubcomp", 0), ("puback", 0)]
    assert [p["reasonCode"] for p in of(sub, "pubrel")] == [0]

    messages = received(report)
    assert sorted(messages) == ["offline", "qos0", "qos1", "qos2"]
    for qos in (0, 1, 2):
        message = messages[f"qos{qos}"]
        assert (message["qos"], message["retain"], message["payload"]) == (qos, False, f"héllo ✓ QoS {qos}")
        properties = dict(message["properties"])
        # lowered by the seconds the message waited in the broker (5.0 section 3.3.2.3.3)
        assert 0 < properties.pop("messageExpiryInterval") <= EXPIRY
        assert properties.pop("subscriptionIdentifier") == SUBSCRIPTION_ID
        assert properties.pop("responseTopic") == f"{report['prefix']}/reply"
        assert properties == SENT_PROPERTIES  # and nothing the publisher did not send, no topic alias
    offline = messages["offline"]
    assert (offline["qos"], offline["payload"]) == (1, "queued while away")
    assert offline["properties"] == {"subscriptionIdentifier": SUBSCRIPTION_ID}
