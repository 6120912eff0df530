"""`broker.mode = mqtt` declared as a plug-in (the `hookbridge.modes` entry point)."""

from __future__ import annotations

from bridge.brokers.external.mqtt.settings import SETTINGS
from bridge.conf.registry import ModePlugin

MODE = ModePlugin(
    name="mqtt",
    summary="any MQTT broker",
    capabilities=frozenset(),  # a generic broker can neither subscribe a client nor deliver to one session
    shared_subscriptions=True,  # `--workers N`: N sessions in one `$share/<group>`
    source="bridge.brokers.external.factory:make_external_source",  # gmqtt loads only in this mode
    settings=SETTINGS,
)
