"""What every route module of the API shares: its refusal (ApiError), its JSON answers, the checks
of a value taken from a path or query, and the face of the API a route module uses (ApiFace).

routes.py holds the core routes and wires the route modules beside it (bans.py, keys.py,
sessions.py); those import this module, never routes.py, so the API's modules form no circle.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from bridge.errors import HookbridgeError

if TYPE_CHECKING:
    from bridge.brokers.embedded.broker import Broker

_ID_MAX = 65535  # an MQTT string's longest


class ApiError(HookbridgeError):
    """A request refused with `status` and a message for the caller (routes.py's guard answers it)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def is_sys(topic: str) -> bool:
    return topic == "$SYS" or topic.startswith("$SYS/")


def reply(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(data, ensure_ascii=False) + "\n", status=status, content_type="application/json"
    )


def error(status: int, message: str, **extra: Any) -> web.Response:
    return reply({"error": message, **extra}, status)


def mqtt_string(text: str, what: str) -> str:
    """A query or path value that names what a client chose (a client id, a user name, a cursor
    over them): any character an MQTT string may hold, control characters too, since the broker
    accepts them at CONNECT; U+0000 and lone surrogates never (MQTT-1.5.3-1, -2)."""
    if len(text.encode("utf-8", "surrogatepass")) > _ID_MAX:
        raise ApiError(400, f"{what} is longer than {_ID_MAX} bytes")
    if "\x00" in text:
        raise ApiError(400, f"{what} must not contain U+0000")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        raise ApiError(400, f"{what} is not valid UTF-8")
    return text


def clean(text: str, what: str) -> str:
    """A query or path value without control characters (topics, filters, rule ids), of an MQTT
    string's size at most."""
    mqtt_string(text, what)
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in text):
        raise ApiError(400, f"{what} must not contain control characters")
    return text


class KeyList(Protocol):
    """The API keys as an admin may see them (keys.Keys): name, scope, last use; never a key."""

    def describe(self) -> list[dict[str, Any]]: ...


class ApiFace(Protocol):
    """What a route module asks of the API (routes.Api is the one implementation)."""

    @property
    def max_page(self) -> int: ...

    @property
    def access(self) -> KeyList: ...

    def embedded(self) -> Broker: ...

    async def body(self, request: web.Request) -> dict[str, Any]: ...

    def who(self, request: web.Request) -> str | None: ...

    def changed(self, request: web.Request, what: str, *args: Any) -> None: ...

    def page(self, request: web.Request, items: Iterable[tuple[str, Any]]) -> web.Response: ...
