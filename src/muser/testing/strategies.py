"""Hypothesis strategies for scheduling workloads (needs ``hypothesis``).

Building blocks (each a strategy): :func:`arrival_times`, :func:`prompt_lengths`,
:func:`max_tokens`, :func:`cancellations`, :func:`consumer_stalls`,
:func:`deadlines`; combined into :func:`requests` and :func:`workloads`, and
:func:`chat_and_documents`, the common shape of many short chats beside a
few long documents. Sizes default to what runs in well under a second on the
null engine; pass larger bounds for soak tests.

Example::

    from hypothesis import given, settings
    from muser.testing import strategies

    @settings(max_examples=20, deadline=None)
    @given(strategies.chat_and_documents())
    def test_my_workload(workload): ...
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from muser.testing.workload import RequestSpec, Workload

__all__ = [
    "arrival_times",
    "cancellations",
    "chat_and_documents",
    "consumer_stalls",
    "deadlines",
    "max_tokens",
    "prompt_lengths",
    "requests",
    "workloads",
]


def arrival_times(max_s: float = 0.05, bursts: bool = True) -> st.SearchStrategy[float]:
    """Seconds after the start, up to ``max_s``; with ``bursts``, often exactly 0
    (requests arriving together)."""
    spread = st.floats(0.0, max_s, allow_nan=False, allow_infinity=False)
    return st.just(0.0) | spread if bursts else spread


def prompt_lengths(min_tokens: int = 1, max_tokens: int = 200) -> st.SearchStrategy[int]:
    """Prompt lengths in tokens."""
    return st.integers(min_tokens, max_tokens)


def max_tokens(min_tokens: int = 1, max_tokens: int = 24) -> st.SearchStrategy[int]:
    """Tokens to generate per request."""
    return st.integers(min_tokens, max_tokens)


def cancellations(max_after: int = 8) -> st.SearchStrategy[int | None]:
    """``None`` (never cancelled) or the number of chunks after which the caller cancels."""
    return st.none() | st.integers(1, max_after)


def consumer_stalls(max_s: float = 0.02) -> st.SearchStrategy[float]:
    """How long a consumer pauses after its first chunk (0: never)."""
    return st.just(0.0) | st.floats(0.0, max_s, allow_nan=False, allow_infinity=False)


def deadlines(min_s: float = 0.005, max_s: float = 2.0) -> st.SearchStrategy[float | None]:
    """``None`` or a ``timeout=`` in seconds for getting a slot."""
    return st.none() | st.floats(min_s, max_s, allow_nan=False, allow_infinity=False)


def requests(
    kind: str = "chat",
    *,
    arrival: st.SearchStrategy[float] | None = None,
    prompt: st.SearchStrategy[int] | None = None,
    tokens: st.SearchStrategy[int] | None = None,
    cancel: st.SearchStrategy[int | None] | None = None,
    stall: st.SearchStrategy[float] | None = None,
    deadline: st.SearchStrategy[float | None] | None = None,
    prefix_groups: int = 0,
) -> st.SearchStrategy[RequestSpec]:
    """One :class:`RequestSpec`; each field from the given strategy or the default one.

    With ``prefix_groups`` > 0 the request joins one of that many groups
    whose prompts share a prefix (or none).
    """
    group = st.integers(-1, prefix_groups - 1) if prefix_groups > 0 else st.just(-1)
    return st.builds(
        RequestSpec,
        arrival_s=arrival if arrival is not None else arrival_times(),
        prompt_tokens=prompt if prompt is not None else prompt_lengths(),
        max_tokens=tokens if tokens is not None else max_tokens(),
        kind=st.just(kind),
        prefix_group=group,
        shared_prefix=st.integers(0, 64),
        cancel_after_tokens=cancel if cancel is not None else cancellations(),
        stall_s=stall if stall is not None else consumer_stalls(),
        timeout_s=deadline if deadline is not None else deadlines(),
    )


def workloads(min_requests: int = 1, max_requests: int = 10,
              **request_options: Any) -> st.SearchStrategy[Workload]:
    """A :class:`Workload` of ``min_requests``..``max_requests`` requests drawn by :func:`requests`."""
    return st.lists(requests(**request_options), min_size=min_requests, max_size=max_requests).map(
        lambda specs: Workload(tuple(specs))
    )


def chat_and_documents(
    max_chats: int = 8,
    max_documents: int = 2,
    document_tokens: tuple[int, int] = (300, 1500),
) -> st.SearchStrategy[Workload]:
    """Many short chats (short prompts, short answers, some cancelled or stalled)
    beside a few long documents (long prompts, short answers), arriving in any
    order: the workload where a long prefill must not stall the chats."""
    chats = st.lists(
        requests("chat", prompt=prompt_lengths(1, 48), tokens=max_tokens(4, 24), prefix_groups=2,
                 deadline=st.none()),
        min_size=1, max_size=max_chats,
    )
    documents = st.lists(
        requests("document", prompt=prompt_lengths(*document_tokens), tokens=max_tokens(1, 8),
                 cancel=st.none(), stall=st.just(0.0), deadline=st.none()),
        min_size=1, max_size=max_documents,
    )
    return st.tuples(chats, documents).map(lambda pair: Workload(tuple(pair[0] + pair[1])))
