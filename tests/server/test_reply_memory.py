"""A large reply is framed without a copy: its body is written after its header, not joined
with it. A read's memory follows its reply: the result and its encoded body are the two
copies a reply needs; a third (the framed copy) would make a reply of a 10 MB window cost
30 MB at once."""

from __future__ import annotations

import asyncio
import os
import tracemalloc

import msgspec

from sidecar.server.protocol import new_protocol

from .frames import split_frames

SIZE = 8 << 20


class _OneFrame(asyncio.Protocol):
    """Reads a pipe until one whole frame has arrived."""

    def __init__(self, done: asyncio.Future[bytes]) -> None:
        self.data = bytearray()
        self.done = done

    def data_received(self, data: bytes) -> None:
        self.data += data
        head, sep, _ = bytes(self.data[:64]).partition(b"\r\n\r\n")
        if not sep:
            return
        whole = len(head) + len(sep) + int(head.split(b":")[1])
        if len(self.data) >= whole and not self.done.done():
            self.done.set_result(bytes(self.data))


async def test_a_large_reply_is_encoded_without_a_framed_copy() -> None:
    loop = asyncio.get_running_loop()
    rfd, wfd = os.pipe()
    writer, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(wfd, "wb", buffering=0))
    proto = new_protocol()
    proto.initialized = True
    proto.set_writer(writer)
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
    done: asyncio.Future[bytes] = loop.create_future()
    reader, _ = await loop.connect_read_pipe(
        lambda: _OneFrame(done), os.fdopen(rfd, "rb", buffering=0)
    )
    try:
        data = await asyncio.wait_for(done, 30)
    finally:
        reader.close()
        writer.close()
    (reply,) = split_frames(data)
    assert reply["id"] == 7 and reply["result"] == "x" * SIZE
