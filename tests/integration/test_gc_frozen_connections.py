"""Connections open when the process froze its objects (bridge/ops/gcfreeze.py), closed after:
nothing of them may be left in a reference cycle, which a frozen object never leaves (only a
`gc.thaw_interval` collection would free it). Plain sockets on the client side: an asyncio client
in this process would bring transports of its own (asyncio's client transports do form cycles)."""

from __future__ import annotations

import asyncio
import gc
import socket
from collections import Counter

from bridge.brokers.embedded.codec import encode
from bridge.brokers.embedded.codec.packets import MQTT_3_1_1, Connect
from bridge.brokers.embedded.source import EmbeddedBroker
from support.bridges import BridgeFactory, mqtt_port

CONNECTIONS = 60
# What a connection is made of: the transport and its socket, the broker's own objects. Other
# garbage in cycles (a traceback somewhere in the process) is not this test's.
CONNECTION_TYPES = frozenset({"_SelectorSocketTransport", "TransportSocket", "socket", "method"})


def _of_a_connection(thing: object) -> bool:
    kind = type(thing)
    if kind.__name__ == "method":
        return type(getattr(thing, "__self__", None)).__name__ in CONNECTION_TYPES or _of_a_connection(
            getattr(thing, "__self__", None)
        )
    return kind.__name__ in CONNECTION_TYPES or kind.__module__.startswith("bridge.")


async def test_connections_closed_after_a_freeze_leave_no_cycles(make_bridge: BridgeFactory) -> None:
    bridge = await make_bridge(rules="", pools="")
    source = bridge.broker
    assert isinstance(source, EmbeddedBroker) and source.core is not None
    core = source.core
    sockets = []
    for n in range(CONNECTIONS):
        client = socket.create_connection(("127.0.0.1", mqtt_port(bridge)))
        client.sendall(encode(Connect(f"frozen-{n}", clean_start=n % 2 == 0), MQTT_3_1_1))
        sockets.append(client)
    for _ in range(400):
        if len(core.active) == CONNECTIONS:
            break
        await asyncio.sleep(0.05)
    assert len(core.active) == CONNECTIONS
    gc.collect()
    gc.freeze()
    try:
        for client in sockets:
            client.close()
        for _ in range(400):
            if not core.active:
                break
            await asyncio.sleep(0.05)
        assert not core.active
        await bridge.idle()
        await asyncio.sleep(0)  # the transports' own close callbacks
    finally:
        gc.unfreeze()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        left = Counter(type(thing).__name__ for thing in gc.garbage if _of_a_connection(thing))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert left == Counter(), left.most_common(10)
