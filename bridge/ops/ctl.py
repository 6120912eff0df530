"""`hookbridge ctl ...`: the management API's operations from the command line, against a running
bridge (docs/operations.md, "hookbridge ctl").

Where the bridge is: `--url`, else `HOOKBRIDGE_URL`, else the config file's `metrics.listener`
(`-c`, https when `metrics.listener.certfile` is set). The API key: `HOOKBRIDGE_API_KEY`, else the
first line of `--key-file` (a key on the command line would show in `ps`); none: the request goes
without one (`api.allow_anonymous_loopback`). Tables for people, `--json` for scripts (the API's
JSON: a list's every page joined into one array). Errors: one line on stderr, exit status 1
(2: a usage error, as argparse's).
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bridge.ops import ctl_bans, ctl_keys, ctl_sessions
from bridge.ops.ctl_client import Client, CtlError
from bridge.ops.ctl_output import pairs, shown, table

EXIT_FAILED = 1
EXIT_USAGE = 2
DEFAULT_TIMEOUT = 10.0


# -- where the bridge is ------------------------------------------------------------


def _where(args: argparse.Namespace) -> tuple[str, ssl.SSLContext | None]:
    """The API's base URL and the TLS context to check its certificate with."""
    url = args.url or os.environ.get("HOOKBRIDGE_URL", "")
    certfile = ""
    if not url:
        from bridge.conf.config import load_config
        from bridge.conf.errors import ConfErrors

        try:
            config = load_config(args.config)
        except ConfErrors as exc:
            raise CtlError(f"no --url, and the config says nowhere: {exc.errors[0]}") from None
        listener = config["metrics.listener"]
        if listener is None:
            raise CtlError(f"{args.config}: metrics.listener is off: the bridge serves no API (or give --url)")
        host, port = listener
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
        certfile = config["metrics.listener.certfile"]
        url = f"{'https' if certfile else 'http'}://{f'[{host}]' if ':' in host else host}:{port}"
    if not url.startswith(("http://", "https://")):
        raise CtlError(f"--url must start with http:// or https://, not {url!r}")
    context = None
    if url.startswith("https://"):
        context = ssl.create_default_context(cafile=args.cafile or None)
    return url, context


