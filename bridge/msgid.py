"""Message ids: 128 bits, time-ordered, as EMQX makes them.

Layout: 64-bit microsecond timestamp, 48-bit node/process id, 16-bit sequence.
The text form is 32 upper-case hex characters, so lexical order is time order.
Within one generator ids are strictly increasing even if the clock steps back.
"""

from __future__ import annotations

import hashlib
import os
import re
import string
import threading
import time

_SEQ_MASK = 0xFFFF


def node_bits(node: str, pid: int | None = None) -> int:
    """48 bits naming this node and process."""
    digest = hashlib.blake2b(f"{node}/{pid if pid is not None else os.getpid()}".encode(), digest_size=6)
    return int.from_bytes(digest.digest(), "big")


class MsgIdGenerator:
    def __init__(self, node: str = "hookbridge") -> None:
        self._node = node_bits(node)
        self._node_hex = f"{self._node:012X}"
        self._last_us = 0
        self._seq = 0
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            now_us = time.time_ns() // 1000
            if now_us > self._last_us:
                self._last_us, self._seq = now_us, 0
            else:
                self._seq += 1
                if self._seq > _SEQ_MASK:  # 65536 ids in one microsecond: borrow the next one
                    self._last_us, self._seq = self._last_us + 1, 0
            last_us, seq = self._last_us, self._seq
        return f"{last_us:016X}{self._node_hex}{seq:04X}"  # the 128-bit value in hex, field by field


def timestamp_us(msgid: str) -> int:
    """The microsecond timestamp inside a hookbridge/EMQX message id."""
    return int(msgid[:16], 16)


# -- EMQX 4.4's ids (hookbridge migrate-emqx44) ---------------------------------------------

BASE62 = string.digits + string.ascii_uppercase + string.ascii_lowercase
HEX_ID = re.compile(rb"[0-9A-F]{32}")
_BASE62_ID = re.compile(rb"[0-9A-Za-z]{1,22}")


_SHORTHEX_ID = re.compile(rb"[0-9A-Fa-f]{23,32}")


def hookbridge_id(emqx_id: bytes) -> str | None:
    """The hookbridge id of an EMQX 4.4 id; None if `emqx_id` is one already, or no id at all.

    EMQX 4.4 writes the 128-bit `emqx_guid` in base62 (Redis: at most 22 characters) or in hex
    (the SQL backends; older versions without the leading zeros: 29 characters today). An id of
    our time needs at least 115 bits, so 23 characters or more can only be hex.
    """
    if HEX_ID.fullmatch(emqx_id):
        return None
    if _SHORTHEX_ID.fullmatch(emqx_id):
        return f"{int(emqx_id, 16):032X}"
    if not _BASE62_ID.fullmatch(emqx_id):
        return None
    value = 0
    for char in emqx_id.decode():
        value = value * 62 + BASE62.index(char)
    if value >> 128:
        return None
    return f"{value:032X}"
