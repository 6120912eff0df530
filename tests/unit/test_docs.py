"""The reference docs stay in step with the code."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from bridge.conf import docs
from bridge.events import Hookpoint, offered_placeholders
from bridge.functions import FUNCTIONS

ROOT = Path(__file__).resolve().parents[2]


def test_configuration_reference_is_generated_from_the_schema() -> None:
    assert (ROOT / "docs" / "configuration.md").read_text() == docs.render()


def test_the_default_column_shows_what_the_bridge_uses_and_examples_stand_apart() -> None:
    """Each default in docs/configuration.md, written into a config file, is the default the code
    uses (so an example never poses as one: `broker.acl.file` is empty unless set)."""
    from bridge.conf.schema import POOL_COMMON, global_settings

    row = re.compile(r"^\| `([^`]+)` \| `([^`]*)` \| ([^|]*) \|", re.M)
    shown = {key: (default, example.strip()) for key, default, example in row.findall(docs.render())}
    settings = {**global_settings(), **{f"backend.<db>.<pool>.{k}": v for k, v in POOL_COMMON.items()}}
    checked = 0
    for key, setting in settings.items():
        default, example = shown[key]
        if default == "(see meaning)":
            assert setting.default is None, key
            continue
        written = "" if default == "(empty)" else default
        assert setting.parse(written) == setting.default, (key, default)
        checked += 1
        if example:
            assert setting.parse.__doc__ is not None and example.strip("`") != default, key
    assert checked > 60
    assert shown["broker.acl.file"] == ("(empty)", "`etc/acl`")
    assert shown["metrics.listener.certfile"] == ("(empty)", "`etc/server.crt`")
    assert shown["broker.listener.ssl"] == ("off", "`0.0.0.0:8883`")
    assert shown["api.max_body"] == ("64KB", "")


def test_rules_reference_names_every_function_and_placeholder() -> None:
    text = (ROOT / "docs" / "rules.md").read_text()
    missing = [name for name in FUNCTIONS if f"`{name}`" not in text]
    missing += sorted(
        {p for hookpoint in Hookpoint for p in offered_placeholders(hookpoint)}
        - {part for part in text.replace("`", " ").split() if part.startswith("${")}
    )
    assert missing == []


def test_shipped_config_sets_only_known_keys() -> None:
    from bridge.conf.config import load_config

    config = load_config(ROOT / "config" / "bridge.conf")
    assert config["broker.mode"] == "embedded"
    assert "redis.pool1" in config.pools


def _git_modes() -> dict[str, str]:
    """path -> git file mode (`100755` is executable) of every tracked file, as a clone gets it."""
    out = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return {line.split("\t", 1)[1]: line.split()[0] for line in out.splitlines()}


def test_every_script_the_docs_name_exists_and_is_executable_in_git() -> None:
    modes = _git_modes()
    named: dict[str, set[str]] = {}
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for path in re.findall(r"\bscripts/[\w./-]*\w", doc.read_text()):
            named.setdefault(path, set()).add(str(doc.relative_to(ROOT)))
    assert "scripts/mosquitto.sh" in named and "scripts/redis.sh" in named
    missing = {path: docs for path, docs in named.items() if path not in modes}
    not_executable = {p: d for p, d in named.items() if p.endswith(".sh") and modes.get(p) not in (None, "100755")}
    assert missing == {} and not_executable == {}


def test_no_shipped_text_says_a_feature_is_still_to_come() -> None:
    """The external broker modes shipped while config/bridge.conf still said "not in this version yet"."""
    stale = re.compile(r"not in this version|in a later version|\(a later version\)|not (yet )?implemented", re.I)
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "config").iterdir()]
    files += [*(ROOT / "rules").iterdir(), *(p for p in (ROOT / "deploy").rglob("*") if p.is_file())]
    found = [f"{p.relative_to(ROOT)}: {m[0]}" for p in files for m in stale.finditer(p.read_text())]
    assert found == []
    config = (ROOT / "config" / "bridge.conf").read_text().split("\nbroker.mode =")[0].rsplit("\n\n", 1)[1]
    assert all(mode in config for mode in ("embedded", "mqtt", "emqx")) and "docs/brokers.md" in config
