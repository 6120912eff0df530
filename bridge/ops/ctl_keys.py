"""`hookbridge ctl keys`: each API key's name, scope and last use (the API's /keys; an admin key's)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from bridge.ops.ctl_client import Client
from bridge.ops.ctl_output import table, when

KEY_COLUMNS = [("name", "name"), ("scope", "scope"), ("last_used", "last used"), ("last_from", "from")]


def keys_list(api: Client, _args: argparse.Namespace) -> tuple[Any, str]:
    found = api.every("/keys", {}, None)
    rows = [{**key, "last_used": when(key["last_used"]) if key["last_used"] else "never"} for key in found]
    return found, table(rows, KEY_COLUMNS, "no keys")


def add_parsers(groups: Any, leaf: Callable[[Any, str, Any, str], argparse.ArgumentParser]) -> None:
    leaf(groups, "keys", keys_list, "each API key's name, scope and last use (admin keys only)")
