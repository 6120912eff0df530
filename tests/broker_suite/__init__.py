"""Broker behaviour suite: every feature docs/brokers.md#what-it-guarantees lists, tested with real clients over TCP.

paho-mqtt v2 (`tests/support/mqtt.py`, the one test client) speaks both MQTT 3.1.1 and 5.0;
gmqtt is a second 5.0 client where forwarding is checked; raw bytes (`tests/support/frames.py`,
sent and read by `tests/support/raw.py`) only where a library refuses to misbehave as the test
needs.
The `broker` fixture (conftest.py) runs every test against Mosquitto and against the embedded
broker (the project's own core, bridge/brokers/embedded/): both must pass all of it.

Run it (through the shared test lock): `.venv/bin/pytest -q tests/broker_suite`.

Where Mosquitto 2.0.11 (Debian 12) breaks a rule of the specification the test states the rule
and carries `@pytest.mark.mosquitto_deviates(reason)`: a strict xfail for Mosquitto only, so the
embedded broker must pass it and a conforming Mosquitto release shows up as an unexpected pass:

- test_mqtt311.py::test_overlapping_subscriptions_deliver_at_the_highest_granted_qos: one copy,
  at the QoS of the last matching subscription, not the highest (MQTT-3.3.5-1).
- test_mqtt5_session.py::test_will_sent_when_the_session_ends_before_the_delay: the will waits
  out its delay although the session (expiry 0) ended with the connection (5.0 3.1.3.2.2).

Where the specification leaves a choice the tests accept each allowed answer and say so:
PUBACK 0x00 or 0x10 without subscribers; payload format checked (0x99) or passed unchanged;
receive maximum exceeded refused by DISCONNECT 0x93 or by a PUBREC >= 0x80 (Mosquitto); a
taken-over session's connection closed with or without DISCONNECT 0x8E (Mosquitto: without);
overlapping subscriptions as one copy or one per subscription.
"""
