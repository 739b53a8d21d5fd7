"""Framing and the protocol's codec, in-process (the e2e suite covers the same over stdio)."""

from __future__ import annotations

from typing import Any

from pygls.protocol import default_converter
from pygls.protocol.json_rpc import JsonRPCResponseMessage
from pygls.server import JsonRPCServer

from sidecar.protocol.framing import FrameError, FrameReader, encode_frame
from sidecar.server.protocol import SidecarProtocol

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
    server = JsonRPCServer(protocol_cls=SidecarProtocol, converter_factory=default_converter)
    proto = server.protocol
    out = Capture()
    proto.set_writer(out)
    proto._send_data(JsonRPCResponseMessage(id=7, jsonrpc="2.0", result=object()))
    (reply,) = out.messages()
    assert reply["id"] == 7 and reply["error"]["code"] == -32603
    assert "serialised" in reply["error"]["message"]


def test_tracebacks_are_not_sent_to_clients() -> None:
    from lsprotocol.types import ResponseError, ResponseErrorMessage

    server = JsonRPCServer(protocol_cls=SidecarProtocol, converter_factory=default_converter)
    proto = server.protocol
    out = Capture()
    proto.set_writer(out)
    err = ResponseError(code=-32603, message="boom", data={"traceback": ["secret frame"]})
    proto._send_data(ResponseErrorMessage(id=1, error=err))
    (reply,) = out.messages()
    assert reply["error"] == {"code": -32603, "message": "boom"}


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
