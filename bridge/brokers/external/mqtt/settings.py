"""The settings of the external modes (`broker.mode = mqtt` and `emqx`, whose source is this
mode's with EMQX's events on top): the broker the bridge connects to and its session. Declared with
each mode (mode.py, ../emqx/mode.py), like a backend's pool settings.
"""

from __future__ import annotations

from bridge.conf import addresses as a
from bridge.conf import parsers as p
from bridge.conf.setting import Setting

SETTINGS: dict[str, Setting] = {
    "broker.server": Setting(a.parse_hostport, ("127.0.0.1", 1883), "external modes: broker to connect to"),
    "broker.clientid": Setting(
        p.string(required=True), "hookbridge-1", "external modes: fixed client id (session persists)"
    ),
    "broker.username": Setting(p.parse_str, "", "external modes: username"),
    "broker.password": Setting(p.parse_str, "", "external modes: password", secret=True),
    "broker.ssl": Setting(p.parse_bool, False, "external modes: TLS to the broker"),
    "broker.ssl.cafile": Setting(p.parse_str, "", "CA bundle to verify the broker"),
    "broker.ssl.certfile": Setting(p.parse_str, "", "client certificate"),
    "broker.ssl.keyfile": Setting(p.parse_str, "", "client key"),
    "broker.ssl.verify": Setting(p.parse_bool, True, "verify the broker's certificate"),
    "broker.shared_group": Setting(
        p.string(forbidden="/+#"), "", "subscribe through $share/<group>/<filter>; empty: plain"
    ),
    "broker.receive_maximum": Setting(p.int_in(1, 65535), 1024, "QoS 1 messages in flight to the bridge"),
    "broker.session_expiry": Setting(
        p.duration_in(0, 0xFFFFFFFF),
        7 * 86400.0,
        "external modes: how long the broker keeps the bridge's session",
        example="7d",
    ),
}
