"""The embedded MQTT 3.1.1 / 5.0 broker (`broker.mode = embedded`): the project's own core on
the codec in bridge/mqtt/."""

from bridge.brokers.embedded.source import EmbeddedBroker

__all__ = ["EmbeddedBroker"]
