"""hookbridge installed outside the checkout, as a user installs it (a wheel, or the image's
`pip install .`), and the README's "Five minutes with it" walkthrough run against it.

Nothing here uses the checkout's .venv for what it runs: a fresh virtualenv is made from the
interpreter the checkout's venv was made from (the image's is python:3.11, the same line), and
its processes get an environment without PYTHONPATH or VIRTUAL_ENV, started outside the checkout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

import redis as redis_sync

from support.process import free_port

NODE = "hookbridge@127.0.0.1"  # config/bridge.conf's node.name
WAIT = 120.0  # seconds before a wait gives up: a guard against a hang, not a measure


def fresh_virtualenv(where: Path) -> Path:
    """A new virtualenv at `where`, from the base interpreter (not the checkout's venv); its bin/."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(where)], check=True, env=clean_environment())
    return where / "bin"


def clean_environment(bin_dir: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a user's shell: no trace of the checkout's venv or of pytest's paths."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    paths = [p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p]
    env["PATH"] = os.pathsep.join([str(bin_dir), *paths] if bin_dir else paths)
    return {**env, **extra}


def wait_for(
    check: Callable[[], bool], what: str, process: subprocess.Popen[bytes] | None = None, log: Path | None = None
) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        if process is not None and process.poll() is not None:
            tail = log.read_text()[-3000:] if log is not None else ""
            raise AssertionError(f"exited ({process.returncode}) while waiting for {what}:\n{tail}")
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {WAIT}s waiting for {what}")
        time.sleep(0.05)


class RunningBridge:
    """`hookbridge run` started as a user starts it: an argv, a folder, an environment."""

    def __init__(self, argv: list[str], cwd: Path, env: Mapping[str, str], log: Path, shell: bool = False) -> None:
        self.metrics_port = int(env["HOOKBRIDGE_METRICS_LISTEN"].rsplit(":", 1)[1])
        self.mqtt_port = int(env["HOOKBRIDGE_MQTT_LISTEN"].rsplit(":", 1)[1])
        self.log = log
        with open(log, "ab") as out:
            command: str | list[str] = argv[0] if shell else argv
            self.process = subprocess.Popen(
                command, cwd=cwd, env=dict(env), stdout=out, stderr=out, shell=shell, start_new_session=True
            )
        wait_for(lambda: self.health() == 200, "the bridge to answer /healthz with 200", self.process, log)

    def health(self) -> int | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/healthz", timeout=2) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return None

    def stop(self) -> int:
        """SIGTERM to the bridge, as `docker stop` and systemd send it: it drains and exits 0. Of a
        README line (`... && hookbridge run`), the shell waits for the bridge and exits with its status."""
        if self.process.poll() is None:
            os.kill(self._bridge_pid(), signal.SIGTERM)
        return self.process.wait(WAIT)

    def _bridge_pid(self) -> int:
        pid = self.process.pid
        while True:  # down the chain of only children: bash -c "... && hookbridge run" -> hookbridge
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if len(children) != 1:
                return pid
            pid = int(children[0])


def bridge_environment(bin_dir: Path, redis_port: int) -> dict[str, str]:
    """What config/bridge.conf reads from the environment, set for this machine's test servers."""
    return clean_environment(
        bin_dir,
        HOOKBRIDGE_MQTT_LISTEN=f"127.0.0.1:{free_port()}",
        HOOKBRIDGE_METRICS_LISTEN=f"127.0.0.1:{free_port()}",
        REDIS_SERVER=f"127.0.0.1:{redis_port}",
    )


def _mqtt(tool: str, port: int, *args: str, timeout: float = WAIT) -> str:
    done = subprocess.run([tool, "-p", str(port), *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode in (0, 27), f"{tool} {' '.join(args)}: {done.returncode} {done.stderr}"  # 27: -W ran out
    return done.stdout


def readme_walkthrough(port: int, redis: redis_sync.Redis) -> None:
    """README.md, "Five minutes with it": online status, stored messages, offline messages; with
    the README's own mosquitto_sub / mosquitto_pub commands (on the bridge's port) and Redis reads."""
    # Online status: a client stays connected while the keys are read.
    sub = subprocess.Popen(
        ["mosquitto_sub", "-p", str(port), "-i", "sub_client", "-c", "-q", "1", "-t", "sub_client/#", "-v"]
    )
    try:
        wait_for(lambda: redis.hget("mqtt:client:sub_client", "state") == b"1", "sub_client online in Redis")
        client = redis.hgetall("mqtt:client:sub_client")
        assert client.keys() == {b"state", b"online_at", b"offline_at", b"node"}
        assert client[b"node"] == NODE.encode() and client[b"offline_at"] == b"undefined"
        assert redis.hget(f"mqtt:node:{NODE}", "sub_client") == client[b"online_at"]
    finally:
        sub.terminate()
        sub.wait(WAIT)
    wait_for(lambda: redis.hget("mqtt:client:sub_client", "state") == b"0", "sub_client offline in Redis")
    assert redis.hget(f"mqtt:node:{NODE}", "sub_client") is None

    # Stored messages: QoS 1 and 2 per topic, with their details and expiry.
    _mqtt("mosquitto_pub", port, "-i", "sub_client", "-t", "up/upstream_topic", "-q", "2", "-m", '{ "cmd": "reboot" }')
    wait_for(lambda: redis.zcard("mqtt:msg:up/upstream_topic") == 1, "the message stored")
    (msgid,) = redis.zrange("mqtt:msg:up/upstream_topic", 0, -1)
    details = redis.hgetall(b"mqtt:msg:" + msgid)
    assert {k: details[k] for k in (b"id", b"from", b"qos", b"topic", b"payload", b"retain")} == {
        b"id": msgid,
        b"from": b"sub_client",
        b"qos": b"2",
        b"topic": b"up/upstream_topic",
        b"payload": b'{ "cmd": "reboot" }',
        b"retain": b"false",
    }
    assert 0 < redis.ttl(b"mqtt:msg:" + msgid) <= 86400

    # Offline messages: a persistent session gets what was published while it was away, in order.
    _mqtt("mosquitto_sub", port, "-i", "worker", "-c", "-q", "1", "-t", "queue/#", "-v", "-W", "1")
    for n in (1, 2, 3):
        _mqtt("mosquitto_pub", port, "-t", "queue/jobs", "-q", "1", "-m", f"job {n}")
    wait_for(lambda: redis.zcard("mqtt:msg:queue/jobs") == 3, "three jobs stored")
    # The README's subscriber stays until Ctrl-C; here `-C 3` makes it leave after the third message,
    # closing its socket at once. Without --nodelay, Nagle's algorithm may still hold its last
    # PUBACKs then (a small write waits for the acknowledgement of the one before), and a close
    # with data unread (the SUBACK of its SUBSCRIBE, which follows the queued messages the broker
    # sends as soon as the session is back) resets the connection and drops them: the broker
    # never gets those acks, the jobs stay queued for the worker's next connection, and this step
    # waited in vain (about one run in six against the compiled build without it, none of 24 with it).
    got = _mqtt("mosquitto_sub", port, "-i", "worker", "-c", "-q", "1", "-t", "queue/#", "-v", "-C", "3", "--nodelay")
    assert got.splitlines() == ["queue/jobs job 1", "queue/jobs job 2", "queue/jobs job 3"]
    wait_for(lambda: redis.zcard("mqtt:msg:queue/jobs") == 0, "the acks to delete the jobs (queue mode)")
