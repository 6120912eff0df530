"""Every text form in which EMQX wrote a message id, read back as the one 128-bit value.

An `emqx_guid` is 128 bits: a 64-bit microsecond timestamp, 48 bits of node and process, a 16-bit
sequence (bridge/msgid.py makes hookbridge's own ids the same way). EMQX wrote it in five texts
over its versions (docs/import-emqx.md#evidence-message-ids-and-retained-keys has the sources):

| form            | written by                                                  | length  | alphabet            |
|-----------------|-------------------------------------------------------------|---------|---------------------|
| `HEX`           | 4.x `emqx_guid:to_hexstr` (rule engine, `$events`), hookbridge | 32      | 0-9 A-F (a-f read)  |
| `HEX_UNPADDED`  | 2.x `emqttd_guid:to_hexstr` (`integer_to_list(I, 16)`)      | 23-31   | 0-9 A-F (a-f read)  |
| `BASE62_DECIMAL`| 3.x/4.x `emqx_guid:to_base62` = `emqx_base62:encode(I)`,    | 23-52   | A-Z a-z 0-8         |
|                 | which encodes the *decimal text* of I in 6-bit groups       |         | (`9` never appears) |
| `BASE62_V2`     | 2.x `emqttd_guid:to_base62`: I written in base 62           | 1-22    | 0-9 A-Z a-z         |
| `BASE64`        | the MongoDB backend: the 16 bytes in base64                 | 24      | base64, ends `==`   |

Why one look at a value is enough (length and alphabet never leave two readings):

- `BASE64` is the only form with `=`.
- `BASE62_DECIMAL` groups the decimal digits (bytes 0x30-0x39, `0011xxxx`) three at a time into
  four 6-bit values; the first of each group is `0011xx` (12-15: `M`-`P`), so the text always
  starts with one of `MNOP`, which no hex text holds. Its length is ceil(4 * digits / 3): an id
  with a real timestamp (one second after 1970 or later, so I >= 10**6 * 2**64 > 10**25) has 26
  digits or more, hence 35 characters or more, and every 128-bit value at most 39 digits: 52 characters.
  Only 61-63 would be escaped with `9`, and no group of a digit string reaches 58.
- `BASE62_V2` of a 128-bit value has at most 22 characters (62**22 > 2**128); the other base62
  form needs 23 or more for any id of 17 digits or more, i.e. every I >= 10**16, which is every
  guid whose timestamp is not 0.
- Hex is 23 characters or more only when it is an id (a shorter hex text is read as `BASE62_V2`):
  an id of our time needs 115 bits or more, 29 hex digits; EMQX 2.x dropped the leading zeros.

Every form decodes to the same integer, and `hookbridge_text` writes it as hookbridge does: 32
upper-case hex digits, whose string order is time order. A queue migrated from EMQX therefore
sorts with what hookbridge stores afterwards, whichever form each of its rows had.
"""

from __future__ import annotations

import base64
import binascii
import enum
import re

from bridge.errors import HookbridgeError

_MAX = 1 << 128


class IdForm(enum.Enum):
    HEX = "32 hex"
    HEX_UNPADDED = "hex without leading zeros (EMQ X 2.x)"
    BASE62_DECIMAL = "emqx_base62 of the decimal text (EMQX 3.x/4.x)"
    BASE62_V2 = "positional base62 (EMQ X 2.x)"
    BASE64 = "base64 of the 16 bytes (MongoDB)"


class UnconvertibleId(HookbridgeError, ValueError):
    """A value that is in none of EMQX's id forms (or out of the 128-bit range)."""


_HEX = re.compile(r"[0-9A-Fa-f]{32}")
_HEX_UNPADDED = re.compile(r"[0-9A-Fa-f]{23,31}")
_BASE62_V2 = re.compile(r"[0-9A-Za-z]{1,22}")
_BASE62_DECIMAL = re.compile(r"[MNOP][A-Za-z0-8]{22,51}")
_BASE64 = re.compile(r"[A-Za-z0-9+/]{22}==")

