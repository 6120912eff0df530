"""One declared setting: how its text is parsed, its default, and how the docs describe it.

On its own so that a backend's or a broker mode's declaration (bridge/conf/registry.py) can hold
settings without importing the core's table in schema.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Setting:
    parse: Callable[[str], Any]
    default: Any
    doc: str
    secret: bool = False
    example: str | None = None  # how it looks in a file, for the docs
    pool_ref: bool = False  # the value names a configured pool (`<db>.<pool>`): checked once pools are read
