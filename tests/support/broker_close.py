"""Reading the broker's close of a connection a client library has already let go of.

paho closes its socket as soon as it has written DISCONNECT, before the broker has read it. A
test that reads a stored client state next must wait until the broker has ended the session, i.e.
closed its end of the connection: a second descriptor of the socket (`watch_for_close`) keeps the
connection open on our side so that close can be read (`until_closed_by_broker`)."""

from __future__ import annotations

import asyncio
import socket
import ssl


def watch_for_close(sock: object) -> socket.socket | None:
    """A second descriptor of the client's socket, to read the broker's close through; None for a
    WebSocket or TLS client (neither can be duplicated): nothing to watch."""
    if not isinstance(sock, socket.socket) or isinstance(sock, ssl.SSLSocket):
        return None
    watch = sock.dup()
    watch.setblocking(False)
    return watch


async def until_closed_by_broker(sock: socket.socket, what: str, timeout: float = 10.0) -> None:
    """Read (and drop) what the broker still sends until it closes the connection, then close
    `sock`. A reset counts as closed."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout):
            while await loop.sock_recv(sock, 65536):
                pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}") from None
    finally:
        sock.close()
