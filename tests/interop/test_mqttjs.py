"""MQTT.js (npm `mqtt`, the Node and browser client) against the embedded broker, MQTT 3.1.1 and 5.0.

js/roundtrip.mjs connects a subscriber (persistent session) and a publisher, publishes at QoS 0,
1 and 2, twice to one topic (5.0: the second time by topic alias alone), a retained message that
a later subscriber gets too, lets one message queue while the subscriber is away, and prints
every packet each client received, as MQTT.js decoded it. The tests here judge that report, against the embedded
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


# What the subscriber gets, by payload: every message once.
PAYLOADS = ["alias 1", "alias 2", "héllo ✓ QoS 0", "héllo ✓ QoS 1", "héllo ✓ QoS 2", "kept", "queued while away"]
# The publisher's acknowledgements: QoS 0, 1, 2, the two to one topic, the retained message, the
# one queued for the absent subscriber, the retained message cleared; each flow completed.
PUBLISHER_ACKS = ["puback", "pubrec", "pubcomp", "puback", "puback", "puback", "puback", "puback"]


def received(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The subscriber's PUBLISH packets by payload, each with its topic level after the prefix."""
    messages = of(report["subscriber"], "publish")
    by_payload = {p["payload"]: {**p, "topic": p["topic"].removeprefix(report["prefix"] + "/")} for p in messages}
    assert len(by_payload) == len(messages), f"a message came twice: {messages}"
    assert sorted(by_payload) == PAYLOADS
    return by_payload


def check_common(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What both versions must show; returns the subscriber's messages by payload."""
    assert [p["cmd"] for p in report["publisher"] if p["cmd"] != "connack"] == PUBLISHER_ACKS
    messages = received(report)
    for qos in (0, 1, 2):
        message = messages[f"héllo ✓ QoS {qos}"]
        assert (message["topic"], message["qos"], message["retain"]) == (f"qos{qos}", qos, False)
    assert [(messages[p]["topic"], messages[p]["qos"]) for p in ("alias 1", "alias 2")] == [("alias", 1)] * 2
    # retain is 0 on a message sent to a subscription that existed when it was published
    assert (messages["kept"]["topic"], messages["kept"]["retain"]) == ("retained", False)
    assert (messages["queued while away"]["topic"], messages["queued while away"]["qos"]) == ("offline", 1)
    # the later subscriber gets the retained message, flagged retained
    [retained] = of(report["late"], "publish")
    assert (retained["topic"], retained["payload"], retained["qos"], retained["retain"]) == (
        f"{report['prefix']}/retained",
        "kept",
        1,
        True,
    )
    return messages


def test_mqtt_3_1_1_round_trip(roundtrip: Path, port: int) -> None:
    report = run(roundtrip, port, MQTT_3_1_1)
    sub = report["subscriber"]

    first, back = of(sub, "connack")
    assert (first["returnCode"], first["sessionPresent"]) == (0, False)
    assert (back["returnCode"], back["sessionPresent"]) == (0, True)
    assert [packet["granted"] for packet in of(sub, "suback")] == [[2]]
    assert len(of(sub, "unsuback")) == 1
    messages = check_common(report)
    assert all("properties" not in message for message in messages.values())


def test_mqtt_5_round_trip(roundtrip: Path, port: int) -> None:
    report = run(roundtrip, port, MQTT_5)
    sub, pub = report["subscriber"], report["publisher"]

    first, back = of(sub, "connack")
    assert (first["reasonCode"], first["sessionPresent"]) == (0, False)
    assert (back["reasonCode"], back["sessionPresent"]) == (0, True)
    assert [packet["granted"] for packet in of(sub, "suback")] == [[2]]  # reason code 0x02: granted QoS 2
    assert [packet["granted"] for packet in of(sub, "unsuback")] == [[0]]  # MQTT.js's name for the reason codes
    # every acknowledgement of the publisher's messages: success (0x00); the last, clearing the
    # retained message after the unsubscribe, may say 0x10 (no matching subscribers) instead
    *acks, last = [p["reasonCode"] for p in pub if p["cmd"] != "connack"]
    assert (acks, last in (0x00, 0x10)) == ([0] * 7, True)
    assert [p["reasonCode"] for p in of(sub, "pubrel")] == [0]

    messages = check_common(report)
    for qos in (0, 1, 2):
        properties = dict(messages[f"héllo ✓ QoS {qos}"]["properties"])
        # lowered by the seconds the message waited in the broker (5.0 section 3.3.2.3.3)
        assert 0 < properties.pop("messageExpiryInterval") <= EXPIRY
        assert properties.pop("subscriptionIdentifier") == SUBSCRIPTION_ID
        assert properties.pop("responseTopic") == f"{report['prefix']}/reply"
        assert properties == SENT_PROPERTIES  # and nothing the publisher did not send, no topic alias
    for payload in ("alias 1", "alias 2", "kept", "queued while away"):
        assert messages[payload]["properties"] == {"subscriptionIdentifier": SUBSCRIPTION_ID}
    assert "properties" not in of(report["late"], "publish")[0]  # no subscription identifier asked

    # MQTT.js did send the second message to one topic by alias alone
    first_use, second_use = [p for p in report["published"] if p["payload"].startswith("alias")]
    assert first_use["topic"] == f"{report['prefix']}/alias"
    assert second_use["topic"] == ""
    assert second_use["properties"]["topicAlias"] == first_use["properties"]["topicAlias"] > 0
