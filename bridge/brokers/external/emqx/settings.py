"""The settings of `broker.mode = emqx` beside those it shares with the mqtt mode
(../mqtt/settings.py): EMQX's REST API and where its rules republish the events.
"""

from __future__ import annotations

from bridge.brokers.external.mqtt.settings import SETTINGS as MQTT_SETTINGS
from bridge.conf import addresses as a
from bridge.conf import parsers as p
from bridge.conf.setting import Setting
from bridge.topics import filter_error


def topic_filter(text: str) -> str:
    value = p.string(required=True)(text)
    problem = filter_error(value)
    if problem:
        raise ValueError(problem if problem.startswith("bad") else f"bad topic filter: {problem}")
    return value


topic_filter.__doc__ = "MQTT topic filter"


SETTINGS: dict[str, Setting] = {
    **MQTT_SETTINGS,
    "broker.emqx.api": Setting(a.http_url, "http://127.0.0.1:18083", "emqx mode: REST API base URL"),
    "broker.emqx.api_key": Setting(p.parse_str, "", "emqx mode: API key", secret=True),
    "broker.emqx.api_secret": Setting(p.parse_str, "", "emqx mode: API secret", secret=True),
    "broker.emqx.api_version": Setting(
        p.enum_of("v5", "v4"),
        "v5",
        "emqx mode: the REST API's version, v5 (EMQX 5) or v4 (EMQX 4.4: AppID / AppSecret as key / secret)",
    ),
    "broker.emqx.event_topic": Setting(
        topic_filter, "hookbridge/events/#", "emqx mode: where EMQX rules republish $events/*"
    ),
}
