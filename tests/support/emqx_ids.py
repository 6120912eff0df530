"""Ports of EMQX's own id ENCODERS, for tests only: the texts EMQX wrote, made as EMQX made them,
so the decoder in bridge/emqx_msgid.py is tested against the encoders and not against itself.

- `emqx_base62`: emqx/emqx src/emqx_base62.erl, `encode/1` of an integer (identical in v3.0.0
  and v4.4.19): `integer_to_binary(I)`, then 6-bit groups of that binary, `encode_char/1`.
- `emqttd_base62`: emqx/emqx v2.3.11 src/emqttd_base62.erl, `encode/1` (positional, 0-9A-Za-z).
- `to_hexstr`: v4.4.19 src/emqx_guid.erl (`emqx_misc:bin2hexstr_a_f_upper`, 32 digits); v2.3.11
  emqttd_guid.erl's `integer_to_list(I, 16)` (no leading zeros).
- `guid`: emqx_guid's layout `<<Ts:64, NPid:48, Seq:16>>`.
"""

from __future__ import annotations

import base64


def _encode_char(index: int) -> str:
    # encode_char/1: I < 26 -> $A + I; I < 52 -> $a + I - 26; I < 61 -> $0 + I - 52; else [$9, $A + I - 61]
    if index < 26:
        return chr(ord("A") + index)
    if index < 52:
        return chr(ord("a") + index - 26)
    if index < 61:
        return chr(ord("0") + index - 52)
    return "9" + chr(ord("A") + index - 61)


def emqx_base62_encode_binary(data: bytes) -> str:
    """encode/2 over a binary: <<I1:6, I2:6, I3:6, I4:6, Rest>>; then <<I1:6, I2:6, I3:4>>; <<I1:6, I2:2>>."""
    out = []
    whole = len(data) - len(data) % 3
    for i in range(0, whole, 3):
        bits = int.from_bytes(data[i : i + 3], "big")
        out += [_encode_char(bits >> 18 & 63), _encode_char(bits >> 12 & 63), _encode_char(bits >> 6 & 63)]
        out.append(_encode_char(bits & 63))
    rest = data[whole:]
    if len(rest) == 2:
        bits = int.from_bytes(rest, "big")  # 16 bits: 6, 6, 4
        out += [_encode_char(bits >> 10 & 63), _encode_char(bits >> 4 & 63), _encode_char(bits & 15)]
    elif len(rest) == 1:
        out += [_encode_char(rest[0] >> 2), _encode_char(rest[0] & 3)]
    return "".join(out)


def emqx_base62(value: int) -> str:
    """emqx_guid:to_base62(<<I:128>>) = emqx_base62:encode(I) = encode(integer_to_binary(I))."""
    return emqx_base62_encode_binary(str(value).encode())


def emqttd_base62(value: int) -> str:
    """emqttd_base62:encode(I) for I > 0: the digits of I in base 62, most significant first."""
    assert value > 0  # the guard `I > 0` of encode/1
    chars = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        out = chars[value % 62] + out
        if value < 62:
            return out
        value //= 62


def to_hexstr(value: int) -> str:
    """emqx_guid:to_hexstr (4.x): 32 upper-case hex digits."""
    return f"{value:032X}"


def to_hexstr_v2(value: int) -> str:
    """emqttd_guid:to_hexstr (2.x): integer_to_list(I, 16), no leading zeros."""
    return f"{value:X}"


def mongo_base64(value: int) -> str:
    """The MongoDB backend's msgid: the 16 bytes of the guid in base64."""
    return base64.b64encode(value.to_bytes(16, "big")).decode()


def guid(ts_us: int, npid: int, seq: int) -> int:
    """<<Ts:64, NPid:48, Seq:16>> (emqx_guid:bin/1)."""
    return ts_us << 64 | npid << 16 | seq


ENCODERS = {
    "emqx_base62": emqx_base62,
    "emqttd_base62": emqttd_base62,
    "hex": to_hexstr,
}
