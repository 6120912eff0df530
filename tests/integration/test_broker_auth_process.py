"""The broker's users in a bridge run as a user runs it: SIGHUP reads the password file again, and
no password (a client's wrong one, the file's, the user database's, one inside a URL) appears in
the log, /metrics or /healthz."""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from support.process import BridgeProcess

pytestmark = pytest.mark.skipif(shutil.which("mosquitto_passwd") is None, reason="mosquitto_passwd not installed")

WRONG = "Wr0ng-Client-Pa55"
FILE_OLD, FILE_NEW = "File-Pa55-0ld", "File-Pa55-N3w"
POOL_PASSWORD = "P00l-Redis-Pa55"  # the test Redis has none: AUTH fails, the user database is down
URL_PASSWORD = "Url-Pa55-in-a-name"  # every URL setting refuses credentials; a client's user name may hold them


def login(port: int, user: str, password: str) -> int:
    """The CONNACK reason a paho 3.1.1 client gets (4 shows as 0x86, 3 as 0x88), blocking."""
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"p-{user}", protocol=paho.MQTTv311)
    client.username_pw_set(user, password)
    codes: list[int] = []
    answered = threading.Event()

    def on_connect(_c: object, _u: object, _f: object, reason: paho.ReasonCode, _p: object) -> None:
        codes.append(int(reason.value))
        answered.set()

    client.on_connect = on_connect
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        assert answered.wait(10), f"no CONNACK for {user}"
    finally:
        client.disconnect()
        client.loop_stop()
    return codes[0]


@pytest.fixture
def bridge(tmp_path: Path, redis_port: int) -> Iterator[BridgeProcess]:
    passwd = tmp_path / "passwd"
    subprocess.run(["mosquitto_passwd", "-c", "-b", str(passwd), "alice", FILE_OLD], check=True)
    pools = (
        f"backend.redis.pool1.server = 127.0.0.1:{redis_port}\n"
        f"backend.redis.users.server = 127.0.0.1:{redis_port}\nbackend.redis.users.password = {POOL_PASSWORD}\n"
    )
    extra = f"broker.auth.password_file = {passwd}\nbroker.auth.backend = redis.users\nlog.level = debug\n"
    process = BridgeProcess(tmp_path, pools, "", extra)
    yield process.start()
    process.stop()


def test_sighup_reads_the_password_file_again_and_no_password_is_shown(bridge: BridgeProcess, tmp_path: Path) -> None:
    port = bridge.mqtt_port
    assert login(port, "alice", FILE_OLD) == 0
    assert login(port, "alice", WRONG) == 0x86
    assert login(port, "bob", WRONG) == 0x88  # not in the file: the database, which refuses our AUTH
    assert login(port, f"redis://dev:{URL_PASSWORD}@h", WRONG) == 0x88
    subprocess.run(["mosquitto_passwd", "-b", str(tmp_path / "passwd"), "alice", FILE_NEW], check=True)
    assert bridge.process is not None
    bridge.process.send_signal(signal.SIGHUP)
    bridge.wait_for(lambda: "password file" in bridge.log.read_text(), "the password file to be read again")
    assert login(port, "alice", FILE_NEW) == 0
    assert login(port, "alice", FILE_OLD) == 0x86

    assert bridge.metric("hookbridge_broker_refused_total", reason="login_bad_credentials") == 2
    assert bridge.metric("hookbridge_broker_refused_total", reason="login_backend_down") == 2
    log = bridge.log.read_text()
    assert "pool redis.users: no rule writes to it; broker.auth.backend reads from it" in log
    assert "login of user 'bob' refused: the user database did not answer" in log
    assert "client 'p-redis://dev:***@h' from" in log
    assert "login refused (login_bad_credentials)" in log
    shown = log + "".join(answer[1] for answer in (bridge.get("/metrics"), bridge.get("/healthz")) if answer)
    for secret in (WRONG, FILE_OLD, FILE_NEW, POOL_PASSWORD, URL_PASSWORD):
        assert secret not in shown, secret
    assert "Traceback" not in log
    assert bridge.terminate() == 0
