"""Property: what StopMatcher emits does not depend on how the text is split."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from muser.text import StopMatcher

ALPHABET = "abc\u00e9 "


def stop_all_at_once(text: str, stops: list[str]) -> tuple[str, str | None]:
    """Reference: find the first character at which any stop string is complete."""
    for end in range(1, len(text) + 1):
        prefix = text[:end]
        done = [(prefix.find(s), i, s) for i, s in enumerate(stops) if prefix.endswith(s)]
        if done:
            start, _, stop = min(done)
            return text[:start], stop
    return text, None


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(ALPHABET, max_size=30),
    stops=st.lists(st.text(ALPHABET, min_size=1, max_size=4), max_size=3),
    cuts=st.lists(st.integers(0, 30), max_size=8),
)
def test_emitted_text_and_stop_are_independent_of_the_split(text, stops, cuts):
    matcher = StopMatcher(stops)
    out = []
    stopped_on = None
    previous = 0
    for cut in [*sorted(c for c in cuts if c <= len(text)), len(text)]:
        check = matcher.push(text[previous:cut])
        out.append(check.text)
        previous = cut
        if check.stopped:
            stopped_on = check.stop_string
            break
        assert not any(s in "".join(out) for s in stops)  # nothing emitted contains a stop
    if stopped_on is None:
        out.append(matcher.flush())
    assert ("".join(out), stopped_on) == stop_all_at_once(text, stops)
