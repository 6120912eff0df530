"""One misbehaving MQTT client, run as its own process: it connects and then sends one packet
type as fast as its socket takes it, reading what the broker answers or never reading it.

    python -m bench.flooder PORT KIND read|noread [--level 4|5] [--connections N]

KIND is one of `PACKETS` (the control packets a client may send after CONNECT), or `password`:
CONNECTs with a wrong password, one per connection, as fast as the broker answers them. A
flooder whose connection the broker closes (an AUTH is refused, for one) connects again and
goes on. It runs until it is killed. A separate process, so that the broker under test, in the
test's event loop, is not the one producing the flood (tests/integration/test_broker_fair_share.py,
bench/one_bad_client.py).
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import threading

from bridge.brokers.embedded.codec import (
    MQTT_5,
    Auth,
    Connect,
    Packet,
    Pingreq,
    Pubcomp,
    Pubrec,
    Pubrel,
    Subscribe,
    Subscription,
    Unsubscribe,
    encode,
)

# What each flood repeats. Packet id 1 is never in flight: the broker answers PUBREC with a
# PUBREL and PUBREL with a PUBCOMP all the same ("packet identifier not found" in 5.0).
PACKETS: dict[str, Packet] = {
    "pingreq": Pingreq(),
    "pubrec": Pubrec(1),
    "pubrel": Pubrel(1),
    "pubcomp": Pubcomp(1),
    "subscribe": Subscribe(1, [Subscription("flood/#", 0)]),
    "unsubscribe": Unsubscribe(1, ["flood/#"]),
    "auth": Auth(),
}
BURST = 64 << 10  # bytes handed to the socket per send


def drain(sock: socket.socket) -> None:
    """Read and drop what the broker sends, until the connection ends."""
    try:
        while sock.recv(1 << 16):
            pass
    except OSError:
        pass


def open_connection(
    port: int, client_id: str, level: int, password: bytes | None, read: bool, username: str = "flooder"
) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    user = username if password is not None else None
    sock.sendall(encode(Connect(client_id, level, True, 0, user, password), level))
    if password is None:
        sock.recv(64)  # the CONNACK: the flood starts once the session exists
    if read:
        threading.Thread(target=drain, args=(sock,), daemon=True).start()
    return sock


def flood_packets(port: int, kind: str, level: int, read: bool) -> None:
    packet = PACKETS[kind]
    if kind == "auth":
        level = MQTT_5  # AUTH exists only in 5.0
    one = encode(packet, level)
    burst = one * max(1, BURST // len(one))
    round_ = 0
    while True:
        round_ += 1
        sock = open_connection(port, f"flood-{kind}-{threading.get_ident()}-{round_}", level, None, read)
        try:
            while True:
                sock.sendall(burst)
        except OSError:
            sock.close()  # closed by the broker: connect again


def flood_passwords(port: int, level: int, read: bool, username: str) -> None:
    """Wrong passwords, one CONNECT per connection, each connection closed once answered (or,
    not reading, left open: the broker's connect timeout and its per-address queue bound it)."""
    round_ = 0
    held: list[socket.socket] = []
    while True:
        round_ += 1
        try:
            sock = open_connection(
                port, f"flood-password-{threading.get_ident()}-{round_}", level, b"wrong", False, username
            )
        except OSError:
            continue
        if read:
            with contextlib.suppress(OSError):
                sock.recv(16)  # the CONNACK refusing it
            sock.close()
        else:
            held.append(sock)
            if len(held) > 200:
                held.pop(0).close()


def in_threads(count: int, target: object, *args: object) -> None:
    """`count` flooders at once, each in its own thread (they wait on sockets, not the GIL)."""
    threads = [threading.Thread(target=target, args=args, daemon=True) for _ in range(count)]  # type: ignore[arg-type]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("port", type=int)
    parser.add_argument("kind", choices=[*PACKETS, "password"])
    parser.add_argument("reading", choices=["read", "noread"])
    parser.add_argument("--level", type=int, default=4, choices=[4, 5])
    parser.add_argument("--connections", type=int, default=1, help="flooders at once, each its own connection")
    parser.add_argument("--username", default="flooder", help="the user whose password the password flood gets wrong")
    args = parser.parse_args()
    read = args.reading == "read"
    if args.kind == "password":
        in_threads(args.connections, flood_passwords, args.port, args.level, read, args.username)
    else:
        in_threads(args.connections, flood_packets, args.port, args.kind, args.level, read)


if __name__ == "__main__":
    main()
