"""Hypothesis strategies for random sessions: user turns and assistant steps with tool calls."""

from __future__ import annotations

from hypothesis import strategies as st

from .specs import StepSpec, ToolSpec, TurnSpec

tools = st.builds(
    ToolSpec,
    tool=st.sampled_from(["bash", "read", "edit", "write", "grep"]),
    status=st.sampled_from(["completed", "completed", "completed", "error", "pending", "running"]),
    size=st.one_of(st.integers(0, 400), st.integers(400, 6_000)),
    file=st.integers(0, 14),
)

steps = st.builds(
    StepSpec,
    text=st.one_of(st.just(0), st.integers(20, 1_500)),
    tools=st.lists(tools, max_size=3).map(tuple),
    reasoning=st.booleans(),
    error=st.sampled_from([None] * 8 + ["MessageAbortedError", "APIError"]),
)

turns = st.builds(
    TurnSpec,
    user=st.integers(10, 1_500),
    steps=st.lists(steps, min_size=1, max_size=4).map(tuple),
)

# A session large enough that summarizing its older part pays off.
sessions = st.lists(turns, min_size=4, max_size=9)

methods = st.sampled_from(["collapse", "standard"])

ops = st.lists(
    st.one_of(
        st.tuples(st.just("turns"), st.lists(turns, min_size=1, max_size=3)),
        st.tuples(st.just("compact"), methods, st.booleans()),
        st.tuples(st.just("prune")),
    ),
    min_size=1,
    max_size=7,
)
