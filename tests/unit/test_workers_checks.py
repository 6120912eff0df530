"""`--workers N` without servers: what check refuses and warns about, worker naming, metrics merging."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.brokers.external.clientids import same_bridge, worker_clientid
from bridge.cli import main
from bridge.conf.config import parse_config
from bridge.ops.metrics import Family, Metrics, Sample, render_families
from bridge.workers.channel import families_from_json, families_to_json
from bridge.workers.checks import worker_problems
from bridge.workers.layout import (
    become_worker,
    clear_retired,
    leftover_warning,
    leftover_workers,
    worker_spool_dir,
)
from bridge.workers.merge import combined_health, counts_only, merge_families

POOL = "backend.redis.pool1.server = 127.0.0.1:6391\n"
MQTT = "broker.mode = mqtt\nbroker.server = 127.0.0.1:1885\nbroker.clientid = hb\n"


def _home(tmp_path: Path, config: str, rules: str = "") -> Path:
    (tmp_path / "rules").mkdir()
    (tmp_path / "templates").mkdir()
    (tmp_path / "rules" / "r.conf").write_text(rules)
    (tmp_path / "bridge.conf").write_text(config)
    return tmp_path


def _check(home: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    code = main(["check", "-c", str(home / "bridge.conf"), "-r", str(home / "rules"), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_workers_in_embedded_mode_point_at_broker_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = _home(tmp_path, POOL + "broker.mode = embedded\n")
    code, _out, err = _check(home, capsys, "--workers", "2")
    assert code == 2
    assert err.splitlines()[0] == (
        f"{home / 'bridge.conf'}:2:15: --workers 2 needs broker.mode = emqx or mqtt: the workers share the "
        "broker's messages through one shared subscription; embedded mode runs as one process"
    )
    assert _check(home, capsys)[0] == 0  # one worker: as before


def test_workers_without_broker_mode_say_embedded_is_the_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _out, err = _check(_home(tmp_path, POOL), capsys, "--workers", "3")
    assert code == 2
    assert ":1:1: --workers 3 needs broker.mode = emqx or mqtt (broker.mode is not set: embedded is the default)" in err


def test_workers_without_shared_group_point_where_it_belongs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = _home(tmp_path, "# bridge\n" + MQTT + POOL)
    code, _out, err = _check(home, capsys, "--workers", "2")
    assert code == 2
    assert err.splitlines()[0] == (
        f"{home / 'bridge.conf'}:5:1: --workers 2 needs broker.shared_group: each worker subscribes through "
        "$share/<group>/<filter>, so the broker gives every message to one of them "
        "(add e.g. `broker.shared_group = hookbridge`)"
    )


def test_an_empty_shared_group_is_pointed_at(tmp_path: Path) -> None:
    config = parse_config("b.conf", MQTT + "broker.shared_group =\n" + POOL)
    [problem] = worker_problems(config, 2)
    assert str(problem.where) == "b.conf:4:22"
    assert worker_problems(parse_config("b.conf", MQTT + "broker.shared_group = g\n"), 2) == []


RULES = """\
backend.redis.hook.client.connected.1 = {"action": {"function": "on_client_connected"}}
backend.redis.hook.message.publish.1 = {"topic": "t/#", "action": {"function": "on_message_publish"}}
backend.redis.hook.message.publish.2 = {"topic": "t/#", "action": {"function": "on_message_retain"}}
backend.redis.hook.message.publish.3 = {"topic": "t/#", "action": {"function": "on_retain_delete"}}
backend.redis.hook.message.acked.1 = {"topic": "t/#", "action": {"function": "on_message_acked"}}
backend.redis.hook.session.unsubscribed.1 = {"action": {"function": "on_acked_delete"}}
"""


def test_check_warns_about_rules_whose_spread_events_need_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = _home(tmp_path, MQTT + "broker.shared_group = g\n" + POOL, RULES)
    code, out, err = _check(home, capsys, "--workers", "2")
    assert code == 0 and out.startswith("ok:")
    rules = home / "rules" / "r.conf"
    assert err.splitlines() == [
        f"{rules}:3:1: warning: redis.message.publish.2 (on_message_retain) keeps retain, which needs events in "
        "order, and with --workers 2 its message.publish events are spread over the workers",
        f"{rules}:4:1: warning: redis.message.publish.3 (on_retain_delete) keeps retain, which needs events in "
        "order, and with --workers 2 its message.publish events are spread over the workers",
        f"{rules}:5:1: warning: redis.message.acked.1 (on_message_acked) keeps offsets, which needs events in "
        "order, and with --workers 2 the message an ack refers to may still be on its way to the database in "
        "another worker",
        "warning: Mosquitto hands a shared subscription's messages out round-robin, so two messages of one "
        "publisher and topic can be applied out of order by two workers; per-(publisher, topic) order holds "
        "only where the broker hashes (EMQX broker.shared_subscription_strategy = hash_clientid or hash_topic); "
        'see docs/operations.md "Several workers"',
    ]
    # status (client events) stays with worker 0, in order: no warning; one worker: none at all
    assert _check(home, capsys) == (0, out, "")


def test_a_worker_count_out_of_range_is_refused(tmp_path: Path) -> None:
    home = _home(tmp_path, POOL)
    for bad in ("0", "65", "two"):
        with pytest.raises(SystemExit) as stop:
            main(["check", "-c", str(home / "bridge.conf"), "-r", str(home / "rules"), "--workers", bad])
        assert stop.value.code == 2


def test_worker_zero_keeps_the_single_process_session_and_spool(tmp_path: Path) -> None:
    assert worker_clientid("hb", 0) == "hb" and worker_clientid("hb", 3) == "hb-w3"
    assert worker_spool_dir("data/spool", 0) == Path("data/spool")
    assert worker_spool_dir("data/spool", 2) == Path("data/spool/worker-2")
    config = parse_config("b.conf", MQTT + f"spool.dir = {tmp_path}\nspool.max_bytes = 3MB\n")
    become_worker(config, 2, 3)
    settings = [config[key] for key in ("broker.clientid", "spool.dir", "metrics.listener", "spool.max_bytes")]
    assert settings == ["hb-w2", str(tmp_path / "worker-2"), None, 1 << 20]  # a third of the one bound each
    assert config.worker == 2
    assert same_bridge("hb-w2", "hb") and same_bridge("hb", "hb-w11") and not same_bridge("hb", "hb-other")
    assert not same_bridge("hb", "hbw1") and not same_bridge("hb-w1", "device-w1")


def test_state_of_workers_beyond_n_is_found_and_named(tmp_path: Path) -> None:
    (tmp_path / "redis.pool1" / "lane-0").mkdir(parents=True)  # worker 0's pool spool: not a worker
    for name in ("worker-1", "worker-2", "worker-3", "worker-0", "worker-x"):
        (tmp_path / name).mkdir()
    assert leftover_workers(tmp_path, 2) == [2, 3]
    assert leftover_workers(tmp_path, 4) == []
    assert leftover_workers(tmp_path / "absent", 1) == []
    config = parse_config("b.conf", MQTT + f"spool.dir = {tmp_path}\n")
    warning = leftover_warning(config, 3)
    assert warning is not None
    assert warning.startswith(
        f"state of worker 3 from an earlier run with more workers: their broker sessions (hb-w3) may hold "
        f"messages the broker assigned them and {tmp_path / 'worker-3'} may hold unwritten actions; "
        "run with --workers 4 until they are drained"
    )
    assert leftover_warning(config, 4) is None


def _family(name: str, kind: str, merge: str, *samples: tuple[dict[str, str], float]) -> Family:
    return Family(name, kind, "help", merge, [Sample(name, labels, value) for labels, value in samples])  # type: ignore[arg-type]


def test_merge_sums_counters_and_keeps_per_worker_gauges() -> None:
    def worker(matched: int, up: int) -> list[Family]:
        return [
            _family("m_total", "counter", "sum", ({"rule": "a"}, matched), ({"rule": "b"}, 1)),
            _family("up", "gauge", "each", ({"pool": "p"}, up)),
        ]

    merged = merge_families(
        {0: worker(5, 1), 1: worker(7, 0)}, carried=[_family("m_total", "counter", "sum", ({"rule": "a"}, 100))]
    )
    text = render_families(merged)
    assert text.splitlines() == [
        "# HELP m_total help",
        "# TYPE m_total counter",
        'm_total{rule="a"} 112.0',
        'm_total{rule="b"} 2.0',
        "# HELP up help",
        "# TYPE up gauge",
        'up{pool="p",worker="0"} 1.0',
        'up{pool="p",worker="1"} 0.0',
    ]
    assert [f.name for f in counts_only(worker(1, 1))] == ["m_total"]  # what a restart carries over


def test_metrics_travel_as_data_and_render_the_same() -> None:
    metrics = Metrics()
    metrics.count("redis.message.publish.1", "matched", 3)
    metrics.rule_pool["redis.message.publish.1"] = "redis.pool1"
    metrics.write_latency["redis.pool1"].observe(0.002)
    metrics.gauge("hookbridge_pool_up", "up", lambda: {"redis.pool1": 1.0}, merge="each")
    sent = json.loads(json.dumps(families_to_json(metrics.families())))
    assert render_families(families_from_json(sent)) == metrics.render()
    one = merge_families({0: families_from_json(sent), 1: families_from_json(sent)})
    text = render_families(one)
    assert 'hookbridge_rule_matched_total{pool="redis.pool1",rule="redis.message.publish.1"} 6.0' in text
    assert 'hookbridge_write_seconds_bucket{le="0.0025",pool="redis.pool1"} 2.0' in text
    assert 'hookbridge_pool_up{pool="redis.pool1",worker="1"} 1.0' in text


def test_health_is_ready_only_when_every_worker_is() -> None:
    ready, body = combined_health({0: {"ready": True}, 1: {"ready": False, "state": "restarting"}})
    assert not ready and body["workers"]["1"]["state"] == "restarting"
    assert combined_health({0: {"ready": True}, 1: {"ready": True}})[0]
    assert not combined_health({})[0]
    # a worker retiring (scaled down) is leaving the set: it does not hold the others' health back
    assert combined_health({0: {"ready": True}, 1: {"ready": False, "state": "retiring"}})[0]


def test_a_retired_workers_directory_goes_unless_its_spool_holds_actions(tmp_path: Path) -> None:
    empty, holding = tmp_path / "worker-1", tmp_path / "worker-2"
    for root in (empty, holding):
        (root / "redis.pool1" / "lane-0").mkdir(parents=True)
        (root / "redis.pool1" / "layout").write_text("lanes 1 hash crc32-fibonacci\n")
    (holding / "redis.pool1" / "lane-0" / "00000001.seg").write_bytes(b"an action")
    assert clear_retired(empty) and not empty.exists()
    assert not clear_retired(holding)
    assert (holding / "redis.pool1" / "lane-0" / "00000001.seg").read_bytes() == b"an action"
    assert leftover_workers(tmp_path, 1) == [2]  # the start after it still warns about that one


def test_every_workers_session_is_the_bridges_own_in_mosquittos_log() -> None:
    from bridge.brokers.external.mqtt.mosquitto_log import MosquittoLog

    log = MosquittoLog("n", "hb-w1")

    def connected(clientid: str) -> object:
        line = f"1700000000: New client connected from 10.0.0.5:41000 as {clientid} (p5, c0, k30)."
        return log.parse("$SYS/broker/log/N", line.encode())

    assert connected("hb") is None and connected("hb-w1") is None and connected("hb-w7") is None
    assert connected("device-1") is not None


def test_run_refuses_what_check_refuses_before_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = _home(tmp_path, POOL + "broker.mode = embedded\n")
    code = main(["run", "-c", str(home / "bridge.conf"), "-r", str(home / "rules"), "--workers", "2"])
    _out, err = capsys.readouterr()
    assert code == 2
    assert err.splitlines()[0].startswith(f"{home / 'bridge.conf'}:2:15: --workers 2 needs broker.mode = emqx or mqtt")


@pytest.mark.parametrize("mode", ["mqtt", "emqx"])
def test_only_worker_zero_subscribes_to_client_events(tmp_path: Path, mode: str) -> None:
    from bridge.app import Paths, load_all
    from bridge.brokers.external.factory import make_external_source
    from bridge.brokers.external.mqtt.source import MqttSource
    from bridge.msgid import MsgIdGenerator

    config_text = MQTT.replace("mqtt", mode, 1) + "broker.shared_group = g\n" + POOL
    home = _home(tmp_path, config_text, RULES)

    def subscriptions(worker: int) -> list[str]:
        config, rules = load_all(Paths(home / "bridge.conf", home / "rules"))
        if worker:
            become_worker(config, worker, 2)
        source = make_external_source(config, rules, MsgIdGenerator())
        assert isinstance(source, MqttSource)
        return [topic for topic, _qos in source.subscriptions()]

    first, second = subscriptions(0), subscriptions(1)
    assert second == ["$share/g/t/#"]  # messages only
    assert first[0] == "$share/g/t/#" and len(first) > 1 and all(t.startswith("$share/g/") for t in first)


async def test_the_channel_answers_and_skips_an_answer_given_up_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    import socket

    from bridge.workers import channel

    ours, theirs = socket.socketpair()
    metrics = Metrics()
    metrics.events["message.publish"] = 7
    served = asyncio.create_task(channel.answer_supervisor(theirs, metrics.fresh_families, lambda: (True, {"x": 1})))
    end = channel.SupervisorEnd(ours)
    assert await end.ask("health") == {"ready": True, "detail": {"x": 1}}
    [events, *_] = families_from_json(await end.ask("metrics"))
    assert events.samples == [Sample("hookbridge_events_total", {"hookpoint": "message.publish"}, 7)]
    end.close()
    await asyncio.wait_for(served, 5)  # the worker side ends when the supervisor's end closes

    # a worker that answers the first question too late: the second gets its own answer
    ours, theirs = socket.socketpair()
    monkeypatch.setattr(channel, "ASK_TIMEOUT", 0.2)
    reader, writer = await asyncio.open_unix_connection(sock=theirs)
    end = channel.SupervisorEnd(ours)
    first = asyncio.create_task(end.ask("health"))
    number = (await reader.readline()).split()[0].decode()
    with pytest.raises(TimeoutError):
        await first
    writer.write(json.dumps({"id": number, "answer": "late"}).encode() + b"\n")
    second = asyncio.create_task(end.ask("health"))
    number = (await reader.readline()).split()[0].decode()
    writer.write(json.dumps({"id": number, "answer": "on time"}).encode() + b"\n")
    assert await second == "on time"
    end.close()
    writer.close()
