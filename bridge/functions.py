"""The function set (docs/rules.md#function-the-built-in-function-set): names, the hookpoints each may
bind to, what each needs.

One table for every backend: the rules loader resolves every `function` here
when the rules load, and each backend supplies an implementation per name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bridge.events import Hookpoint as H


class Capability(StrEnum):
    """What a broker mode can do for the functions (its `ModePlugin.capabilities`)."""

    PROXY_SUBSCRIBE = "proxy-subscribe"  # subscribe a client on its behalf
    DELIVER_TO_SESSION = "deliver-to-session"  # send stored messages to one session


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    name: str
    hookpoints: frozenset[H]
    summary: str
    needs: frozenset[Capability] = frozenset()
    # The implementation this name stands for (aliases such as on_message_fetch).
    canonical: str = ""
    # When the function has anything to do for an event; the engine does not queue
    # the others (a retain function for a message that is not retained).
    applies: Callable[[Any, Any], bool] | None = None  # (event, the Rule): False = nothing to do
    # What the function keeps that is right only when events are applied in the order they
    # happened ("status", "retain", "offsets"); "" when order does not change its result.
    # `check --workers N` warns about these (bridge/workers/checks.py).
    needs_order: str = ""

    @property
    def impl_name(self) -> str:
        return self.canonical or self.name


_ANY = frozenset(H)


def _stored_qos(event: Any, rule: Any) -> bool:
    return bool(event.qos > 0)


def _retained(event: Any, rule: Any) -> bool:
    return bool(event.retain and event.payload)


def _retain_cleared(event: Any, rule: Any) -> bool:
    return bool(event.retain and not event.payload)


def _retain_lookup(event: Any, rule: Any) -> bool:
    return bool(event.is_new and event.send_retained)


def _offline_fetch(event: Any, rule: Any) -> bool:
    # EMQX 4.4 fetched for clean sessions too: the pool's fetch_clean_sessions (rule.offline_opts)
    return bool(event.is_new and event.qos > 0 and (event.persistent or rule.offline_opts.clean_sessions))


_DELIVER = frozenset({Capability.DELIVER_TO_SESSION})


def _spec(name: str, hooks: set[H] | frozenset[H], summary: str, **kw: object) -> FunctionSpec:
    return FunctionSpec(name, frozenset(hooks), summary, **kw)  # type: ignore[arg-type]


FUNCTIONS: dict[str, FunctionSpec] = {
    spec.name: spec
    for spec in (
        _spec(
            "on_client_connected",
            {H.CLIENT_CONNECTED},
            "mark online: state 1, online_at, node; node's list",
            needs_order="status",
        ),
        _spec(
            "on_client_disconnected",
            {H.CLIENT_DISCONNECTED},
            "state 0, offline_at; remove from node's list",
            needs_order="status",
        ),
        _spec(
            "on_subscribe_lookup",
            {H.CLIENT_CONNECTED},
            "subscribe the client to its stored subscriptions (proxy subscription)",
            needs=frozenset({Capability.PROXY_SUBSCRIBE}),
        ),
        _spec(
            "on_message_publish",
            {H.MESSAGE_PUBLISH},
            "store a QoS>0 message (topic list + details)",
            applies=_stored_qos,
        ),
        _spec("on_message_store", {H.MESSAGE_PUBLISH}, "store a message of any QoS, 0 included"),
        _spec(
            "on_message_retain",
            {H.MESSAGE_PUBLISH},
            "retained + non-empty: upsert the topic's retained message",
            applies=_retained,
            needs_order="retain",
        ),
        _spec(
            "on_retain_delete",
            {H.MESSAGE_PUBLISH},
            "retained + empty payload: delete the retained message",
            applies=_retain_cleared,
            needs_order="retain",
        ),
        _spec(
            "on_retain_lookup",
            {H.SESSION_SUBSCRIBED},
            "deliver matching retained messages to the new subscriber",
            needs=_DELIVER,
            applies=_retain_lookup,
        ),
        _spec(
            "on_message_fetch_for_queue",
            {H.SESSION_SUBSCRIBED},
            "one-to-one: deliver the stored messages; an ack deletes them",
            needs=_DELIVER,
            applies=_offline_fetch,
        ),
        _spec(
            "on_message_fetch_for_pubsub",
            {H.SESSION_SUBSCRIBED},
            "one-to-many: deliver what this subscriber has not acked yet",
            needs=_DELIVER,
            applies=_offline_fetch,
        ),
        _spec(
            "on_message_fetch",
            {H.SESSION_SUBSCRIBED},
            "same as on_message_fetch_for_pubsub",
            needs=_DELIVER,
            applies=_offline_fetch,
            canonical="on_message_fetch_for_pubsub",
        ),
        _spec(
            "on_message_acked_for_queue",
            {H.MESSAGE_ACKED},
            "delete the acked message and its list entry",
            needs_order="offsets",  # an ack handled before its message's publish deletes nothing
        ),
        _spec(
            "on_message_acked_for_pubsub",
            {H.MESSAGE_ACKED},
            "advance the subscriber's offset, never backwards",
            needs_order="offsets",  # against on_acked_delete: a late ack brings a dropped offset back
        ),
        _spec(
            "on_message_acked",
            {H.MESSAGE_ACKED},
            "same as on_message_acked_for_pubsub",
            canonical="on_message_acked_for_pubsub",
            needs_order="offsets",
        ),
        _spec("on_acked_delete", {H.SESSION_UNSUBSCRIBED}, "drop the (clientid, topic) offset", needs_order="offsets"),
        _spec("on_event_log", _ANY, "append the event to the append-only event log"),
    )
}

# The fetch functions read `offline_opts`; these options are accepted by them only.
FETCH_FUNCTIONS = frozenset({"on_message_fetch_for_queue", "on_message_fetch_for_pubsub"})
STORE_FUNCTIONS = frozenset({"on_message_publish", "on_message_store"})
