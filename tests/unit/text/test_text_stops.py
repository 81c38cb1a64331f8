"""StopMatcher: hold back partial matches, stop at the first completed stop string."""

from __future__ import annotations

import pytest

from muser.text import StopMatcher


def test_text_without_stop_prefixes_passes_straight_through():
    matcher = StopMatcher(["###"])
    check = matcher.push("hello world")
    assert (check.text, check.stopped, check.stop_string) == ("hello world", False, None)


def test_a_partial_match_is_held_back_then_released_when_it_diverges():
    matcher = StopMatcher(["END"])
    assert matcher.push("the EN").text == "the "
    assert matcher.held == "EN"
    assert matcher.push("D").stopped
    matcher = StopMatcher(["END"])
    matcher.push("the EN")
    assert matcher.push("ding").text == "ENding"
    assert matcher.held == ""


def test_stop_string_split_over_many_pushes_stops_and_drops_the_rest():
    matcher = StopMatcher(["</answer>"])
    emitted = [matcher.push(p) for p in ["42", "</", "ans", "wer> trailing"]]
    assert "".join(c.text for c in emitted) == "42"
    assert emitted[-1].stopped and emitted[-1].stop_string == "</answer>"


def test_first_completed_stop_wins_then_the_earliest_starting():
    assert StopMatcher(["abcd", "bc"]).push("abcd").stop_string == "bc"
    check = StopMatcher(["bc", "abc"]).push("xabc")
    assert (check.text, check.stop_string) == ("x", "abc")


def test_stop_tokens_and_end_of_generation_tokens():
    matcher = StopMatcher(stop_token_ids=[5], end_of_generation_ids=[2, 106])
    assert matcher.is_stop_token(5) and matcher.is_stop_token(2) and matcher.is_stop_token(106)
    assert not matcher.is_stop_token(3)


def test_flush_releases_held_text_when_generation_ends_otherwise():
    matcher = StopMatcher(["END"])
    assert matcher.push("so E").text == "so "
    assert matcher.flush() == "E"


def test_pushing_after_a_stop_is_an_error_until_reset():
    matcher = StopMatcher(["x"])
    assert matcher.push("ax").stopped
    with pytest.raises(ValueError):
        matcher.push("more")
    matcher.reset()
    assert matcher.push("ab").text == "ab"


def test_empty_stop_string_is_rejected():
    with pytest.raises(ValueError):
        StopMatcher(["ok", ""])


def test_single_string_is_one_stop_string():
    assert StopMatcher("ab").stop_strings == ("ab",)


def test_snapshot_restore_keeps_the_held_text():
    matcher = StopMatcher(["STOP"])
    matcher.push("go ST")
    state = matcher.snapshot()
    assert matcher.push("OP").stopped
    matcher.restore(state)
    assert matcher.held == "ST"
    assert matcher.push("ay").text == "STay"


def test_no_stop_strings_means_nothing_is_held():
    matcher = StopMatcher()
    assert matcher.push("anything").text == "anything"
