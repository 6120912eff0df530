"""bridge/emqx_msgid.py against ports of EMQX's own encoders (tests/support/emqx_ids.py): every
form EMQX wrote decodes to the 128-bit value it encoded, and is told apart by its text alone."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.emqx_msgid import IdForm, UnconvertibleId, convert, id_form
from bridge.msgid import MsgIdGenerator
from support.emqx_ids import emqttd_base62, emqx_base62, guid, mongo_base64, to_hexstr, to_hexstr_v2

# Every guid whose timestamp is one second after 1970 or later (the domain the module's docstring
# proves unambiguous): ts >= 10**6 microseconds.
REAL_IDS = st.integers(min_value=10**6 << 64, max_value=(1 << 128) - 1)
# ...and ids as emqx_guid makes them today: 2013 (EMQ's first release) to 2040, any node, any sequence
_2013_US = int(dt.datetime(2013, 1, 1, tzinfo=dt.UTC).timestamp() * 1_000_000)
_2040_US = int(dt.datetime(2040, 1, 1, tzinfo=dt.UTC).timestamp() * 1_000_000)
TIMESTAMPED = st.builds(
    guid,
    st.integers(min_value=_2013_US, max_value=_2040_US),
    st.integers(min_value=0, max_value=(1 << 48) - 1),
    st.integers(min_value=0, max_value=0xFFFF),
)
ALL_IDS = REAL_IDS | TIMESTAMPED

FORMS = [
    (emqx_base62, IdForm.BASE62_DECIMAL),
    (emqttd_base62, IdForm.BASE62_V2),
    (to_hexstr, IdForm.HEX),
    (mongo_base64, IdForm.BASE64),
]


@pytest.mark.parametrize(("encode", "form"), FORMS, ids=[f.name for _, f in FORMS])
@given(value=ALL_IDS)
def test_every_form_decodes_to_the_value_emqx_encoded(encode, form, value: int) -> None:  # type: ignore[no-untyped-def]
    assert convert(encode(value)) == (form, f"{value:032X}")


@given(value=ALL_IDS)
def test_emqx_2x_hex_without_leading_zeros_is_read_as_hex(value: int) -> None:
    text = to_hexstr_v2(value)
    if len(text) >= 23:  # an id of our time has 29 digits or more
        assert convert(text) == (IdForm.HEX_UNPADDED if len(text) < 32 else IdForm.HEX, f"{value:032X}")


@given(value=TIMESTAMPED)
def test_lengths_of_ids_of_our_time(value: int) -> None:
    """The lengths the docs give: 47 for EMQX 3.x/4.x (every id of 1987 to 2141), 20-22 for 2.x."""
    assert len(emqx_base62(value)) == 47
    assert 20 <= len(emqttd_base62(value)) <= 22
    assert "9" not in emqx_base62(value)  # the escape for 61-63: never met in decimal text


def test_a_mixed_queue_keeps_publish_order_with_hookbridge_ids() -> None:
    """Ids of one queue in every form, then one hookbridge makes: sorting the converted texts is
    sorting by publish time (the fetch, the offsets and Redis's scores rely on it)."""
    rng = random.Random(35)
    now_us = int(dt.datetime(2026, 11, 1, tzinfo=dt.UTC).timestamp() * 1_000_000)
    published = [guid(now_us + n * 1000, rng.getrandbits(48), n) for n in range(60)]
    encoders = [emqx_base62, emqttd_base62, to_hexstr, mongo_base64, to_hexstr_v2]
    texts = [encoders[n % len(encoders)](value) for n, value in enumerate(published)]
    rng.shuffle(texts)
    converted = sorted(convert(text)[1] for text in texts)
    ours = MsgIdGenerator("after-the-switch").next()
    assert converted == [f"{value:032X}" for value in published]
    assert max(converted) < ours


def test_the_examples_of_emqx_pages_and_hookbridge_ids() -> None:
    # 2.x: the 20-character example of EMQX's backend pages (2016-2017)
    form, text = convert("2VFsyhDm0cPIQvnY9VO")
    assert form is IdForm.BASE62_V2 and text == f"{int(emqttd_base62_inverse('2VFsyhDm0cPIQvnY9VO')):032X}"
    ours = MsgIdGenerator().next()
    assert convert(ours) == (IdForm.HEX, ours)
    assert convert(ours.lower()) == (IdForm.HEX, ours)


def emqttd_base62_inverse(text: str) -> int:
    """The value whose emqttd_base62 text is `text`, found by the encoder (no decoder involved)."""
    low, high = 1, 1 << 128
    while low < high:  # the encoder is monotonic in value for texts of one length
        middle = (low + high) // 2
        candidate = emqttd_base62(middle)
        if (len(candidate), candidate) < (len(text), text):
            low = middle + 1
        else:
            high = middle
    assert emqttd_base62(low) == text
    return low


@pytest.mark.parametrize(
    "text",
    [
        "not-an-id",
        "",
        "M" * 23,  # the right alphabet, but not the digits of a number
        "MTA9" + "MTAw" * 10,  # `9` (the escape) never appears in the text of digits
        emqx_base62(1 << 128),  # 129 bits
        emqx_base62(10**40),
        "0" + emqx_base62(10**30)[1:],
        "AAVEwm0la4RufgAABeI=====",
        "Z" * 53,
    ],
)
def test_what_is_no_id_is_refused(text: str) -> None:
    with pytest.raises(UnconvertibleId):
        convert(text)


def test_digits_with_a_leading_zero_are_refused() -> None:
    # integer_to_binary never writes one: this text was not made by emqx_guid
    from support.emqx_ids import emqx_base62_encode_binary

    text = emqx_base62_encode_binary(b"0" + str(10**34).encode())
    assert id_form(text) is IdForm.BASE62_DECIMAL
    with pytest.raises(UnconvertibleId):
        convert(text)
