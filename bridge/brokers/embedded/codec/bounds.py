"""What one packet may hold, checked while it is decoded (docs/security.md#what-each-limit-bounds).

`max_packet_size` bounds a packet's bytes; these bound what costs per item inside it, each
checked as the item is read, so a packet over one is refused at the item past it, not after
all of it was decoded: 200,000 empty user properties fit in 1 MB and took over a second to
decode before the 1,025th was found too many.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Bounds:
    """0 in a field: no limit of that kind (a client-side decoder, a test)."""

    user_properties: int = 0
    """MQTT 5 user properties in one property block (a will's counted apart)."""
    topic_levels: int = 0
    """Levels of a PUBLISH topic ("a/b/c" has 3). A SUBSCRIBE filter with more is not parsed
    further and a will topic with more is let through: the broker refuses either with the code
    MQTT has for it (SUBACK 0x80 / 0x8F, CONNACK 5 / 0x90)."""
    entries: int = 0
    """Topic filters in one SUBSCRIBE or UNSUBSCRIBE, repeats included."""


NO_BOUNDS = Bounds()
