"""Password hashes as EMQX 4 stored them, and Mosquitto's password file, against known vectors
and files the real `mosquitto_passwd` writes."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from bridge.brokers.embedded.auth.hashes import PasswordHash, parse_password_hash
from bridge.brokers.embedded.auth.passwords import PasswordFileError, load_password_file, parse_password_file
from bridge.conf.config import parse_config
from bridge.conf.errors import ConfErrors

# (setting, password, salt, stored): EMQX 4's documented sha256,salt example, RFC 6070's PBKDF2-HMAC-SHA1
# vectors, the Openwall bcrypt vector and well-known digests of "public".
VECTORS = [
    ("plain", b"public", "", "public"),
    ("md5", b"public", "", "4c9184f37cff01bcdc32dc486ec36961"),
    ("sha", b"public", "", "61c9b2b17db77a27841bbeeabff923448b0f6388"),
    ("sha256,salt", b"public", "slat_foo123", "44edc2d57cde8d79c98145003e105b90a14f1460b79186ea9cfe83942fc5abb5"),
    ("pbkdf2,sha,1,20", b"password", "salt", "0c60c80f961f0e71f3a9b524af6012062fe037a6"),
    ("pbkdf2,sha,4096,20", b"password", "salt", "4b007901b765489abead49d926f721d065a429c1"),
    ("bcrypt", b"U*U", "", "$2a$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW"),
    (
        "salt,bcrypt",
        b"U*U",
        "$2a$05$CCCCCCCCCCCCCCCCCCCCC.",
        "$2a$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW",
    ),
]


@pytest.mark.parametrize(("setting", "password", "salt", "stored"), VECTORS)
def test_known_vectors_match_and_a_wrong_password_does_not(
    setting: str, password: bytes, salt: str, stored: str
) -> None:
    method = parse_password_hash(setting)
    assert method.matches(password, stored, salt)
    assert not method.matches(password + b"x", stored, salt)


def test_the_salt_goes_before_or_after_the_password() -> None:
    assert PasswordHash("sha512", salt="prefix").digest(b"pw", "NaCl") == hashlib.sha512(b"NaClpw").hexdigest()
    assert PasswordHash("sha512", salt="suffix").digest(b"pw", "NaCl") == hashlib.sha512(b"pwNaCl").hexdigest()
    assert PasswordHash("md5").digest(b"pw", "ignored") == hashlib.md5(b"pw").hexdigest()


def test_bcrypt_refuses_what_is_not_a_bcrypt_string() -> None:
    assert not parse_password_hash("bcrypt").matches(b"pw", "not-a-hash", "")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("sha3", "unknown password hash 'sha3'"),
        ("pbkdf2,sha256,0,20", "pbkdf2 iterations '0'"),
        ("pbkdf2,whirlpool,1000,20", "pbkdf2 mac 'whirlpool'"),
        ("pbkdf2,sha256", "pbkdf2 takes pbkdf2,<mac>,<iterations>,<dklen>"),
        ("salt,plain", "unknown password hash"),
    ],
)
def test_bad_password_hash_settings_are_named(text: str, problem: str) -> None:
    with pytest.raises(ConfErrors) as caught:
        parse_config("bridge.conf", f"broker.auth.password_hash = {text}\n")
    assert f"bridge.conf:1:29: broker.auth.password_hash: {problem}" in str(caught.value)


needs_tool = pytest.mark.skipif(shutil.which("mosquitto_passwd") is None, reason="mosquitto_passwd not installed")


@needs_tool
def test_files_written_by_mosquitto_passwd_in_both_formats(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    subprocess.run(["mosquitto_passwd", "-c", "-b", str(path), "alice", "s3cret"], check=True)  # $7$ default
    subprocess.run(["mosquitto_passwd", "-H", "sha512", "-b", str(path), "bob", "hunter2"], check=True)
    text = path.read_text()
    assert "alice:$7$" in text and "bob:$6$" in text
    users = load_password_file(str(path))
    assert users["alice"].matches(b"s3cret") and not users["alice"].matches(b"s3cret ")
    assert users["bob"].matches(b"hunter2") and not users["bob"].matches(b"Hunter2")


def test_every_bad_line_is_reported_with_its_position_and_no_hash() -> None:
    text = "# users\n\nalice:plaintext\nbob:$7$101$!!!$AAAA\nno colon here\ncarol:$5$abc$def\n"
    with pytest.raises(PasswordFileError) as caught:
        parse_password_file("etc/passwd", text)
    assert str(caught.value).splitlines() == [
        "etc/passwd:3:7: user 'alice': the password is not hashed (run `mosquitto_passwd -U` on the file)",
        "etc/passwd:4:5: user 'bob': the salt or hash is not base64",
        "etc/passwd:5:1: not a `username:hash` line",
        "etc/passwd:6:7: user 'carol': not a $7$ (PBKDF2-SHA512) or $6$ (SHA-512) hash as mosquitto_passwd writes them",
    ]
    assert "plaintext" not in str(caught.value)


def test_check_rejects_a_bad_password_file_and_an_unknown_pool(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    path.write_text("alice:secret\n")
    with pytest.raises(ConfErrors) as caught:
        parse_config("bridge.conf", f"broker.auth.password_file = {path}\nbroker.auth.backend = redis.users\n")
    assert str(caught.value).splitlines() == [
        f"bridge.conf:1:29: broker.auth.password_file: {path}:1:7: user 'alice': the password is not hashed "
        "(run `mosquitto_passwd -U` on the file)",
        "bridge.conf:2:23: broker.auth.backend: no pool redis.users; no pool is configured",
    ]


@pytest.mark.parametrize(
    ("listener", "anonymous", "takeover"),
    [("127.0.0.1:1883", True, "same_user"), ("[::1]:1883", True, "same_user"), ("0.0.0.0:1883", False, "same_user")],
)
def test_defaults_follow_the_listener_and_the_users(listener: str, anonymous: bool, takeover: str) -> None:
    from bridge.brokers.embedded.auth import allow_anonymous, takeover_of

    with_users = parse_config(
        "c", f"broker.listener.tcp = {listener}\nbroker.auth.backend = redis.p\nbackend.redis.p.server = 127.0.0.1:1\n"
    )
    assert allow_anonymous(with_users) is anonymous and takeover_of(with_users) == takeover
    if anonymous:  # off loopback with nothing to log in with, the config is refused (test_listener_config)
        without = parse_config("c", f"broker.listener.tcp = {listener}\n")
        assert allow_anonymous(without) is True and takeover_of(without) == "any"
    assert takeover_of(parse_config("c", "broker.takeover = same_user\n")) == "same_user"


async def test_a_file_hash_with_many_iterations_is_checked_in_a_worker_thread_too(tmp_path: Path) -> None:
    from bridge.brokers.embedded.auth.passwords import PasswordFile

    salt = b"0123456789ab"
    digest = hashlib.pbkdf2_hmac("sha512", b"pw", salt, 20_000, 64)
    (tmp_path / "passwd").write_text(
        f"slow:$7$20000${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}\n"
    )
    users = PasswordFile(str(tmp_path / "passwd"))
    assert await users.check("slow", b"pw")
    assert not await users.check("slow", b"pw2")
    assert not await users.check("nobody", b"pw")
