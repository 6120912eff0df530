"""Line-aware parsing of `config/bridge.conf` and `rules/*.conf`.

Every problem becomes a `ConfError` carrying `path:line:col`; parsers collect
all of them and raise `ConfErrors` once, so a user sees every mistake at once.
"""

from bridge.conf.errors import ConfError, ConfErrors, Position
from bridge.conf.lexer import Entry, read_entries

__all__ = ["ConfError", "ConfErrors", "Entry", "Position", "read_entries"]
