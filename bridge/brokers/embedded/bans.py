"""Bans: who may not connect to the embedded broker, by client id, user name or address (CIDR),
each until an expiry or for ever, as EMQX's banned list (`as`, `who`, `reason`, `by`, `at`, `until`).

The broker asks `match` at every CONNECT (a banned client gets CONNACK 0x8A "banned", 3.1.1:
return code 5 "not authorized"); the API and `ctl` add, list and lift them. The list is kept in
one JSON file (`broker.bans_file`), written whole on each change (a temporary file renamed over
it, so a crash leaves the old list or the new one, never half of one) and read at start. A file
rather than the durable store: bans are the operator's decisions, not session state; they must
hold whether durable sessions are on or off, and a file can be read, backed up and carried to
another node with the config.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bridge.errors import HookbridgeError

log = logging.getLogger(__name__)

KINDS = ("clientid", "username", "address")  # EMQX's `as`: what `who` is
_WHO_MAX = 65535  # an MQTT string's longest
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class BanError(HookbridgeError, ValueError):
    """A ban that cannot be made as asked (the API answers 400 with this text)."""


@dataclass(frozen=True)
class Ban:
    kind: str  # one of KINDS
    who: str  # the client id, the user name, or an address / CIDR network (`10.0.0.0/8`)
    reason: str = ""
    by: str = ""  # who banned: the API key's name
    at: float = 0.0  # Unix seconds, when it was made
    until: float | None = None  # Unix seconds; None: for ever

    def active(self, now: float) -> bool:
        return self.until is None or self.until > now

    def describe(self) -> dict[str, Any]:
        return {"as": self.kind, **{k: v for k, v in asdict(self).items() if k != "kind"}}


def make_ban(kind: Any, who: Any, *, reason: Any = "", by: str = "", until: Any = None, now: float) -> Ban:
    """A Ban from values an operator gave (the API's body), checked: BanError says what is wrong."""
    if kind not in KINDS:
        raise BanError(f"as must be one of {', '.join(KINDS)}")
    if not isinstance(who, str) or not who:
        raise BanError("who must be a non-empty string")
    if len(who.encode("utf-8", "surrogatepass")) > _WHO_MAX:
        raise BanError(f"who is longer than {_WHO_MAX} bytes")
    if not isinstance(reason, str):
        raise BanError("reason must be a string")
    if kind == "address":
        who = str(_network(who))  # one spelling per network: 10.0.0.7 and 10.0.0.7/32 are one ban
    if until is not None:
        if isinstance(until, bool) or not isinstance(until, int | float):
            raise BanError("until must be a Unix time in seconds (or null: for ever)")
        if until <= now:
            raise BanError("until is in the past")
    return Ban(kind, who, reason, by, now, None if until is None else float(until))


def _network(who: str) -> Network:
    try:
        return ipaddress.ip_network(who.strip(), strict=False)
    except ValueError:
        raise BanError(f"{who!r} is not an IP address or a CIDR network (10.0.0.0/8, 2001:db8::/32)") from None


def peer_address(peername: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address of a connection's `host:port` / `[v6host]:port` (None: not an IP peer)."""
    host = peername.rpartition(":")[0].strip("[]") if ":" in peername else peername
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped  # a dual-stack listener's IPv4 client: banned by its IPv4 address
    return address


class Bans:
    """The banned list: (kind, who) -> Ban, kept in `path` (None: in memory only)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path else None
        self._bans: dict[tuple[str, str], Ban] = {}
        # Address bans by (IP version, prefix length), then by network address: a CONNECT's
        # address is masked once per prefix length in use and looked up, so it costs at most 33
        # (IPv4) or 129 (IPv6) look-ups however many networks are banned.
        self._networks: dict[tuple[int, int], dict[int, str]] = {}

    def __len__(self) -> int:
        return len(self._bans)

    def load(self) -> None:
        """Read the file (a missing one is an empty list); expired bans are left out."""
        if self.path is None or not self.path.exists():
            return
        try:
            entries = json.loads(self.path.read_text(encoding="utf-8"))
            now = time.time()
            for entry in entries:
                until = entry.get("until")
                ban = Ban(
                    entry["as"],
                    entry["who"],
                    entry.get("reason", ""),
                    entry.get("by", ""),
                    float(entry.get("at", 0)),
                    None if until is None else float(until),
                )
                if ban.kind in KINDS and ban.active(now):
                    self._put(ban)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # Starting without the bans would let banned clients in: refuse to start instead.
            raise BanError(f"{self.path}: cannot read the banned list: {exc}") from None
        log.info("bans: %d read from %s", len(self._bans), self.path)

    def add(self, ban: Ban) -> None:
        """Add or replace the ban on (kind, who), and save the list."""
        self._put(ban)
        self._save()

    def remove(self, kind: str, who: str) -> Ban | None:
        if kind == "address":
            try:
                who = str(_network(who))
            except BanError:
                return None
        ban = self._bans.pop((kind, who), None)
        if ban is not None:
            self._unindex(ban)
            self._save()
        return ban

    def listed(self, now: float | None = None) -> list[Ban]:
        """The bans in force, expired ones dropped (and the file saved without them)."""
        self._expire(time.time() if now is None else now)
        return sorted(self._bans.values(), key=lambda ban: (ban.kind, ban.who))

    def match(self, clientid: str, username: str | None, peername: str, now: float | None = None) -> Ban | None:
        """The ban in force that keeps this client out, or None: a dict look-up per kind and per
        prefix length of the banned networks, cheap enough for every CONNECT."""
        if not self._bans:
            return None
        now = time.time() if now is None else now
        for kind, who in (("clientid", clientid), ("username", username)):
            ban = self._bans.get((kind, who)) if who is not None else None
            if ban is not None and ban.active(now):
                return ban
        if self._networks:
            address = peer_address(peername)
            if address is not None:
                bits, value = address.max_prefixlen, int(address)
                for (version, length), networks in self._networks.items():
                    if version != address.version:
                        continue
                    who = networks.get(value >> (bits - length) << (bits - length))
                    ban = self._bans.get(("address", who)) if who is not None else None
                    if ban is not None and ban.active(now):
                        return ban
        return None

    def _put(self, ban: Ban) -> None:
        self._bans[(ban.kind, ban.who)] = ban
        if ban.kind == "address":
            network = _network(ban.who)
            self._networks.setdefault((network.version, network.prefixlen), {})[int(network.network_address)] = ban.who

    def _unindex(self, ban: Ban) -> None:
        if ban.kind != "address":
            return
        network = _network(ban.who)
        key = (network.version, network.prefixlen)
        networks = self._networks.get(key, {})
        networks.pop(int(network.network_address), None)
        if not networks:
            self._networks.pop(key, None)

    def _expire(self, now: float) -> None:
        gone = [key for key, ban in self._bans.items() if not ban.active(now)]
        for key in gone:
            self._unindex(self._bans.pop(key))
        if gone:
            self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps([ban.describe() for ban in self._bans.values()], indent=1, ensure_ascii=False)
        partial = self.path.with_name(self.path.name + ".tmp")
        with open(partial, "w", encoding="utf-8") as out:
            out.write(text + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, self.path)
