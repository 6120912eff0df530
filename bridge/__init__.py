"""hookbridge core: config, rules, events, dispatcher, runner, broker sources, CLI."""

from bridge.extensions import prefer_sources

__version__ = "0.1.0"

# Before any compiled module can be imported: HOOKBRIDGE_NO_EXTENSIONS=1 runs their .py files.
prefer_sources()
