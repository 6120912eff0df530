"""`hookbridge ctl`'s client of the management API: one call, a paged list followed to its end, and
the one-line error a failed call becomes. ctl.py and its command groups (ctl_bans.py, ctl_keys.py,
ctl_sessions.py) use it; it knows nothing of the command line.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlencode

from bridge.errors import HookbridgeError

PAGE = 1000  # the page size asked for; the API caps it at api.max_page


class CtlError(HookbridgeError):
    """What went wrong, as the one line the command prints."""


# -- talking to the API ------------------------------------------------------------


class Client:
    def __init__(self, url: str, key: str | None, timeout: float, context: ssl.SSLContext | None) -> None:
        self.base = url.rstrip("/") + "/api/v1"
        self.key = key
        self.timeout = timeout
        self.context = context

    def call(self, method: str, path: str, query: dict[str, str] | None = None, body: Any = None) -> Any:
        url = self.base + path + (f"?{urlencode(query)}" if query else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("X-Hookbridge", "ctl")  # without a key, a change needs it (bridge/api/anonymous.py)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.key:
            request.add_header("Authorization", f"Bearer {self.key}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self.context) as answer:
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as error:
            raise CtlError(f"{method} {path}: {error.code} {_reason(error)}") from None
        except urllib.error.URLError as error:
            raise CtlError(f"cannot reach the bridge at {self.base}: {error.reason}") from None
        except (TimeoutError, ConnectionError) as error:
            raise CtlError(f"cannot reach the bridge at {self.base}: {error}") from None
        except ValueError:
            raise CtlError(f"{method} {path}: the answer is not JSON (is {self.base} the bridge's API?)") from None

    def every(self, path: str, query: dict[str, str], limit: int | None) -> list[Any]:
        """Every item of a paged list (at most `limit`), following `next`."""
        items: list[Any] = []
        cursor: str | None = ""
        while cursor is not None and (limit is None or len(items) < limit):
            page = self.call("GET", path, {**query, "limit": str(PAGE), **({"cursor": cursor} if cursor else {})})
            items.extend(page["data"])
            cursor = page.get("next")
        return items if limit is None else items[:limit]


def _reason(error: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(error.read())
    except (ValueError, OSError):
        return str(error.reason)
    return str(body.get("error", error.reason)) if isinstance(body, dict) else str(error.reason)
