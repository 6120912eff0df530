"""Broker sources: base.py is the interface; embedded/ is the in-process broker (on its MQTT codec,
embedded/codec/); external/ the mqtt and emqx modes, clients of another broker; delivery.py keeps
each stored message to one delivery per subscription."""
