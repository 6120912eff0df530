"""Drive headless Chromium (Debian `chromium`) over the DevTools protocol, with aiohttp's
WebSocket client: load a page, run JavaScript in it, take a screenshot. Chromium is started with
the flags tests/reports/browser.py uses on this machine; the page's console errors and uncaught
exceptions are collected (`errors`)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from reports.browser import FLAGS, chromium

TIMEOUT = 30.0


class Page:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.errors: list[str] = []
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for frame in self.ws:
            message = json.loads(frame.data)
            if "id" in message:
                future = self.waiting.pop(message["id"], None)
                if future is not None and not future.done():
                    if "error" in message:
                        future.set_exception(RuntimeError(f"CDP: {message['error']}"))
                    else:
                        future.set_result(message.get("result", {}))
            elif message.get("method") == "Runtime.exceptionThrown":
                self.errors.append(json.dumps(message["params"]["exceptionDetails"])[:500])
            elif message.get("method") == "Runtime.consoleAPICalled" and message["params"]["type"] == "error":
                self.errors.append(json.dumps(message["params"]["args"])[:500])

    async def send(self, method: str, **params: Any) -> Any:
        number = next(self.ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting[number] = future
        await self.ws.send_json({"id": number, "method": method, "params": params})
        async with asyncio.timeout(TIMEOUT):
            return await future

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"in the page: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def until(self, expression: str, timeout: float = TIMEOUT) -> Any:
        """Wait until a JavaScript expression is truthy in the page; its value."""
        async with asyncio.timeout(timeout):
            for _ in itertools.count():
                value = await self.evaluate(expression)
                if value:
                    return value
                await asyncio.sleep(0.1)  # the page changes on its own: polled, as a person would look
        raise AssertionError("unreachable")

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", url=url)
        await self.until("document.readyState === 'complete'")

    async def screenshot(self, target: Path) -> None:
        size = await self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
        shot = await self.send(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1},
        )
        await asyncio.to_thread(target.write_bytes, base64.b64decode(shot["data"]))


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def _devtools_port(active: Path) -> int:
    """The port Chromium writes to DevToolsActivePort in its profile once it listens."""
    async with asyncio.timeout(TIMEOUT):
        for _ in itertools.count():
            lines = await asyncio.to_thread(_lines, active)
            if len(lines) >= 2:
                return int(lines[0])
            await asyncio.sleep(0.05)
    raise AssertionError("unreachable")


@contextlib.asynccontextmanager
async def browser(width: int = 1280, height: int = 900) -> AsyncIterator[Page]:
    """A headless Chromium with one page, closed at the end."""
    binary = chromium()
    assert binary, "chromium is not installed (scripts/test.sh installs the Debian package)"
    # Chromium's helper processes may still write to the profile as it goes: cleaned up as far as it can be
    with tempfile.TemporaryDirectory(prefix="chromium-", ignore_cleanup_errors=True) as profile:
        process = await asyncio.create_subprocess_exec(
            binary,
            *FLAGS,
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            "--remote-allow-origins=*",
            f"--window-size={width},{height}",
            "--hide-scrollbars",
            "about:blank",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            active = Path(profile) / "DevToolsActivePort"
            port = await _devtools_port(active)
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{port}/json/list") as answer:
                    targets = await answer.json()
                target = next(t for t in targets if t["type"] == "page")
                async with session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                    page = Page(ws)
                    await page.send("Page.enable")
                    await page.send("Runtime.enable")
                    try:
                        yield page
                    finally:
                        with contextlib.suppress(Exception):  # closed with its helpers, as a person closes it
                            await asyncio.wait_for(page.send("Browser.close"), 5)
                        page.reader.cancel()
        finally:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 5)
            if process.returncode is None:
                process.kill()
            await process.wait()
