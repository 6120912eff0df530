"""auth/pbkdf2.py gives hashlib.pbkdf2_hmac's bytes for every MAC the password sources name."""

from __future__ import annotations

import hashlib

import pytest

from bridge.brokers.embedded.auth.pbkdf2 import pbkdf2_hmac


@pytest.mark.parametrize("mac", ["md5", "sha1", "sha224", "sha256", "sha384", "sha512"])
@pytest.mark.parametrize(
    ("password", "salt", "iterations", "length"),
    [
        (b"secret", b"0123456789ab", 101, 64),  # mosquitto_passwd's $7$
        (b"", b"", 1, 1),  # empty password and salt
        ("pässwörd".encode(), b"\x00\xff" * 8, 1000, 20),  # EMQX's default pbkdf2,sha256,1000,20
        (b"x" * 300, b"s", 3, 1024),  # a key longer than the block, the longest dklen `check` takes
    ],
)
def test_the_same_bytes_as_hashlib(mac: str, password: bytes, salt: bytes, iterations: int, length: int) -> None:
    assert pbkdf2_hmac(mac, password, salt, iterations, length) == hashlib.pbkdf2_hmac(
        mac, password, salt, iterations, length
    )
