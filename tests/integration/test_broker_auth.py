"""Who may log in to the embedded broker (docs/security.md): users from a password file written by the real
`mosquitto_passwd` and from a real Redis with every EMQX 4 password hash, real paho clients, the
lookup cache counted by Redis itself, and a user database that is down."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import bcrypt
import pytest
import redis as redis_sync

from bridge.brokers.embedded.access import Login
from bridge.brokers.embedded.auth import AuthGate, make_gate, permissions_for
from bridge.brokers.embedded.codec import MQTT_5, Connect, Disconnect
from bridge.brokers.embedded.codec.packets import Connack
from support.bridges import BridgeFactory, mqtt_port
from support.conf import make_config
from support.mqtt import Client
from support.process import free_port
from support.raw import RawClient
from support.services import start_redis, stop_redis

pytestmark = pytest.mark.skipif(shutil.which("mosquitto_passwd") is None, reason="mosquitto_passwd not installed")

NO_RULES = ""  # the logins are what is tested; no event needs a rule
# paho reports a 3.1.1 CONNACK's return code as the 5.0 reason it stands for: 4 as 0x86, 3 as 0x88
BAD_CREDENTIALS, SERVER_UNAVAILABLE = 0x86, 0x88


def passwd(path: Path, user: str, password: str, *, sha512: bool = False) -> None:
    """Add or change a user with the real tool ($7$ PBKDF2 by default, $6$ with -H sha512)."""
    command = ["mosquitto_passwd", *(["-H", "sha512"] if sha512 else []), "-b", str(path), user, password]
    if not path.exists():
        command.insert(1, "-c")
    subprocess.run(command, check=True, capture_output=True)


async def connack(clients: Callable[..., Client], port: int, user: str | None, password: str | None) -> int:
    """The CONNACK return code a paho client gets (3.1.1)."""
    client = clients(port, f"c-{user}-{password}", username=user, password=password)
    code = (await client.connect()).reason
    await client.close()
    return code


async def raw_connack(port: int, user: str | None, password: bytes | None, *, level: int = 4) -> int:
    client = await RawClient.open(port, level)
    try:
        await client.send(Connect(f"raw-{user}", level, username=user, password=password))
        answer = await client.recv()
        assert isinstance(answer, Connack), answer
        if answer.reason_code == 0:
            await client.send(Disconnect())
        return answer.reason_code
    finally:
        client.abort()


async def test_password_file_users_right_and_wrong_passwords(
    tmp_path: Path, make_bridge: BridgeFactory, paho_clients: Callable[..., Client]
) -> None:
    path = tmp_path / "passwd"
    passwd(path, "alice", "s3cret")  # $7$
    passwd(path, "bob", "hunter2", sha512=True)  # $6$
    bridge = await make_bridge(NO_RULES, f"broker.auth.password_file = {path}\n")
    port = mqtt_port(bridge)
    assert await connack(paho_clients, port, "alice", "s3cret") == 0
    assert await connack(paho_clients, port, "bob", "hunter2") == 0
    assert await connack(paho_clients, port, "alice", "hunter2") == BAD_CREDENTIALS
    assert await connack(paho_clients, port, "bob", "s3cret") == BAD_CREDENTIALS
    assert await connack(paho_clients, port, "mallory", "s3cret") == BAD_CREDENTIALS
    assert await connack(paho_clients, port, "alice", None) == BAD_CREDENTIALS
    assert await raw_connack(port, "alice", b"wrong") == 4  # on the wire: 3.1.1 return code 4
    assert await raw_connack(port, "alice", b"wrong", level=MQTT_5) == 0x86
    assert bridge.broker.refused["login_bad_credentials"] == 6


async def test_the_password_file_is_read_again_on_reload_and_a_broken_one_keeps_the_old_users(
    tmp_path: Path, make_bridge: BridgeFactory, paho_clients: Callable[..., Client]
) -> None:
    path = tmp_path / "passwd"
    passwd(path, "alice", "old-password")
    bridge = await make_bridge(NO_RULES, f"broker.auth.password_file = {path}\n")
    port = mqtt_port(bridge)
    passwd(path, "alice", "new-password")
    passwd(path, "carol", "carols")
    assert await connack(paho_clients, port, "alice", "new-password") == BAD_CREDENTIALS  # not read yet
    await bridge.reload()
    assert await connack(paho_clients, port, "alice", "new-password") == 0
    assert await connack(paho_clients, port, "alice", "old-password") == BAD_CREDENTIALS
    assert await connack(paho_clients, port, "carol", "carols") == 0
    path.write_text(path.read_text() + "dave:not-hashed\n")
    await bridge.reload()
    assert await connack(paho_clients, port, "carol", "carols") == 0  # the users read before stay


def stored(setting: str, password: str) -> tuple[str, str]:
    """(password, salt) fields as EMQX 4 users were stored for `setting`."""
    salt = "NaCl-42"
    raw = password.encode()
    if setting == "plain":
        return password, ""
    if setting == "bcrypt":
        return bcrypt.hashpw(raw, bcrypt.gensalt(4)).decode(), ""
    if setting.startswith("pbkdf2"):
        _, mac, iterations, dklen = setting.split(",")
        return hashlib.pbkdf2_hmac(mac, raw, salt.encode(), int(iterations), int(dklen)).hex(), salt
    name = setting.replace("salt", "").strip(",")
    name = {"sha": "sha1"}.get(name, name)
    if setting.startswith("salt,"):
        return hashlib.new(name, salt.encode() + raw).hexdigest(), salt
    if setting.endswith(",salt"):
        return hashlib.new(name, raw + salt.encode()).hexdigest(), salt
    return hashlib.new(name, raw).hexdigest(), ""


HASHES = ["plain", "md5", "sha", "sha256", "sha512", "salt,sha256", "sha512,salt", "pbkdf2,sha256,1000,20", "bcrypt"]


@pytest.mark.parametrize("setting", HASHES)
async def test_redis_users_with_each_password_hash(
    setting: str, redis_db: redis_sync.Redis, make_bridge: BridgeFactory, paho_clients: Callable[..., Client]
) -> None:
    password, salt = stored(setting, "pa55-word")
    redis_db.hset("mqtt_user:alice", mapping={"password": password, "salt": salt, "is_superuser": 0})
    bridge = await make_bridge(NO_RULES, f"broker.auth.backend = redis.pool1\nbroker.auth.password_hash = {setting}\n")
    port = mqtt_port(bridge)
    assert await connack(paho_clients, port, "alice", "pa55-word") == 0
    assert await connack(paho_clients, port, "alice", "pa55-wordx") == BAD_CREDENTIALS
    assert await connack(paho_clients, port, "bob", "pa55-word") == BAD_CREDENTIALS


async def test_a_thousand_connects_of_one_user_cost_a_handful_of_lookups(
    redis_db: redis_sync.Redis, make_bridge: BridgeFactory
) -> None:
    password, salt = stored("salt,sha256", "pw")
    redis_db.hset("mqtt_user:fleet", mapping={"password": password, "salt": salt})
    bridge = await make_bridge(NO_RULES, "broker.auth.backend = redis.pool1\nbroker.auth.password_hash = salt,sha256\n")
    port = mqtt_port(bridge)
    redis_db.config_resetstat()
    for _ in range(1000):
        assert await raw_connack(port, "fleet", b"pw") == 0
    # Arriving together, 200 more share one read (after the cache forgot the user).
    assert bridge.broker.gate is not None and bridge.broker.gate.users is not None
    bridge.broker.gate.users.clear()
    codes = await asyncio.gather(*(raw_connack(port, "fleet", b"pw") for _ in range(200)))
    assert set(codes) == {0}
    calls = redis_db.info("commandstats")["cmdstat_hmget"]["calls"]
    assert calls <= 3, f"{calls} HMGETs for 1,200 CONNECTs"
    assert bridge.broker.gate.users.store.lookups == calls


async def test_a_superuser_from_redis_may_do_everything(redis_db: redis_sync.Redis, redis_port: int) -> None:
    redis_db.hset("mqtt_user:root", mapping={"password": "pw", "is_superuser": 1})
    redis_db.hset("mqtt_user:user", mapping={"password": "pw", "is_superuser": "0"})
    config = make_config(redis_port, "broker.auth.backend = redis.pool1\nbroker.auth.password_hash = plain\n")
    gate = make_gate(config)
    try:
        root = await gate.login(Login("c1", "root", b"pw", "tcp", "127.0.0.1:1"))
        user = await gate.login(Login("c2", "user", b"pw", "tcp", "127.0.0.1:2"))
    finally:
        await gate.close()
    assert root.ok and root.authenticated and root.permissions.superuser
    assert root.permissions.may_publish("$SYS/broker/x")
    assert user.ok and not user.permissions.superuser
    assert not user.permissions.may_publish("$SYS/broker/x")


async def test_anonymous_and_unknown_users_when_anonymous_access_is_off() -> None:
    gate = AuthGate(allow_anonymous=False, permissions_for=permissions_for)
    anonymous = await gate.login(Login("c1", None, None, "tcp", "10.0.0.1:1"))
    named = await gate.login(Login("c2", "someone", b"pw", "tcp", "10.0.0.1:2"))
    by_certificate = await gate.login(Login("c3", None, None, "ssl", "10.0.0.1:3", cert_cn="device-7"))
    assert (anonymous.ok, anonymous.reason) == (False, "login_not_authorized")
    assert (named.ok, named.reason) == (False, "login_not_authorized")
    assert by_certificate.ok and by_certificate.authenticated and by_certificate.username == "device-7"
    open_gate = AuthGate(allow_anonymous=True, permissions_for=permissions_for)
    verdict = await open_gate.login(Login("c4", None, None, "tcp", "127.0.0.1:4"))
    assert verdict.ok and not verdict.authenticated


async def test_a_user_database_that_is_down_refuses_logins_and_the_file_still_works(
    tmp_path: Path, make_bridge: BridgeFactory, paho_clients: Callable[..., Client]
) -> None:
    path = tmp_path / "passwd"
    passwd(path, "local", "pw")
    dead = free_port()  # nothing listens there
    bridge = await make_bridge(
        NO_RULES,
        f"broker.auth.password_file = {path}\nbroker.auth.backend = redis.users\n"
        f"backend.redis.users.server = 127.0.0.1:{dead}\nbackend.redis.users.request_timeout = 500ms\n",
    )
    port = mqtt_port(bridge)
    assert await connack(paho_clients, port, "remote", "pw") == SERVER_UNAVAILABLE
    assert await raw_connack(port, "remote", b"pw") == 3  # 3.1.1: server unavailable
    assert await raw_connack(port, "remote", b"pw", level=MQTT_5) == 0x88
    assert await connack(paho_clients, port, "local", "pw") == 0
    assert bridge.broker.refused["login_backend_down"] == 3


async def test_a_redis_stopped_under_the_bridge_refuses_new_logins(
    make_bridge: BridgeFactory, paho_clients: Callable[..., Client]
) -> None:
    users_port = free_port()
    await asyncio.to_thread(start_redis, users_port)
    try:
        users = redis_sync.Redis(port=users_port)
        users.hset("mqtt_user:alice", mapping={"password": "pw"})
        users.hset("mqtt_user:bob", mapping={"password": "pw"})
        users.close()
        bridge = await make_bridge(
            NO_RULES,
            "broker.auth.backend = redis.users\nbroker.auth.password_hash = plain\n"
            f"backend.redis.users.server = 127.0.0.1:{users_port}\nbackend.redis.users.request_timeout = 500ms\n",
        )
        port = mqtt_port(bridge)
        assert await connack(paho_clients, port, "alice", "pw") == 0
    finally:
        await asyncio.to_thread(stop_redis, users_port)
    assert await connack(paho_clients, port, "bob", "pw") == SERVER_UNAVAILABLE  # never let in
    assert await connack(paho_clients, port, "bob", "wrong") == SERVER_UNAVAILABLE
    assert bridge.broker.refused["login_backend_down"] == 2


async def test_the_cache_is_bounded_in_entries_and_time(redis_db: redis_sync.Redis, redis_port: int) -> None:
    from actions.redis.auth import RedisUsers
    from bridge.brokers.embedded.auth.users import CachedUsers

    config = make_config(redis_port)
    redis_db.hset("mqtt_user:a", mapping={"password": "1"})
    users = CachedUsers(RedisUsers(config.pools["redis.pool1"]), ttl=30, entries=2)
    try:
        for name in ("a", "b", "a", "c", "b", "a"):  # b is evicted by c, then a by b
            await users.find(name)
        assert users.store.lookups == 5
        assert (await users.find("a")) is not None and (await users.find("nobody")) is None
        expiring = CachedUsers(users.store, ttl=0)
        before = users.store.lookups
        await expiring.find("a")
        await expiring.find("a")
        assert users.store.lookups == before + 2
    finally:
        await users.close()
