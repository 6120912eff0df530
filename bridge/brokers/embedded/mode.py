"""`broker.mode = embedded` declared as a plug-in (the `hookbridge.modes` entry point)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.brokers.base import BrokerSource, Capability
from bridge.registry import ModePlugin

if TYPE_CHECKING:
    from bridge.conf.config import Config
    from bridge.msgid import MsgIdGenerator
    from bridge.rules import Rule

MODE = ModePlugin(
    name="embedded",
    summary="embedded broker",
    # every hookpoint fires in-process: a client can be subscribed, and one session delivered to
    capabilities=frozenset({Capability.PROXY_SUBSCRIBE, Capability.DELIVER_TO_SESSION}),
    source="bridge.brokers.embedded.mode:make_source",
)


def make_source(config: Config, rules: list[Rule], msgids: MsgIdGenerator) -> BrokerSource:
    """The embedded broker as the config sets it up: listeners, limits, users, durable sessions."""
    from bridge.brokers.embedded.auth import make_gate, takeover_of
    from bridge.brokers.embedded.limits import Limits
    from bridge.brokers.embedded.listeners import configured
    from bridge.brokers.embedded.source import EmbeddedBroker

    host, port = config["broker.listener.tcp"]
    return EmbeddedBroker(
        f"{host}:{port}",
        node=config["node.name"],
        msgids=msgids,
        limits=Limits.from_config(config),
        gate=make_gate(config),
        takeover=takeover_of(config),
        listeners=[listener for listener in configured(config.settings) if listener.name != "tcp"],
        durable_dir=config["broker.durable_dir"] if config["broker.durable_sessions"] else None,
    )
