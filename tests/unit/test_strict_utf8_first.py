"""keys.enc (every Redis key and field of a topic or client id) and the runner's lane_index encode
strict UTF-8 first and fall back to an error handler only for a lone surrogate: the bytes must be
those the handler alone gives, for every string (a lane that moved would reorder spooled actions
after an upgrade; a key that changed would hide stored messages). On the compiled build too
(tests/packaging/test_compiled_build.py)."""

from __future__ import annotations

import zlib
from collections.abc import Callable

from actions.redis import keys
from bridge.events import MessagePublish, ordering_key
from bridge.pipeline.runner import lane_index

TEXTS = ["", "dev/1/cmd", "é/ü/日本", "emoji/\U0001f600", "raw/\udcff\udc80", "lone/\ud800", "x" * 300]


def _publish(clientid: str, topic: str) -> MessagePublish:
    return MessagePublish("0" * 32, clientid, None, topic, 1, b"p", False, "n", "p", 0.0)


def _outcome(encode: Callable[[str], bytes], text: str) -> bytes | type[Exception]:
    try:
        return encode(text)
    except UnicodeEncodeError as exc:
        return type(exc)


def test_keys_enc_gives_the_surrogateescape_bytes() -> None:
    # "\ud800" (no escaped byte) is refused by surrogateescape too: the same error either way.
    for text in TEXTS:
        expected = _outcome(lambda t: t.encode("utf-8", "surrogateescape"), text)
        assert _outcome(keys.enc, text) == expected, repr(text)


def test_lane_index_is_the_surrogatepass_hash() -> None:
    for clientid in TEXTS:
        for topic in TEXTS:
            event = _publish(clientid, topic)
            data = ordering_key(event).encode("utf-8", "surrogatepass")
            expected = ((zlib.crc32(data) * 0x9E3779B97F4A7C15) >> 32 & 0xFFFFFFFF) % 7
            assert lane_index(event, 7) == expected, (clientid, topic)
