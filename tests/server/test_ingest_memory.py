"""A 10 MiB ``part/update`` costs the daemon its frame and its row, not a copy per step.

Through a real ``App`` on a real store (both backends): the frame is fed to the connection's
reader as a socket delivers it, and the reply and the ``part/updated`` notification are read
from a real pipe by a thread that keeps only each frame's first bytes. tracemalloc's peak
(Python's allocations; the database's own are its business) is bounded by what the path
must hold at once: the body, read straight into a buffer of its size, and the part's
decoded copy while it is validated; on SQLite the row is written from the body's own bytes
(``Shared``: SQLite writes it in place, PostgreSQL gets it in slices), so no ``str`` of it
is made, and other daemons on a PostgreSQL database are told its id. Before, it held the frame
buffer, the body, the decoded Struct, a bytes copy, a dict and its re-encoding, the row, and
an encoded reply and notification: more than six copies; and the writer kept the last batch
(frame, Struct and row) alive until the next write.
"""

from __future__ import annotations

import asyncio
import os
import threading
import tracemalloc

import msgspec
import pytest

from sidecar.model.messages import Message
from sidecar.model.session import Session
from sidecar.protocol.framing import frame_header
from sidecar.server.app import App
from sidecar.server.settings import ConfigManager
from sidecar.store import Store

SIZE = 10 << 20


class _Replies(threading.Thread):
    """Reads frames off the pipe, keeping each body's first bytes only."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.heads: list[bytes] = []
        self.sizes: list[int] = []
        self.changed = threading.Condition()

    def run(self) -> None:
        pending = b""
        with os.fdopen(self.fd, "rb", buffering=0) as pipe:
            while True:
                while b"\r\n\r\n" not in pending:
                    chunk = pipe.read(1 << 16)
                    if not chunk:
                        return
                    pending += chunk
                header, _, pending = pending.partition(b"\r\n\r\n")
                left = int(header.split(b":")[1])
                head = b""
                while left:
                    if not pending:
                        pending = pipe.read(min(left, 1 << 16))
                        if not pending:
                            return
                    take = pending[:left]
                    if len(head) < 200:
                        head += take[: 200 - len(head)]
                    left -= len(take)
                    pending = pending[len(take) :]
                with self.changed:
                    self.heads.append(head)
                    self.sizes.append(int(header.split(b":")[1]))
                    self.changed.notify_all()

    def wait_for(self, count: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.heads) >= count, timeout=60)


@pytest.mark.parametrize("with_id", [True, False], ids=["id", "no-id"])
async def test_a_10_mib_part_update_costs_its_frame_and_its_row(
    store: Store, backend: str, with_id: bool
) -> None:
    session = b'{"id":"ses_1","projectID":"p","directory":"/","title":"t","version":"1",'
    session += b'"time":{"created":1,"updated":1}}'
    await store.put_session(msgspec.json.decode(session, type=Session))
    message = b'{"id":"msg_1","sessionID":"ses_1","role":"user","time":{"created":1}}'
    await store.put_message(msgspec.json.decode(message, type=Message), message)
    app = App(store, ConfigManager([]))
    conn = app.connect()
    rfd, wfd = os.pipe()
    loop = asyncio.get_running_loop()
    out, _ = await loop.connect_write_pipe(conn.write_side, os.fdopen(wfd, "wb", buffering=0))
    conn.attach(out, out)
    conn.protocol.initialized = True
    reader = conn.reader()
    replies = _Replies(rfd)
    replies.start()
    part: dict[str, object] = {"type": "text", "sessionID": "ses_1", "messageID": "msg_1"}
    if with_id:
        part["id"] = "prt_1"
    part["text"] = "x" * SIZE
    body = msgspec.json.encode({"jsonrpc": "2.0", "id": 9, "method": "part/update",
                                "params": {"part": part}})  # fmt: skip
    del part
    chunks = [(body[i : i + (1 << 16)]) for i in range(0, len(body), 1 << 16)]
    frame_head = frame_header(len(body))
    del body
    tracemalloc.start()
    try:
        reader.data_received(frame_head)
        while chunks:
            reader.data_received(chunks.pop(0))  # each chunk let go once read, as a socket's
        await asyncio.to_thread(replies.wait_for, 2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        out.close()
    note, reply = replies.heads
    assert b'"method":"part/updated"' in note and b'"id":9' in reply and b'"result"' in reply
    assert replies.sizes[0] > SIZE and replies.sizes[1] > SIZE
    # The body, read into one buffer of its size, and the part's decoded copy while it is
    # validated; the row is written from the body itself (SQLite: in place; PostgreSQL: in
    # slices), and other daemons are told its id, not sent it.
    bound = 2.1
    assert peak < bound * SIZE, f"{peak / SIZE:.2f}x the part"
    stored = await store.part_rows("msg_1")
    assert len(stored) == 1 and len(stored[0][1]) > SIZE
    await app.close()