def _key(args: argparse.Namespace) -> str | None:
    key = os.environ.get("HOOKBRIDGE_API_KEY", "").strip()
    if key:
        return key
    if args.key_file:
        try:
            lines = Path(args.key_file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise CtlError(f"cannot read --key-file {args.key_file}: {exc}") from None
        return lines[0].strip() if lines else None
    return None


CLIENT_COLUMNS = [
    ("clientid", "client id"),
    ("username", "user"),
    ("connected", "connected"),
    ("peername", "peer"),
    ("proto_ver", "proto"),
    ("clean", "clean"),
    ("subscriptions", "subs"),
]

# -- commands ----------------------------------------------------------------------

Command = Callable[[Client, argparse.Namespace], tuple[Any, str]]  # (JSON for --json, text for people)


def _id(text: str) -> str:
    return quote(text, safe="")


def clients_list(api: Client, args: argparse.Namespace) -> tuple[Any, str]:
    query = {"prefix": args.prefix}
    if args.user is not None:
        query["user"] = args.user
    if args.connected is not None:
        query["connected"] = args.connected
    found = api.every("/clients", query, args.limit)
    return found, table(found, CLIENT_COLUMNS, "no clients")


def clients_show(api: Client, args: argparse.Namespace) -> tuple[Any, str]:
    session = api.call("GET", f"/sessions/{_id(args.clientid)}")
    head = {k: v for k, v in session.items() if k not in ("subscriptions", "queue")}
    head["queue"] = f"{session['queue']['messages']} messages, {session['queue']['bytes']} bytes"
    subs = table(session["subscriptions"], [("filter", "filter"), ("qos", "qos")], "no subscriptions")
    return session, pairs(head.items()) + "\n\n" + subs


def clients_kick(api: Client, args: argparse.Namespace) -> tuple[Any, str]:
    answer = api.call("DELETE", f"/clients/{_id(args.clientid)}")
    return answer, f"kicked {shown(answer['kicked'])}"


def subs_list(api: Client, args: argparse.Namespace) -> tuple[Any, str]:
    query = {k: v for k, v in (("clientid", args.clientid), ("filter", args.filter)) if v is not None}
    found = api.every("/subscriptions", query, args.limit)
    return found, table(found, [("clientid", "client id"), ("filter", "filter"), ("qos", "qos")], "no subscriptions")


def subs_add(api: Client, args: argparse.Namespace) -> tuple[Any, str]:
    body = {"filter": args.filter, "qos": args.qos}
    answer = api.call("POST", f"/clients/{_id(args.clientid)}/subscriptions", body=body)
    return answer, f"subscribed {shown(answer['clientid'])} to {shown(answer['filter'])} (qos {answer['qos']})"


def subs_del(api: Client, args: argparse.Namespace) -> tuple[Any, str]:
    answer = api.call("DELETE", f"/clients/{_id(args.clientid)}/subscriptions", {"filter": args.filter})
    return answer, f"unsubscribed {shown(answer['clientid'])} from {shown(answer['filter'])}"


RETAINED_COLUMNS = [
    ("topic", "topic"),
    ("qos", "qos"),
    ("bytes", "bytes"),
    ("from_clientid", "from"),
    ("payload", "payload"),
]


def retained_list(api: Client, args: argparse.Namespace) -> tuple[Any, str]:
    found = api.every("/retained", {"filter": args.filter}, args.limit)
    return found, table(found, RETAINED_COLUMNS, "no retained messages")


def _topic_path(topic: str) -> str:
    return "/retained/" + quote(topic, safe="/")


def retained_get(api: Client, args: argparse.Namespace) -> tuple[Any, str]:
    found = api.call("GET", _topic_path(args.topic))
    return found, pairs((k, v) for k, v in found.items() if k != "payload_base64")


def retained_del(api: Client, args: argparse.Namespace) -> tuple[Any, str]:
    answer = api.call("DELETE", _topic_path(args.topic))
    return answer, f"deleted the retained message on {shown(answer['deleted'])}"


def publish(api: Client, args: argparse.Namespace) -> tuple[Any, str]:
    body: dict[str, Any] = {"topic": args.topic, "payload": args.payload, "qos": args.qos, "retain": args.retain}
    if args.as_client is not None:
        body["clientid"] = args.as_client
    answer = api.call("POST", "/publish", body=body)
    routed = f", routed to {answer['routed']} sessions" if "routed" in answer else f" as {answer.get('as')}"
    return answer, f"published to {shown(answer['published'])}{routed}"


def status(api: Client, _args: argparse.Namespace) -> tuple[Any, str]:
    found = api.call("GET", "/status")
    lines = [("version", found.get("version")), ("uptime", f"{found.get('uptime', 0):.0f} s")]
    lines += [(key, value) for key, value in found.items() if key not in ("version", "uptime", "pools")]
    pools = found.get("pools") or {}
    text = pairs((k, json.dumps(v) if isinstance(v, dict | list) else v) for k, v in lines)
    if pools:
        rows = [{"id": pool_id, **state} for pool_id, state in sorted(pools.items())]
        columns = [("id", "pool")] + [(key, key) for key in rows[0] if key != "id"]
        text += "\n\n" + table(rows, columns, "")
    return found, text


def rules(api: Client, args: argparse.Namespace) -> tuple[Any, str]:
    found = api.every("/rules", {"prefix": args.prefix}, None)
    columns = [("id", "rule"), ("pool", "pool"), ("active", "active")]
    for counter in ("matched", "succeeded", "failed", "retried", "spooled", "dropped", "deadlettered"):
        columns.append((counter, counter))
    return found, table(found, columns, "no rules")


def pools(api: Client, _args: argparse.Namespace) -> tuple[Any, str]:
    found = api.every("/pools", {}, None)
    columns = [("id", "pool")] + [(key, key) for key in (found[0] if found else {}) if key != "id"]
    return found, table(found, columns, "no pools")


def reload(api: Client, _args: argparse.Namespace) -> tuple[Any, str]:
    answer = api.call("POST", "/reload", body={})
    return answer, f"reloaded: {answer['rules']} rules"


# -- the parser ----------------------------------------------------------------------


def _qos(text: str) -> int:
    if text not in ("0", "1", "2"):
        raise argparse.ArgumentTypeError(f"QoS must be 0, 1 or 2, not {text!r}")
    return int(text)


def _limit(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="the bridge's HTTP listener, e.g. http://127.0.0.1:9100 (env HOOKBRIDGE_URL)")
    parser.add_argument(
        "-c", "--config", default="config/bridge.conf", help="config file whose metrics.listener to use without --url"
    )
    parser.add_argument("--key-file", help="a file whose first line is the API key (env HOOKBRIDGE_API_KEY wins)")
    parser.add_argument("--cafile", help="CA certificates to check an https listener's certificate with")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per request (default 10)")
    parser.add_argument("--json", action="store_true", help="print the API's JSON instead of a table")
    groups = parser.add_subparsers(
        dest="what", required=True, metavar="{clients,sessions,subs,retained,bans,publish,status,...}"
    )

    def leaf(sub: Any, name: str, func: Command, help: str) -> argparse.ArgumentParser:
        made: argparse.ArgumentParser = sub.add_parser(name, help=help)
        made.set_defaults(ctl=func)
        # `ctl clients list --json` as well as `ctl --json clients list`
        made.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the API's JSON")
        return made

    clients = groups.add_parser("clients", help="connected clients and sessions").add_subparsers(
        dest="action", required=True
    )
    listing = leaf(clients, "list", clients_list, "clients with a session")
    listing.add_argument("--prefix", default="", help="client ids starting so")
    listing.add_argument("--user", help="of this user only")
    state = listing.add_mutually_exclusive_group()
    state.add_argument("--connected", action="store_const", const="true", help="connected ones only")
    state.add_argument("--disconnected", dest="connected", action="store_const", const="false", help="offline only")
    listing.add_argument("--limit", type=_limit, help="at most this many")
    leaf(clients, "show", clients_show, "one client's session").add_argument("clientid")
    leaf(clients, "kick", clients_kick, "close a client's connection").add_argument("clientid")

    subs = groups.add_parser("subs", help="subscriptions").add_subparsers(dest="action", required=True)
    listing = leaf(subs, "list", subs_list, "subscriptions")
    listing.add_argument("--client", dest="clientid", help="of this client only")
    listing.add_argument("--filter", help="with exactly this filter")
    listing.add_argument("--limit", type=_limit, help="at most this many")
    add = leaf(subs, "add", subs_add, "subscribe a client on its behalf (its ACL holds)")
    add.add_argument("clientid")
    add.add_argument("filter")
    add.add_argument("qos", type=_qos)
    remove = leaf(subs, "del", subs_del, "unsubscribe a client")
    remove.add_argument("clientid")
    remove.add_argument("filter")

    retained = groups.add_parser("retained", help="retained messages").add_subparsers(dest="action", required=True)
    listing = leaf(retained, "list", retained_list, "retained messages matching a filter")
    listing.add_argument("filter", nargs="?", default="#", help="topic filter (default #)")
    listing.add_argument("--limit", type=_limit, help="at most this many")
    leaf(retained, "get", retained_get, "one retained message").add_argument("topic")
    leaf(retained, "del", retained_del, "delete a retained message").add_argument("topic")

    pub = leaf(groups, "publish", publish, "publish a message")
    pub.add_argument("topic")
    pub.add_argument("payload")
    pub.add_argument("--qos", type=_qos, default=0)
    pub.add_argument("--retain", action="store_true")
    pub.add_argument("--as", dest="as_client", metavar="CLIENTID", help="as this client (its ACL, its event)")

    leaf(groups, "status", status, "version, uptime, broker, pools, spool")
    leaf(groups, "rules", rules, "each rule's counters").add_argument("--prefix", default="")
    leaf(groups, "pools", pools, "each pool's state and spool")
    leaf(groups, "reload", reload, "reload rules and the broker's files, as SIGHUP")

    ctl_bans.add_parsers(groups, leaf, _limit)
    ctl_sessions.add_parsers(groups, leaf, _limit)
    ctl_keys.add_parsers(groups, leaf)


def run(args: argparse.Namespace) -> int:
    try:
        url, context = _where(args)
        api = Client(url, _key(args), args.timeout, context)
        data, text = args.ctl(api, args)
    except CtlError as error:
        print(f"hookbridge ctl: {shown(str(error))}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(data, indent=2, ensure_ascii=False) if args.json else text)
    return 0
