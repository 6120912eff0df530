"""The one root of hookbridge's own exceptions.

Every error the bridge raises on purpose derives from `HookbridgeError`, so a caller (or a test)
can tell the bridge's refusals from a driver's or the standard library's failures with one
`except`. Errors that are also bad values keep `ValueError` as a second base: the config and
rules checkers catch `ValueError` from any parser.
"""

from __future__ import annotations


class HookbridgeError(Exception):
    """An error of hookbridge's own (a refused config, a malformed packet, a store that is down)."""
