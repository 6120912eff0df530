"""MQTT 5.0 properties in tests: built from keyword arguments, read back as plain dicts.

Assertions compare dicts (`{"UserProperty": [("a", "1")], ...}`) rather than paho objects."""

from __future__ import annotations

from typing import Any

from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode


def props(packet_type: int, **values: Any) -> Properties:
    """paho properties for one packet type, e.g. `props(PacketTypes.CONNECT, SessionExpiryInterval=5)`."""
    properties = Properties(packet_type)  # type: ignore[no-untyped-call]
    for name, value in values.items():
        setattr(properties, name, value)
    return properties


def as_dict(properties: Properties | None) -> dict[str, Any]:
    """The properties a packet carried, by paho's attribute names (absent ones left out)."""
    if properties is None:
        return {}
    attributes = (name.replace(" ", "") for name in properties.names)  # "User Property" -> UserProperty
    return {attribute: getattr(properties, attribute) for attribute in attributes if hasattr(properties, attribute)}


def reason_code(packet_type: int, name: str) -> ReasonCode:
    """A reason code by its name in the specification, e.g. `reason_code(PacketTypes.DISCONNECT, "Normal disconnection")`."""
    return ReasonCode(packet_type, name)
