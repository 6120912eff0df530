"""Stable message ids across a crash: one slot per MQTT packet id, in a memory-mapped file.

The broker gives no message id, so the bridge makes one when a message arrives.
A message that was committed but not yet acknowledged when the bridge died is
sent again by the broker (same session, same packet id, DUP set); it must get
the SAME id, or the idempotent writes (keyed by msgid) would store it twice.

So before a message is dispatched, its packet id's slot records the id given
to it and a digest of its content (topic, payload, qos, retain); when it is
acknowledged the slot is marked acked. A redelivery reuses the slot's id when
the digest matches and the message is marked DUP or the slot was never acked.
The file is a shared memory mapping: every store is in the kernel's page cache
the moment it is made, so it survives `kill -9` without an fsync (not a power
loss: see docs/brokers.md for the exact guarantee).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re
from pathlib import Path

_SLOTS = 65536  # MQTT packet ids are 16 bits
# msgid (16 bytes) | digest (15 bytes) | acked (1 byte). The digest is written
# after the msgid, so a matching digest implies the msgid beside it is whole.
_SLOT = 32
_DIGEST = 15


def digest(topic: str, payload: bytes, qos: int, retain: bool) -> bytes:
    # One hash call over one buffer: on the path of every message, each extra call counts.
    content = b"%s\x00%d%d\x00%s" % (topic.encode("utf-8", "surrogateescape"), qos, retain, payload)
    return hashlib.blake2b(content, digest_size=_DIGEST).digest()


def ledger_path(state_dir: str | Path, clientid: str) -> Path:
    """One file per broker session (client id): `<state_dir>/mqtt-session-<clientid>.ids`."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", clientid) or "_"
    return Path(state_dir) / f"mqtt-session-{safe}.ids"


class PacketLedger:
    """Packet id -> (msgid, content digest, acked), kept across restarts."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size != _SLOTS * _SLOT:
                os.ftruncate(fd, _SLOTS * _SLOT)
            self._map = mmap.mmap(fd, _SLOTS * _SLOT)
        finally:
            os.close(fd)
        self.path = path
        self.reused = 0  # redeliveries that got their earlier id back (a counter for tests and metrics)

    def assign(self, packet_id: int, content: bytes, dup: bool, new_id: str) -> str:
        """The msgid for this arrival: the recorded one for a redelivery, else `new_id` (recorded)."""
        base = packet_id * _SLOT
        slot = self._map[base : base + _SLOT]
        if slot[16:31] == content and (dup or slot[31] == 0):
            self.reused += 1
            return slot[:16].hex().upper()
        self._map[base : base + 16] = bytes.fromhex(new_id)
        self._map[base + 16 : base + _SLOT] = content + b"\x00"
        return new_id

    def acked(self, packet_id: int) -> None:
        self._map[packet_id * _SLOT + 31] = 1

    def close(self) -> None:
        self._map.close()