# -- emqx_base62 (emqx/emqx src/emqx_base62.erl, v3.0.0 to v4.4.19) -----------------------------
# index 0-25 `A`-`Z`, 26-51 `a`-`z`, 52-60 `0`-`8`; 61-63 as `9` + `A`-`C` (never for digits).
_V4_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz012345678"
_V4_INDEX = {char: index for index, char in enumerate(_V4_ALPHABET)}

# -- emqttd_base62 (emqx/emqx src/emqttd_base62.erl, v2.3.11): 0-9, A-Z, a-z, most significant first
_V2_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_V2_INDEX = {char: index for index, char in enumerate(_V2_ALPHABET)}


def _base62_decimal_bytes(text: str) -> bytes:
    """The bytes emqx_base62:encode/1 was given, from its output: 4 characters per 3 bytes, and a
    tail of 3 characters (6+6+4 bits) for 2 bytes or 2 characters (6+2 bits) for 1 byte.

    For 0-60 its alphabet is base64's (`A`-`Z`, `a`-`z`, `0`-`8`), so whole groups are decoded as
    base64; its tail is not (its last character holds the low bits, base64's the high ones)."""
    whole = len(text) - len(text) % 4
    out = base64.b64decode(text[:whole]) if whole else b""
    tail = [_V4_INDEX[char] for char in text[whole:]]
    if len(tail) == 3:
        if tail[2] >> 4:
            raise UnconvertibleId("its last character holds more than 4 bits")
        out += (tail[0] << 10 | tail[1] << 4 | tail[2]).to_bytes(2, "big")
    elif len(tail) == 2:
        if tail[1] >> 2:
            raise UnconvertibleId("its last character holds more than 2 bits")
        out += bytes([tail[0] << 2 | tail[1]])
    elif tail:
        raise UnconvertibleId("a length emqx_base62 never writes")
    return out


def _decode_base62_decimal(text: str) -> int:
    digits = _base62_decimal_bytes(text)
    # integer_to_binary/1 writes no sign, no leading zero: anything else was never an id
    if not digits.isdigit() or not digits.isascii() or (len(digits) > 1 and digits[:1] == b"0"):
        raise UnconvertibleId("it does not decode to the decimal text of a number")
    return int(digits)


def _decode_base62_v2(text: str) -> int:
    value = 0
    for char in text:
        value = value * 62 + _V2_INDEX[char]
    return value


def id_form(text: str) -> IdForm | None:
    """The form `text` is written in, from its length and alphabet alone (None: no id form)."""
    if _HEX.fullmatch(text):
        return IdForm.HEX
    if _HEX_UNPADDED.fullmatch(text):
        return IdForm.HEX_UNPADDED
    if _BASE62_V2.fullmatch(text):
        return IdForm.BASE62_V2
    if _BASE62_DECIMAL.fullmatch(text):
        return IdForm.BASE62_DECIMAL
    if _BASE64.fullmatch(text):
        return IdForm.BASE64
    return None


def decode(text: str) -> tuple[IdForm, int]:
    """The form of `text` and the 128-bit id it holds; UnconvertibleId if it holds none."""
    form = id_form(text)
    if form is IdForm.HEX or form is IdForm.HEX_UNPADDED:
        value = int(text, 16)
    elif form is IdForm.BASE62_V2:
        value = _decode_base62_v2(text)
    elif form is IdForm.BASE62_DECIMAL:
        value = _decode_base62_decimal(text)
    elif form is IdForm.BASE64:
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise UnconvertibleId(f"not base64: {exc}") from None
        if len(raw) != 16:
            raise UnconvertibleId("base64 of other than 16 bytes")
        value = int.from_bytes(raw, "big")
    else:
        raise UnconvertibleId("none of the forms EMQX wrote ids in")
    if value >= _MAX:
        raise UnconvertibleId("more than 128 bits")
    return form, value


def hookbridge_text(value: int) -> str:
    """hookbridge's text of a 128-bit id: 32 upper-case hex digits."""
    return f"{value:032X}"


def convert(text: str | bytes) -> tuple[IdForm, str]:
    """The form of an id EMQX (or hookbridge) wrote, and hookbridge's text of it."""
    if isinstance(text, bytes):
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError:
            raise UnconvertibleId("not ASCII text") from None
    form, value = decode(text)
    return form, hookbridge_text(value)
