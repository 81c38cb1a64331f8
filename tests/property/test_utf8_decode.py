"""The pre-tokenizer's UTF-8 decoder (unicode::decode_one_fast) reads every
byte string exactly as unicode::decode_one, the decoder the llama.cpp
comparison tests pin down: same code points, same advance, on valid text,
overlong forms, surrogates, values past U+10FFFF, truncated sequences,
stray continuation bytes and 0xF5-0xFF, at every alignment and at the end
of the input (where the fast path cannot read four bytes).
"""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from muser import _core


def assert_same(data: bytes) -> None:
    assert _core._testing.utf8_decode(data, True) == _core._testing.utf8_decode(data, False), data[:40]


# Bytes of every kind a decoder branches on.
INTERESTING = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xED, 0xEF,
               0xF0, 0xF4, 0xF5, 0xF7, 0xF8, 0xFF]


def test_every_lead_byte_with_every_kind_of_following_bytes():
    kinds = [0x00, 0x7F, 0x80, 0xBF, 0xC0, 0xC2, 0xE0, 0xED, 0xF0, 0xF4, 0xF8, 0xFF]
    windows = bytearray()
    for lead in range(256):
        for tail in itertools.product(kinds, repeat=3):
            windows += bytes((lead, *tail))
    data = bytes(windows)
    # Whole, and shifted by 1-3 bytes so sequences straddle the windows.
    for shift in range(4):
        assert_same(data[shift:])


def test_valid_text_of_every_length_and_the_end_of_input():
    rng = random.Random(3)
    chars = [chr(rng.choice((rng.randrange(0, 0x80), rng.randrange(0x80, 0x800), rng.randrange(0x800, 0xD800),
                             rng.randrange(0xE000, 0x10000), rng.randrange(0x10000, 0x110000))))
             for _ in range(20_000)]
    text = "".join(chars).encode("utf-8")
    assert_same(text)
    for cut in range(1, 12):
        assert_same(text[:-cut])
        assert_same(text[-cut:])


@settings(max_examples=400, deadline=None, derandomize=True)
@given(data=st.one_of(
    st.binary(max_size=64),
    st.lists(st.sampled_from(INTERESTING), max_size=64).map(bytes),
    st.lists(st.one_of(st.text(max_size=4).map(lambda t: t.encode("utf-8", "surrogatepass")),
                       st.sampled_from([b"\xed\xa0\x80", b"\xc0\x80", b"\xe0\x80\x80", b"\xf4\x90\x80\x80",
                                        b"\xf7\xbf\xbf\xbf", b"\xf0\x9f", b"\xe4\xb8", b"\x80", b"\xff"])),
             max_size=20).map(b"".join),
))
def test_generated_bytes(data):
    assert_same(data)
