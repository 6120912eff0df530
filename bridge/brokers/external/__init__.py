"""The external modes: events from another MQTT broker the bridge connects to as a client.

mqtt/ (`broker.mode = mqtt`, any MQTT broker, on gmqtt) and emqx/ (`broker.mode = emqx`, the same
client with EMQX's events and REST API on top); factory.py builds the source of either from the
config; clientids.py names the bridge's own sessions (one per `--workers` worker).
"""
