"""The private channel between the supervisor and one worker: a Unix socket pair, one JSON line each way.

The supervisor asks `<number> metrics` (every family, as bridge.ops.metrics.Family data) or
`<number> health` (the worker's /healthz answer); the worker answers with one JSON line
`{"id": <number>, "answer": ...}`. The number lets the supervisor skip a late answer to a question
it stopped waiting for (a worker busy for longer than ASK_TIMEOUT) instead of taking it for the
answer to the next one. Nothing listens on a network
address: the socket pair exists only between the two processes. The end of the channel is also
how a worker learns its supervisor is gone (end of file: it stops, draining what it holds).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from bridge.ops.metrics import Family, Sample

log = logging.getLogger(__name__)

_LINE_LIMIT = 64 << 20  # one metrics answer; thousands of rules stay far below this
ASK_TIMEOUT = 2.0  # well inside the status server's 5 s for a whole request


def families_to_json(families: list[Family]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(family) for family in families]


def families_from_json(data: list[dict[str, Any]]) -> list[Family]:
    return [
        Family(
            name=item["name"],
            kind=item["kind"],
            help_text=item["help_text"],
            merge=item["merge"],
            samples=[Sample(s["name"], dict(s["labels"]), s["value"]) for s in item["samples"]],
        )
        for item in data
    ]


async def answer_supervisor(
    sock: socket.socket,
    families: Callable[[], Awaitable[list[Family]]],
    health: Callable[[], tuple[bool, dict[str, Any]]],
) -> None:
    """Worker side: answer until the supervisor closes its end (or dies), then return."""
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    try:
        while line := await reader.readline():
            number, _, request = line.decode("ascii", "replace").strip().partition(" ")
            if request == "metrics":
                answer: Any = families_to_json(await families())
            elif request == "health":
                ready, detail = health()
                answer = {"ready": ready, "detail": detail}
            else:
                answer = {"error": f"unknown request {request!r}"}
            writer.write(json.dumps({"id": number, "answer": answer}).encode() + b"\n")
            await writer.drain()
    except ConnectionError:
        pass  # the supervisor is gone: same as end of file
    finally:
        writer.close()


class SupervisorEnd:
    """Supervisor side of one worker's channel: one question at a time, each with a deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = asyncio.Lock()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._closed = False
        self._asked = 0

    async def ask(self, request: str) -> Any:
        """The worker's answer; raises OSError / TimeoutError when it cannot give one."""
        async with self._lock:
            if self._closed:
                raise ConnectionResetError("the channel to this worker is closed")
            if self._writer is None:
                self._reader, self._writer = await asyncio.open_unix_connection(sock=self._sock, limit=_LINE_LIMIT)
            assert self._reader is not None
            self._asked += 1
            number = str(self._asked)
            async with asyncio.timeout(ASK_TIMEOUT):
                self._writer.write(f"{number} {request}\n".encode())
                await self._writer.drain()
                while True:  # answers to questions given up on come first: skip them
                    line = await self._reader.readline()
                    if not line:
                        raise ConnectionResetError("the worker closed its channel")
                    reply = json.loads(line)
                    if reply.get("id") == number:
                        return reply["answer"]

    def close(self) -> None:
        self._closed = True
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        else:
            self._sock.close()
