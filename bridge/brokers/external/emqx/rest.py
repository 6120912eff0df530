"""EMQX's REST API: the one call the bridge makes, a proxy subscription.

v5 (EMQX 5): `POST /api/v5/clients/{clientid}/subscribe` with `{"topic", "qos"}`, HTTP Basic
auth with an API key and secret (EMQX 5's API keys). 404 means the client is not connected
(EMQX only subscribes live sessions), which is an answer, not an error.
v4 (EMQX 4.4): `POST /api/v4/mqtt/subscribe` with `{"clientid", "topic", "qos"}`, HTTP Basic auth
with an application's AppID and AppSecret; it answers 200 with `{"code": 0}` when done and another
`code` (with a `message`) when the client is not connected.
Connection errors, 5xx and 429 are retried with a capped backoff.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from urllib.parse import quote

import aiohttp

from bridge.errors import HookbridgeError

log = logging.getLogger("bridge.brokers.external.emqx")


class EmqxApiError(HookbridgeError):
    """The call failed: refused for a reason retrying cannot fix (bad key, bad request), or still
    failing after the retries."""


async def _v4_done(response: aiohttp.ClientResponse, clientid: str) -> bool:
    """EMQX 4.4 answers 200 either way: `code` 0 is done, another the client is not there."""
    try:
        answer = await response.json(content_type=None)
    except ValueError:
        return True
    code = answer.get("code", 0) if isinstance(answer, dict) else 0
    if code != 0:
        log.info("EMQX API v4: not subscribing %r (code %s: %s)", clientid, code, answer.get("message"))
    return bool(code == 0)


class EmqxApi:
    def __init__(
        self,
        base_url: str,
        key: str,
        secret: str,
        *,
        attempts: int = 4,
        backoff: float = 0.2,
        timeout: float = 10.0,
        version: str = "v5",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.version = version
        # HTTP Basic with key:secret, built here (aiohttp.BasicAuth is deprecated in 3.14+)
        token = base64.b64encode(f"{key}:{secret}".encode()).decode()
        self._headers = {"Authorization": f"Basic {token}"}
        self._attempts = max(1, attempts)
        self._backoff = backoff
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def subscribe(self, clientid: str, topic: str, qos: int) -> bool:
        """Subscribe a connected client. Returns False when EMQX says the client is not connected (404)."""
        if self.version == "v4":
            url = f"{self.base_url}/api/v4/mqtt/subscribe"
            body: dict[str, object] = {"clientid": clientid, "topic": topic, "qos": qos}
        else:
            url = f"{self.base_url}/api/v5/clients/{quote(clientid, safe='')}/subscribe"
            body = {"topic": topic, "qos": qos}
        if self._session is None:
            self._session = aiohttp.ClientSession(headers=self._headers, timeout=self._timeout)
        delay = self._backoff
        for attempt in range(1, self._attempts + 1):
            try:
                async with self._session.post(url, json=body) as response:
                    if response.status == 404:
                        return False
                    if response.status < 300:
                        return self.version != "v4" or await _v4_done(response, clientid)
                    text = (await response.text())[:200]
                    if response.status < 500 and response.status != 429:
                        raise EmqxApiError(f"EMQX API {response.status} subscribing {clientid!r} to {topic!r}: {text}")
                    problem = f"HTTP {response.status}: {text}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                problem = str(exc) or type(exc).__name__
            if attempt == self._attempts:
                # Not a ConnectionError: a backend could take that for its own database being down and
                # retry the whole batch forever; this action has failed (counted, logged), others go on.
                raise EmqxApiError(f"EMQX API at {self.base_url} failed {attempt} times: {problem}")
            log.warning("EMQX API: %s; retry %d in %.1f s", problem, attempt, delay)
            await asyncio.sleep(delay)
            delay = min(5.0, delay * 2)
        raise AssertionError("unreachable")
