"""Client events from Mosquitto's log lines, published on `$SYS/broker/log/...`.

Mosquitto has no event hooks an outside process can subscribe to, but with
`log_dest topic` it publishes each log line as a message: `notice` lines on
`$SYS/broker/log/N`, subscription lines on `$SYS/broker/log/M/subscribe` and
`.../M/unsubscribe`. The formats below are Mosquitto 2.0.x's (verified on
2.0.11, docs/brokers.md); a line that matches none of them is ignored.
With `log_timestamp true` (the default) each line starts with `<unix seconds>: `.
"""

from __future__ import annotations

import re
import time
from typing import NamedTuple

from bridge.brokers.external.clientids import same_bridge
from bridge.events import (
    DEFAULT_PROTO_VER,
    ClientConnected,
    ClientDisconnected,
    Event,
    SessionSubscribed,
    SessionUnsubscribed,
)

LOG_TOPICS = ("$SYS/broker/log/N", "$SYS/broker/log/M/subscribe", "$SYS/broker/log/M/unsubscribe")

_STAMP = re.compile(r"^(?:(\d+): )?(.*)$", re.S)
# "New client connected from 127.0.0.1:55958 as subx (p5, c0, k60, u'alice')."
_CONNECTED = re.compile(r"^New client connected from (\S+) as (.*) \(p(\d+), c([01]), k(\d+)(?:, u'(.*)')?\)\.$", re.S)
# Every way a 2.0 session's connection ends, and the reason hookbridge reports for it.
_DISCONNECTED = (
    (re.compile(r"^Client (.*) disconnected\.$", re.S), "normal"),
    (re.compile(r"^Client (.*) closed its connection\.$", re.S), "closed"),
    (re.compile(r"^Client (.*) has exceeded timeout, disconnecting\.$", re.S), "keepalive_timeout"),
    (re.compile(r"^Socket error on client (.*), disconnecting\.$", re.S), "socket_error"),
    (re.compile(r"^Client (.*) disconnected due to protocol error\.$", re.S), "protocol_error"),
    (re.compile(r"^Client (.*) disconnected, not authorised\.$", re.S), "not_authorized"),
    (re.compile(r"^Client (.*) already connected, closing old connection\.$", re.S), "takenover"),
)
# The `p` of a connect line is Mosquitto's protocol enum (1 MQTT 3.1, 2 3.1.1, 5 5.0), checked
# on 2.0.11 with mosquitto_pub -V mqttv31 / mqttv311 / mqttv5; hookbridge reports MQTT's levels.
_PROTO_VER = {"1": 3, "2": 4, "5": 5}
# "subx 1 a/#" (client id, requested QoS, filter) and "subx a/#": client ids without spaces.
_SUBSCRIBE = re.compile(r"^(\S+) ([0-2]) (.+)$", re.S)
_UNSUBSCRIBE = re.compile(r"^(\S+) (.+)$", re.S)


class _Client(NamedTuple):
    """What a connect line told about a client, for the events of its later lines."""

    username: str | None = None
    peername: str = ""
    clean: bool = True
    proto_ver: int = DEFAULT_PROTO_VER


class MosquittoLog:
    """Turns log lines into events. Remembers each client's username, clean flag and protocol
    level from its connect line."""

    def __init__(self, node: str, ignore_clientid: str) -> None:
        self.node = node
        self.ignore = ignore_clientid  # the bridge's own session: not an application client
        self._clients: dict[str, _Client] = {}

    def _own(self, clientid: str) -> bool:
        """The bridge's session, or another worker's of the same bridge (`run --workers N`)."""
        return same_bridge(self.ignore, clientid)

    def parse(self, topic: str, payload: bytes) -> Event | None:
        text = payload.decode("utf-8", "replace").rstrip("\n")
        stamp, line = _STAMP.match(text).groups()  # type: ignore[union-attr]  # the pattern matches any text
        ts = float(stamp) if stamp else time.time()
        if topic.endswith("/M/subscribe"):
            return self._subscribed(line, ts)
        if topic.endswith("/M/unsubscribe"):
            m = _UNSUBSCRIBE.match(line)
            if m is None or self._own(m[1]):
                return None
            client = self._clients.get(m[1], _Client())
            return SessionUnsubscribed(m[1], client.username, self.node, m[2], ts, proto_ver=client.proto_ver)
        return self._notice(line, ts)

    def _notice(self, line: str, ts: float) -> Event | None:
        m = _CONNECTED.match(line)
        if m is not None:
            peer, clientid, proto, clean, _keepalive, username = m.groups()
            if self._own(clientid):
                return None
            client = _Client(username, peer, clean == "1", _PROTO_VER.get(proto, DEFAULT_PROTO_VER))
            self._clients[clientid] = client
            return ClientConnected(
                clientid, username, self.node, peer, ts, clean_session=client.clean, proto_ver=client.proto_ver
            )
        for pattern, reason in _DISCONNECTED:
            m = pattern.match(line)
            if m is not None and not self._own(m[1]):
                client = self._clients.pop(m[1], _Client())
                return ClientDisconnected(
                    m[1], client.username, self.node, client.peername, reason, ts, proto_ver=client.proto_ver
                )
        return None

    def _subscribed(self, line: str, ts: float) -> Event | None:
        m = _SUBSCRIBE.match(line)
        if m is None or self._own(m[1]):
            return None
        client = self._clients.get(m[1], _Client())
        # Mosquitto's line does not say whether the subscription already existed: report it as new.
        return SessionSubscribed(
            m[1],
            client.username,
            self.node,
            m[3],
            int(m[2]),
            ts,
            persistent=not client.clean,
            proto_ver=client.proto_ver,
        )
