"""`hookbridge ctl sessions del | queue | purge`: remove an offline session, list or purge its
queued (or, with --inflight, in-flight) messages (the API's /sessions/{clientid}...)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from bridge.ops.ctl_client import Client
from bridge.ops.ctl_output import table

MESSAGE_COLUMNS = [
    ("msgid", "msgid"),
    ("topic", "topic"),
    ("qos", "qos"),
    ("bytes", "bytes"),
    ("from_clientid", "from"),
    ("payload", "payload"),
]


def _path(clientid: str, part: str = "") -> str:
    return f"/sessions/{quote(clientid, safe='')}{part}"


def sessions_del(api: Client, args: argparse.Namespace) -> tuple[Any, str]:
    answer = api.call("DELETE", _path(args.clientid))
    return answer, f"removed the session of {answer['removed']}"


def sessions_queue(api: Client, args: argparse.Namespace) -> tuple[Any, str]:
    which = "/inflight" if args.inflight else "/queue"
    found = api.every(_path(args.clientid, which), {}, args.limit)
    columns = [*MESSAGE_COLUMNS, ("packet_id", "packet id")] if args.inflight else MESSAGE_COLUMNS
    return found, table(found, columns, "no messages in flight" if args.inflight else "no queued messages")


def sessions_purge(api: Client, args: argparse.Namespace) -> tuple[Any, str]:
    which = "/inflight" if args.inflight else "/queue"
    answer = api.call("DELETE", _path(args.clientid, which))
    what = "in-flight" if args.inflight else "queued"
    return answer, f"purged {answer['purged']} {what} messages of {answer['clientid']}"


Leaf = Callable[[Any, str, Any, str], argparse.ArgumentParser]


def add_parsers(groups: Any, leaf: Leaf, limit: Callable[[str], int]) -> None:
    sessions = groups.add_parser("sessions", help="sessions: remove, look into").add_subparsers(
        dest="action", required=True
    )
    leaf(sessions, "del", sessions_del, "remove an offline session (queue, subscriptions, durable rows)").add_argument(
        "clientid"
    )
    queue = leaf(sessions, "queue", sessions_queue, "its queued messages (--inflight: those sent, not acked)")
    queue.add_argument("clientid")
    queue.add_argument("--inflight", action="store_true", help="the in-flight messages instead")
    queue.add_argument("--limit", type=limit, help="at most this many")
    purge = leaf(sessions, "purge", sessions_purge, "drop its queued messages (--inflight: in-flight, offline only)")
    purge.add_argument("clientid")
    purge.add_argument("--inflight", action="store_true", help="the in-flight messages instead")
