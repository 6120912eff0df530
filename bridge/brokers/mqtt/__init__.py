"""`broker.mode = mqtt`: any MQTT 3.1.1/5 broker (Mosquitto first), through gmqtt."""

from bridge.brokers.mqtt.source import MqttSource, Upstream

__all__ = ["MqttSource", "Upstream"]
