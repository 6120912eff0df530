"""The embedded MQTT 3.1.1 broker (`broker.mode = embedded`), built on amqtt 0.12.1."""

from bridge.brokers.embedded.source import EmbeddedBroker

__all__ = ["EmbeddedBroker"]
