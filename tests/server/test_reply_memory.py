"""A large reply costs the daemon its result and one encoded body, not more: the body is
written after its header (not joined with it into a framed copy), and handed to the transport
a megabyte at a time as the peer reads it (not copied whole into the transport's buffer). A
read's memory follows its reply: a 10 MB window must not cost 30 or 40 MB at once."""

from __future__ import annotations

import asyncio
import os
import tracemalloc
from typing import Any, cast

import msgspec

from sidecar.model.rpc import PartUpdatedEvent
from sidecar.server.handlers.messages import _with_id
from sidecar.server.outbox import FEED_BYTES
from sidecar.server.protocol import SidecarProtocol, new_protocol

from .frames import split_frames

SIZE = 8 << 20


class _Feeds(asyncio.Protocol):
    """The write side of the pipe: the peer read some, so the protocol may hand over more (as
    the daemon's stdout does)."""

    def __init__(self) -> None:
        self.proto: SidecarProtocol | None = None

    def resume_writing(self) -> None:
        assert self.proto is not None
        self.proto.out.feed()


class _Frames(asyncio.Protocol):
    """Reads a pipe until ``want`` whole frames have arrived."""

    def __init__(self, want: int, done: asyncio.Future[bytes]) -> None:
        self.data = bytearray()
        self.want = want
        self.done = done

    def data_received(self, data: bytes) -> None:
        self.data += data
        if len(split_whole(bytes(self.data))) >= self.want and not self.done.done():
            self.done.set_result(bytes(self.data))


def split_whole(data: bytes) -> list[Any]:
    """The whole frames at the start of ``data``."""
    whole, at = 0, 0
    while True:
        head, sep, _ = data[at : at + 64].partition(b"\r\n\r\n")
        if not sep:
            break
        end = at + len(head) + len(sep) + int(head.split(b":")[1])
        if end > len(data):
            break
        whole, at = end, end
    return split_frames(data[:whole])


async def _pipe() -> tuple[SidecarProtocol, asyncio.WriteTransport, int]:
    loop = asyncio.get_running_loop()
    rfd, wfd = os.pipe()
    side = _Feeds()
    writer, _ = await loop.connect_write_pipe(lambda: side, os.fdopen(wfd, "wb", buffering=0))
    proto = new_protocol(cast(Any, None))
    proto.initialized = True
    proto.set_writer(writer)
    side.proto = proto
    return proto, writer, rfd


async def _read(rfd: int, frames: int) -> list[Any]:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bytes] = loop.create_future()
    reader, _ = await loop.connect_read_pipe(
        lambda: _Frames(frames, done), os.fdopen(rfd, "rb", buffering=0)
    )
    try:
        return split_whole(await asyncio.wait_for(done, 30))
    finally:
        reader.close()


async def test_a_large_reply_is_encoded_without_a_framed_copy() -> None:
    proto, writer, rfd = await _pipe()
    result = msgspec.Raw(msgspec.json.encode("x" * SIZE))
    tracemalloc.start()
    try:
        proto._send_result(7, result)  # encodes and queues the frame; the flush is scheduled
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The encoded body and nothing of its size besides. (msgspec's output buffer is allocated
    # with up to half again the body's length; the part never written is never resident.)
    assert peak < 2 * SIZE, peak
    try:
        (reply,) = await _read(rfd, 1)
    finally:
        writer.close()
    assert reply["id"] == 7 and reply["result"] == "x" * SIZE


async def test_a_large_reply_is_handed_to_the_transport_as_the_peer_reads_it() -> None:
    proto, writer, rfd = await _pipe()
    proto._send_result(7, msgspec.Raw(msgspec.json.encode("x" * SIZE)))
    proto.notify("thing/updated", {"n": 1})  # queued behind the reply: must stay behind it
    proto.out.flush()  # what the loop runs next
    # Nobody reads yet: the transport holds a megabyte or two, not the rest of the reply.
    assert writer.get_write_buffer_size() <= 2 * FEED_BYTES
    assert proto.out.held_bytes > SIZE - 3 * FEED_BYTES  # the rest waits here, uncopied
    try:
        reply, note = await _read(rfd, 2)
    finally:
        writer.close()
    assert reply["id"] == 7 and reply["result"] == "x" * SIZE
    assert note["method"] == "thing/updated"


async def test_a_shared_part_is_sent_in_its_reply_and_notification_without_a_copy() -> None:
    """``part/update`` echoes the part in its reply and in ``part/updated``: both frames
    reference the request's own bytes (``Shared``); encoding them allocates only their
    envelopes, where each used to be one more copy of the part."""
    proto, writer, rfd = await _pipe()
    part = msgspec.json.encode({"type": "text", "text": "x" * SIZE, "extra": [1]})
    frame_body = b'{"part":' + part + b"}"
    view = memoryview(frame_body)[8:-1]
    shared = _with_id(view, "prt_1")
    tracemalloc.start()
    try:
        proto._send_result(7, shared)
        proto.notify("part/updated", PartUpdatedEvent(part=shared))  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < SIZE // 8, peak  # the envelopes and bookkeeping, no part
    try:
        reply, note = await _read(rfd, 2)
    finally:
        writer.close()
    want = {"id": "prt_1", "type": "text", "text": "x" * SIZE, "extra": [1]}
    assert reply["id"] == 7 and reply["result"] == want
    assert note["method"] == "part/updated" and note["params"] == {"part": want}


def test_an_id_is_spliced_in_front_and_an_empty_one_replaced() -> None:
    spliced = _with_id(memoryview(b'{"type":"text","zz":{"id":1}}'), "prt_1")
    assert len(spliced.buffers) == 2  # the client's bytes kept, not re-encoded
    assert spliced.text() == '{"id":"prt_1","type":"text","zz":{"id":1}}'
    empty = _with_id(memoryview(b'{"id":"","type":"text"}'), "prt_2")
    assert msgspec.json.decode(empty.text()) == {"id": "prt_2", "type": "text"}
    assert msgspec.json.decode(_with_id(memoryview(b"{ }"), "prt_3").text()) == {"id": "prt_3"}
