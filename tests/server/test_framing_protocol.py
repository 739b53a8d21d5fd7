"""Framing and the protocol's codec, in-process (the e2e suite covers the same over stdio)."""

from __future__ import annotations

from typing import Any, cast

from sidecar.protocol.framing import FrameError, FrameReader, encode_frame
from sidecar.server.protocol import new_protocol

from .frames import split_frames


class Capture:
    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data

    def messages(self) -> list[Any]:
        return split_frames(self.data)


def _reader(cap: int = 1000) -> tuple[FrameReader, list[bytes], list[FrameError]]:
    frames: list[bytes] = []
    errors: list[FrameError] = []
    return FrameReader(frames.append, errors.append, lambda: None, lambda: cap), frames, errors


def test_frames_split_across_reads_and_coalesced() -> None:
    r, frames, errors = _reader()
    data = encode_frame(b'{"a":1}') + encode_frame(b'{"b":2}')
    for i in range(len(data)):
        r.data_received(data[i : i + 1])
    r.data_received(encode_frame(b"[3]") + encode_frame(b"[4]"))
    assert frames == [b'{"a":1}', b'{"b":2}', b"[3]", b"[4]"] and errors == []


def test_oversized_frame_is_skipped_without_buffering_and_reading_resumes() -> None:
    r, frames, errors = _reader(cap=10)
    big = encode_frame(b"x" * 5000)
    r.data_received(big[:100])
    assert r.buffered < 100  # the body is dropped as it streams in
    r.data_received(big[100:] + encode_frame(b'{"ok":1}'))
    assert frames == [b'{"ok":1}']
    assert len(errors) == 1 and errors[0].code == -32600 and "5000" in errors[0].message


def test_malformed_headers_are_reported_and_the_next_frame_still_parses() -> None:
    r, frames, errors = _reader()
    r.data_received(b"Content-Length: abc\r\n\r\n" + b"garbage\r\n\r\n" + encode_frame(b"{}"))
    assert frames == [b"{}"]
    assert [e.code for e in errors] == [-32700, -32700]


def test_unserialisable_result_gets_an_internal_error_reply() -> None:
    proto = new_protocol(cast(Any, None))
    out = Capture()
    proto.set_writer(out)
    proto._send_result(7, object())
    (reply,) = out.messages()
    assert reply["id"] == 7 and reply["error"]["code"] == -32603
    assert "serialised" in reply["error"]["message"]


async def test_an_unexpected_handler_error_is_answered_by_its_type_only() -> None:
    """No traceback or exception text reaches the client: those are for the daemon's log."""
    from sidecar.model.rpc import Empty
    from sidecar.protocol.methods import TO_DAEMON, RequestSpec
    from sidecar.server.dispatch import route

    async def boom(ctx: Any, p: Empty) -> None:
        raise RuntimeError("secret frame")

    spec = RequestSpec(method="t/boom", direction=TO_DAEMON, params=Empty, result=None)
    proto = new_protocol(cast(Any, None), {"t/boom": route(spec, boom)})
    proto.initialized = True
    out = Capture()
    proto.set_writer(out)
    proto.handle_frame(b'{"jsonrpc":"2.0","id":1,"method":"t/boom"}')
    await proto.answered()
    (reply,) = out.messages()
    assert reply["error"] == {"code": -32603, "message": "internal error in t/boom: RuntimeError"}


def test_read_end_is_signalled_once_per_read_after_all_its_frames() -> None:
    events: list[str] = []
    r = FrameReader(
        lambda b: events.append(b.decode()),
        lambda e: events.append("error"),
        lambda: None,
        lambda: 1000,
        on_read_end=lambda: events.append("end"),
    )
    r.data_received(encode_frame(b"1") + encode_frame(b"2") + encode_frame(b"3")[:5])
    r.data_received(encode_frame(b"3")[5:])
    assert events == ["1", "2", "end", "3", "end"]
