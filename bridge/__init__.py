"""hookbridge core: config, rules, events, dispatcher, runner, broker sources, CLI."""

__version__ = "0.1.0"
