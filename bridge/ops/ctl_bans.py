"""`hookbridge ctl bans list | add | del`: the banned list (the API's /bans) from the command line."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from bridge.conf.parsers import duration_in
from bridge.ops.ctl_client import Client
from bridge.ops.ctl_output import table, when

KINDS = ("clientid", "username", "address")
BAN_COLUMNS = [("as", "as"), ("who", "who"), ("until", "until"), ("by", "by"), ("reason", "reason")]
_parse_duration = duration_in(1, 100 * 365 * 86400)


def bans_list(api: Client, args: argparse.Namespace) -> tuple[Any, str]:
    found = api.every("/bans", {}, args.limit)
    rows = [{**ban, "until": when(ban.get("until"))} for ban in found]
    return found, table(rows, BAN_COLUMNS, "no bans")


def bans_add(api: Client, args: argparse.Namespace) -> tuple[Any, str]:
    body: dict[str, Any] = {"as": args.kind, "who": args.who, "reason": args.reason}
    if args.duration is not None:
        body["duration"] = args.duration
    answer = api.call("POST", "/bans", body=body)
    kicked = answer.get("kicked") or []
    closed = f"; closed {', '.join(kicked)}" if kicked else ""
    return answer, f"banned {answer['as']} {answer['who']} until {when(answer.get('until'))}{closed}"


def bans_del(api: Client, args: argparse.Namespace) -> tuple[Any, str]:
    answer = api.call("DELETE", f"/bans/{args.kind}/{quote(args.who, safe='/')}")
    lifted = answer["lifted"]
    return answer, f"lifted the ban on {lifted['as']} {lifted['who']}"


def _duration(text: str) -> float:
    try:
        return _parse_duration(text)
    except ValueError as bad:
        raise argparse.ArgumentTypeError(f"{text!r}: {bad}") from None


Leaf = Callable[[Any, str, Any, str], argparse.ArgumentParser]


def add_parsers(groups: Any, leaf: Leaf, limit: Callable[[str], int]) -> None:
    bans = groups.add_parser("bans", help="who may not connect").add_subparsers(dest="action", required=True)
    leaf(bans, "list", bans_list, "the bans in force").add_argument("--limit", type=limit, help="at most this many")
    add = leaf(bans, "add", bans_add, "ban a client id, a user name or an address (CIDR); its clients are closed")
    add.add_argument("kind", choices=KINDS)
    add.add_argument("who", help="the client id, user name, or address / network (10.0.0.0/8)")
    add.add_argument("--for", dest="duration", type=_duration, help="how long (30m, 2h, 7d); default: for ever")
    add.add_argument("--reason", default="", help="why (shown in the list)")
    lift = leaf(bans, "del", bans_del, "lift a ban")
    lift.add_argument("kind", choices=KINDS)
    lift.add_argument("who")
