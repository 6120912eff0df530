"""The reference docs stay in step with the code."""

from __future__ import annotations

from pathlib import Path

from actions.registry import FUNCTIONS
from bridge.conf import docs
from bridge.events import PLACEHOLDERS

ROOT = Path(__file__).resolve().parents[2]


def test_configuration_reference_is_generated_from_the_schema() -> None:
    assert (ROOT / "docs" / "configuration.md").read_text() == docs.render()


def test_rules_reference_names_every_function_and_placeholder() -> None:
    text = (ROOT / "docs" / "rules.md").read_text()
    missing = [name for name in FUNCTIONS if f"`{name}`" not in text]
    missing += sorted(
        {f"${{{p}}}" for names in PLACEHOLDERS.values() for p in names}
        - {part for part in text.replace("`", " ").split() if part.startswith("${")}
    )
    assert missing == []


def test_shipped_config_sets_only_known_keys() -> None:
    from bridge.conf.config import load_config

    config = load_config(ROOT / "config" / "bridge.conf")
    assert config["broker.mode"] == "embedded"
    assert "redis.pool1" in config.pools
