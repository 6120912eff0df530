"""actions/redis/packing.py reads replies through redis-py's private `Connection._parser` (its
`pipeline_on` docstring says why: 2 µs of CPU per command). This pins what it relies on, so a
redis-py that changes it fails here, not under load; pyproject.toml admits only tested versions."""

from __future__ import annotations

import inspect

from actions.redis.packing import PackedConnection, PackedSSLConnection


def test_the_connection_has_the_reply_parser_packing_reads() -> None:
    for kind in (PackedConnection, PackedSSLConnection):
        parser = kind(host="127.0.0.1", port=1)._parser
        assert inspect.iscoroutinefunction(parser.read_response)
        assert "hiredis" in type(parser).__name__.lower()  # redis-py's hiredis parser: error replies returned
        # resp.read_replies: the parser's hiredis reader (made at connect), its socket read, its state
        assert hasattr(parser, "_reader")  # and `_connected`, set at connect: test_redis_pipeline_replies.py
        assert inspect.iscoroutinefunction(parser.read_from_socket)
