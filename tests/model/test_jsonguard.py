"""The depth check (issue 32 item 1): one pass, constant extra memory, brackets in strings
ignored, escapes read as a decoder reads them, whatever the chunk boundaries."""

from __future__ import annotations

import tracemalloc

import msgspec
from hypothesis import example, given
from hypothesis import strategies as st

from sidecar.model.jsonguard import CHUNK, deeper_than, too_deep

MiB = 1024 * 1024


def _reference_depth(text: bytes) -> int:
    """Highest nesting, a byte at a time (the obvious reader), unclosed brackets counting."""
    return _reference(text)[0]


def _reference(text: bytes) -> tuple[int, bool]:
    """``_reference_depth``, and whether the text is free of what no JSON holds: a backslash
    outside a string, where a decoder stops (and so does this reader)."""
    depth = peak = 0
    in_string = escaped = False
    clean = True
    for byte in text:
        ch = chr(byte)
        if ch == "\\" and not in_string:
            clean = False
            break
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            peak = max(peak, depth)
        elif ch in "]}":
            depth -= 1
    return peak, clean


def test_a_long_string_with_brackets_costs_constant_memory() -> None:
    """The issue's frame: a part whose text is ``"[" * 100 + "x" * 10 MiB``."""
    text = "[" * 100 + "x" * (10 * MiB)
    frame = msgspec.json.encode(
        {"jsonrpc": "2.0", "id": 1, "method": "part/update", "params": {"part": {"text": text}}}
    )
    del text
    tracemalloc.start()
    try:
        assert not deeper_than(frame, 64)
        assert too_deep(frame, 64) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= 8 * CHUNK, f"the check held {peak} bytes for a {len(frame)}-byte frame"


def test_many_escapes_cost_constant_memory() -> None:
    frame = b'{"s":"' + b'[\\n\\\\\\"' * (2 * MiB) + b'"}'
    tracemalloc.start()
    try:
        assert not deeper_than(frame, 8)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= 8 * CHUNK


def test_brackets_in_strings_do_not_count_and_escapes_are_read_right() -> None:
    inside = b'"' + b"[{" * 200 + b'"'
    assert not deeper_than(b'{"a":[' + inside + b"]}", 3)
    assert deeper_than(b'{"a":[[[' + inside + b"]]]}", 3)
    # An escaped quote does not end the string; an escaped backslash before a quote does.
    assert not deeper_than(b'["\\"[[[[[[[[", 1]', 2)
    assert deeper_than(b'["\\\\", [[[[[[[[1]]]]]]]]]', 2)
    assert not deeper_than(b'["\\\\\\"[[[[[[[[[["]', 2)


def test_deep_nesting_past_a_long_string_is_found() -> None:
    deep = b"[" * 70 + b"]" * 70
    frame = b'{"jsonrpc":"2.0","id":9,"method":"m","params":{"t":"' + b"x" * (3 * CHUNK)
    frame += b'","v":' + deep + b"}}"
    found = too_deep(frame, 64)
    assert found is not None and found.request_id == 9
    assert found.path.startswith("$.v[0][0]")


_pieces = st.sampled_from(
    [b"[", b"]", b"{", b"}", b'"', b"\\", b"\\\\", b'\\"', b"x", b",", b":", b"1"]
)


@given(
    st.lists(_pieces, max_size=80).map(b"".join),
    st.integers(min_value=0, max_value=12),
    st.integers(min_value=2, max_value=9),
)
@example(b'[[\\"[', 2, 2)  # an escape outside a string: refused as too deep (found once)
def test_same_answer_as_a_byte_by_byte_reader(text: bytes, limit: int, chunk: int) -> None:
    """The same answer wherever a backslash is inside a string, as in every JSON document;
    where one is outside (no JSON), never a smaller one than the depth a decoder reaches
    before it stops there: what is refused as too deep may also be a parse error, but nothing
    a decoder would read too deep gets through."""
    depth, clean = _reference(text)
    if clean:
        assert deeper_than(text, limit, chunk) == (depth > limit)
    elif depth > limit:
        assert deeper_than(text, limit, chunk)


@given(
    st.recursive(
        st.none() | st.integers() | st.text(alphabet='[]{}"\\ab'),
        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids),
        max_leaves=30,
    ),
    st.integers(min_value=0, max_value=10),
    st.integers(min_value=2, max_value=7),
)
def test_same_answer_on_real_json(value: object, limit: int, chunk: int) -> None:
    text = msgspec.json.encode(value)
    assert deeper_than(text, limit, chunk) == (_reference_depth(text) > limit)
