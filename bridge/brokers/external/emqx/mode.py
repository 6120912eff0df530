"""`broker.mode = emqx` declared as a plug-in (the `hookbridge.modes` entry point)."""

from __future__ import annotations

from bridge.brokers.external.emqx.settings import SETTINGS
from bridge.conf.registry import ModePlugin
from bridge.functions import Capability

MODE = ModePlugin(
    name="emqx",
    summary="EMQX 5",
    # EMQX 5's REST API subscribes a client on its behalf; it has no call that delivers to one
    # session, so fetch and retain lookup are refused in emqx mode.
    capabilities=frozenset({Capability.PROXY_SUBSCRIBE}),
    shared_subscriptions=True,  # `--workers N`: N sessions in one `$share/<group>`
    source="bridge.brokers.external.factory:make_external_source",  # gmqtt and aiohttp load only in this mode
    settings=SETTINGS,
)
