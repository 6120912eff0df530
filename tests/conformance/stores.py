"""What each backend supplies to the conformance suite: its pool config and how to read its data back.

The suite runs the same rules (`rules_for(db)`) and the same assertions on every backend;
a store only translates "what is stored" into plain Python values. Each installed backend
(bridge/conf/registry.py) has its store in `conformance/<db>_store.py`, as `STORE`; conftest.py
runs every test once per installed backend, so a backend without one fails the suite.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

START = "start"  # an offset "before everything"


@dataclass(frozen=True)
class Stored:
    msgid: str
    sender: str
    topic: str
    qos: int
    payload: bytes
    retain: bool


class Store(abc.ABC):
    db: str
    port: int

    @classmethod
    @abc.abstractmethod
    def serve(cls) -> int:
        """Start the suite's server for this backend, once per session; its port."""

    @abc.abstractmethod
    def pool_config(self) -> str: ...

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and empty the database (a fresh one per test)."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def client(self, clientid: str) -> dict[str, Any] | None:
        """{"state": 0|1, "online": bool(online_at set), "offline": bool(offline_at set), "node": str}"""

    @abc.abstractmethod
    async def messages(self, topic: str) -> list[Stored]:
        """The topic's stored messages in stored (fetch) order."""

    @abc.abstractmethod
    async def live_payloads(self, topic: str) -> list[bytes]:
        """The payloads of the topic's stored messages that have not expired (what a fetch may still
        deliver), in stored order."""

    @abc.abstractmethod
    async def message_count(self) -> int: ...

    @abc.abstractmethod
    async def retained(self, topic: str) -> str | None:
        """The msgid of the topic's retained message."""

    @abc.abstractmethod
    async def offset(self, clientid: str, topic_filter: str) -> str | None:
        """The last acked msgid of a pubsub subscription, START, or None when there is none."""

    @abc.abstractmethod
    async def set_offset_start(self, clientid: str, topic_filter: str) -> None: ...

    @abc.abstractmethod
    async def add_subscription(self, clientid: str, topic: str, qos: int) -> None:
        """What an application does to give a client a proxy subscription."""

    @abc.abstractmethod
    def stop_server(self) -> None: ...

    @abc.abstractmethod
    def start_server(self) -> None: ...


def rules_for(
    db: str, extra: str = "", max_returned_count: int = 100, expired_time: int | None = None, time_range: str = ""
) -> str:
    """The same rule set on any backend: every function of docs/rules.md#function-the-built-in-function-set."""
    expiry = f', "expired_time": {expired_time}' if expired_time else ""
    window = f', "time_range": "{time_range}"' if time_range else ""
    lines = [
        ("client.connected.1", "", "on_client_connected", ""),
        ("client.connected.2", "", "on_subscribe_lookup", ""),
        ("client.disconnected.1", "", "on_client_disconnected", ""),
        ("message.publish.1", "#", "on_message_publish", expiry),
        ("message.publish.2", "#", "on_message_retain", ""),
        ("message.publish.3", "#", "on_retain_delete", ""),
        (
            "session.subscribed.1",
            "queue/#",
            "on_message_fetch_for_queue",
            f', "offline_opts": {{"max_returned_count": {max_returned_count}{window}}}',
        ),
        (
            "session.subscribed.2",
            "pubsub/#",
            "on_message_fetch",
            f', "offline_opts": {{"max_returned_count": {max_returned_count}{window}}}',
        ),
        ("session.subscribed.3", "#", "on_retain_lookup", ""),
        ("message.acked.1", "queue/#", "on_message_acked_for_queue", ""),
        ("message.acked.2", "pubsub/#", "on_message_acked", ""),
        ("session.unsubscribed.1", "pubsub/#", "on_acked_delete", ""),
    ]
    text = ""
    for hook, topic, function, options in lines:
        topic_json = f'"topic": "{topic}", ' if topic else ""
        text += f'backend.{db}.hook.{hook} = {{{topic_json}"action": {{"function": "{function}"}}{options}}}\n'
    return text + extra
