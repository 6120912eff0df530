"""`broker.mode = embedded` declared as a plug-in (the `hookbridge.modes` entry point)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from bridge.brokers.base import BrokerSource
from bridge.brokers.embedded.settings import SETTINGS
from bridge.conf.errors import ConfError, Position
from bridge.conf.registry import ModePlugin
from bridge.functions import Capability

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
    config_check="bridge.brokers.embedded.mode:config_problems",
    settings=SETTINGS,
)


def config_problems(path: str, settings: dict[str, Any], values_at: dict[str, Position]) -> list[ConfError]:
    """The ACL file, then the listeners, read as `run` reads them, so `check` refuses what `run` would."""
    from bridge.brokers.embedded.auth.aclsource import acl_problems

    errors = acl_problems(path, settings, values_at)
    return errors or _listener_errors(path, settings, values_at)


def _listener_errors(path: str, settings: dict[str, Any], values_at: dict[str, Position]) -> list[ConfError]:
    """Listeners `run` could not open or should not open as set; `broker.allow_anonymous` gets
    its default (on only if every listener is on loopback)."""
    from bridge.brokers.embedded.listeners import anonymous_default, listener_problems  # loads the broker

    errors = [
        ConfError(values_at.get(key) or values_at.get(key.rpartition(".")[0]) or Position(path, 1, 1), message)
        for key, message in listener_problems(settings)
    ]
    if settings["broker.allow_anonymous"] is None:
        settings["broker.allow_anonymous"] = anonymous_default(settings)
    return errors


def make_source(config: Config, rules: list[Rule], msgids: MsgIdGenerator) -> BrokerSource:
    """The embedded broker as the config sets it up: listeners, limits, users, durable sessions."""
    from bridge.brokers.embedded.auth import make_gate, takeover_of
    from bridge.brokers.embedded.limits import Limits
    from bridge.brokers.embedded.listeners import configured
    from bridge.brokers.embedded.openfiles import connections_for
    from bridge.brokers.embedded.source import EmbeddedBroker

    host, port = config["broker.listener.tcp"]
    return EmbeddedBroker(
        f"{host}:{port}",
        node=config["node.name"],
        msgids=msgids,
        limits=replace(Limits.from_config(config), max_connections=connections_for(config)),
        gate=make_gate(config),
        takeover=takeover_of(config),
        listeners=[listener for listener in configured(config.settings) if listener.name != "tcp"],
        durable_dir=config["broker.durable_dir"] if config["broker.durable_sessions"] else None,
        durable_commit_interval=config["broker.durable_commit_interval"],
        durable_preload=min(config["broker.durable_preload"], config["broker.max_queued_bytes"] // 2),
        durable_min_free=config["broker.durable_min_free"],
        sys_interval=config["broker.sys_interval"],
        bans_file=config["broker.bans_file"] or None,
        tcp_transport=config["broker.listener.tcp.transport"],
    )
