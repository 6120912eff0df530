"""PBKDF2-HMAC for the password checks (`$7$` lines of a password file, EMQX's `pbkdf2` hashes).

The same function as `hashlib.pbkdf2_hmac`, computed by `cryptography` with the OpenSSL its wheel
brings: a fleet that logs in at once pays it once per device, and Mosquitto's `$7$` (101 rounds of
SHA-512) took 55 µs through the system's OpenSSL 3.0 against 40 µs so (docs/benchmarks.md).
"""

from __future__ import annotations

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

# hashlib's names of the MACs the password sources name (EMQX's `sha` is `sha1` by then).
_HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "md5": hashes.MD5,
    "sha1": hashes.SHA1,
    "sha224": hashes.SHA224,
    "sha256": hashes.SHA256,
    "sha384": hashes.SHA384,
    "sha512": hashes.SHA512,
}


def pbkdf2_hmac(mac: str, password: bytes, salt: bytes, iterations: int, length: int) -> bytes:
    """`hashlib.pbkdf2_hmac(mac, password, salt, iterations, length)`, the same bytes."""
    return PBKDF2HMAC(_HASHES[mac](), length, salt, iterations).derive(password)
