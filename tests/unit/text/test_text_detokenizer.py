"""StreamingDetokenizer on a tiny hand-made vocabulary."""

from __future__ import annotations

import pytest

from muser.text import StreamingDetokenizer

# id: bytes, GGUF type
VOCAB = [
    (b"<unk>", 2),  # 0 unknown
    (b"<s>", 3),  # 1 control (BOS)
    (b"</s>", 3),  # 2 control (EOS)
    (b"\xc3", 6),  # 3 byte token: first half of "é"
    (b"\xa9", 6),  # 4 byte token: second half of "é"
    (b" Hello", 1),  # 5
    (b" world", 1),  # 6
    (b"<|im_end|>", 4),  # 7 user-defined: always shown
    (b"[unused]", 5),  # 8 unused: never shown
    (b"\xe2\x82", 1),  # 9 first two bytes of "€" (byte-level BPE style)
    (b"\xac!", 1),  # 10 last byte of "€" then "!"
    (b"\xff", 6),  # 11 a byte that is never valid UTF-8
]
TOKEN_BYTES = [b for b, _ in VOCAB]
TOKEN_TYPES = [t for _, t in VOCAB]


def spm(**kwargs) -> StreamingDetokenizer:
    return StreamingDetokenizer(TOKEN_BYTES, TOKEN_TYPES, add_space_prefix=True, **kwargs)


def test_a_character_split_across_byte_tokens_is_held_until_complete():
    detok = spm()
    assert detok.push(3) == ""
    assert detok.pending == b"\xc3"
    assert detok.push(4) == "é"
    assert detok.pending == b""


def test_a_character_split_across_normal_tokens_is_held_until_complete():
    detok = spm(at_sequence_start=False)
    assert detok.push(9) == ""
    assert detok.push(10) == "€!"


def test_sentencepiece_drops_one_leading_space_of_the_first_token_only():
    detok = spm()
    assert detok.push(5) == "Hello"
    assert detok.push(6) == " world"


def test_a_continuation_stream_keeps_the_leading_space():
    assert spm(at_sequence_start=False).push(5) == " Hello"


def test_without_add_space_prefix_the_space_stays():
    detok = StreamingDetokenizer(TOKEN_BYTES, TOKEN_TYPES, add_space_prefix=False)
    assert detok.push(5) == " Hello"


def test_a_sequence_starting_with_hidden_bos_keeps_its_spaces():
    detok = spm()
    assert detok.push_many([1, 5, 6]) == " Hello world"


def test_control_and_unknown_tokens_are_hidden_unless_special():
    assert spm(at_sequence_start=False).push_many([0, 1, 5, 2]) == " Hello"
    assert spm(at_sequence_start=False, special=True).push_many([0, 1, 5, 2]) == "<unk><s> Hello</s>"


def test_user_defined_tokens_are_always_shown_and_unused_never():
    assert spm(at_sequence_start=False).push_many([7, 8]) == "<|im_end|>"
    assert spm(at_sequence_start=False, special=True).push(8) == ""


def test_invalid_bytes_become_replacement_characters():
    detok = spm(at_sequence_start=False)
    assert detok.push(11) == "\ufffd"
    assert detok.push_many([3, 5]) == "\ufffd Hello"  # a lead byte followed by ASCII


def test_flush_turns_an_incomplete_character_into_a_replacement_character():
    detok = spm(at_sequence_start=False)
    assert detok.push(3) == ""
    assert detok.flush() == "\ufffd"
    assert detok.pending == b""


def test_out_of_range_token_is_rejected_without_consuming_state():
    detok = spm()
    with pytest.raises(ValueError, match="out of range"):
        detok.push(len(VOCAB))
    with pytest.raises(ValueError):
        detok.push(-1)
    assert detok.push(5) == "Hello"  # the leading-space rule is still pending


def test_mismatched_vocabulary_lengths_are_rejected():
    with pytest.raises(ValueError):
        StreamingDetokenizer(TOKEN_BYTES, TOKEN_TYPES[:-1], add_space_prefix=True)


def test_snapshot_restore_resumes_mid_character():
    detok = spm()
    detok.push(3)
    state = detok.snapshot()
    assert detok.push(4) == "é"
    detok.restore(state)
    assert detok.push(4) == "é"


def test_reset_starts_a_new_sequence():
    detok = spm()
    detok.push_many([5, 3])
    detok.reset()
    assert detok.pending == b""
    assert detok.push(6) == "world"
