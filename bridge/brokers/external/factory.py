"""Build the `mqtt` or `emqx` source from the config and the rules."""

from __future__ import annotations

from bridge.brokers.base import BrokerSource
from bridge.brokers.external.emqx.rest import EmqxApi
from bridge.brokers.external.emqx.source import EmqxSource
from bridge.brokers.external.mqtt.filters import subscription_filters
from bridge.brokers.external.mqtt.source import MqttSource, Upstream
from bridge.conf.config import Config
from bridge.conf.tls import settings_context
from bridge.events import Hookpoint
from bridge.msgid import MsgIdGenerator
from bridge.rules import Rule

_CLIENT_HOOKS = {
    Hookpoint.CLIENT_CONNECTED,
    Hookpoint.CLIENT_DISCONNECTED,
    Hookpoint.SESSION_SUBSCRIBED,
    Hookpoint.SESSION_UNSUBSCRIBED,
}


def message_filters(rules: list[Rule]) -> list[str]:
    """What to subscribe to for the message.publish rules (nothing when there are none)."""
    wanted: list[str | None] = []
    for rule in rules:
        if rule.hookpoint is Hookpoint.MESSAGE_PUBLISH:
            wanted.extend(rule.topics if rule.topics is not None else [None])
    return subscription_filters(wanted) if wanted else []


def make_external_source(config: Config, rules: list[Rule], msgids: MsgIdGenerator) -> BrokerSource:
    host, port = config["broker.server"]
    tls = settings_context(config.settings, "broker.")
    upstream = Upstream(
        host=host,
        port=port,
        clientid=config["broker.clientid"],
        username=config["broker.username"],
        password=config["broker.password"],
        tls=tls,
        shared_group=config["broker.shared_group"],
        receive_maximum=max(1, min(65535, config["broker.receive_maximum"])),
        session_expiry=int(config["broker.session_expiry"]),
        state_dir=config["spool.dir"],
    )
    filters = message_filters(rules)
    node = config["node.name"]
    if config["broker.mode"] == "emqx":
        api = EmqxApi(
            config["broker.emqx.api"],
            config["broker.emqx.api_key"],
            config["broker.emqx.api_secret"],
            version=config["broker.emqx.api_version"],
        )
        return EmqxSource(
            upstream,
            node=node,
            msgids=msgids,
            message_filters=filters,
            client_events=config.worker == 0,
            api=api,
            event_topic=config["broker.emqx.event_topic"],
        )
    # With `run --workers N` only worker 0 subscribes to the client and session events, so that
    # one process applies them in the order the broker sent them; the others take messages only.
    client_events = config.worker == 0 and any(rule.hookpoint in _CLIENT_HOOKS for rule in rules)
    return MqttSource(upstream, node=node, msgids=msgids, message_filters=filters, client_events=client_events)
