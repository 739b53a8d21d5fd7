"""``FrameParser`` and large bodies: read into one buffer of their size once half is here,
and never held for a header alone."""

from __future__ import annotations

import tracemalloc

from sidecar.protocol.framing import DIRECT_BYTES, FrameParser, frame_header

SIZE = 8 * DIRECT_BYTES


def test_a_header_alone_makes_the_parser_hold_nothing() -> None:
    parser = FrameParser()
    tracemalloc.start()
    try:
        parser.feed(frame_header(SIZE) + b"x" * 1000)
        assert parser.next() is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < DIRECT_BYTES  # not the announced body's size
    assert parser.buffered == 1000


def test_a_large_body_is_read_into_one_buffer_and_handed_over_as_it_is() -> None:
    body = b"y" * SIZE
    chunks = [body[i : i + (1 << 16)] for i in range(0, SIZE, 1 << 16)]
    parser = FrameParser()
    parser.feed(frame_header(SIZE))
    tracemalloc.start()
    try:
        frame = None
        while chunks:
            parser.feed(chunks.pop(0))  # each chunk let go once read, as a socket's
            item = parser.next()
            if item is not None:
                frame = item
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert frame == body and isinstance(frame, bytearray)
    # The first half grows as bytes arrive; then one buffer of the size (no copy at the end).
    assert peak < 1.7 * SIZE


def test_frames_after_a_large_one_are_read_too() -> None:
    small = b'{"a":1}'
    parser = FrameParser()
    data = frame_header(SIZE) + b"z" * SIZE + frame_header(len(small)) + small
    for i in range(0, len(data), 1 << 16):
        parser.feed(data[i : i + (1 << 16)])
    frames = []
    while (item := parser.next()) is not None:
        frames.append(bytes(item))
    assert frames == [b"z" * SIZE, small]
