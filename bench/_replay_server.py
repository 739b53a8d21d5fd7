"""The transport floor of ``bench/turn.py``: a stdio server that answers each request with the
bytes the daemon sent for it (its notifications and its reply), recorded in order.

Same framing as the daemon, no decoding beyond finding each frame's end: what is left of a
turn's cost here is moving the same frames through two pipes and two event loops.

    python bench/_replay_server.py RECORDED   (a msgspec-JSON list of base64 byte strings)
"""

from __future__ import annotations

import asyncio
import sys

import msgspec


class ReplayProtocol(asyncio.Protocol):
    def __init__(
        self, out: asyncio.WriteTransport, answers: list[bytes], done: asyncio.Future[None]
    ):
        self._out = out
        self._answers = iter(answers)
        self._done = done
        self._buf = bytearray()
        self._need = -1

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        out: list[bytes] = []
        while True:
            if self._need < 0:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    break
                head = bytes(buf[:end]).lower()
                start = head.index(b"content-length:") + len(b"content-length:")
                self._need = int(head[start:].split(b"\r\n", 1)[0])
                del buf[: end + 4]
            if len(buf) < self._need:
                break
            body = bytes(buf[: self._need])
            del buf[: self._need]
            self._need = -1
            if b'"id"' not in body:  # a notification (initialized, exit)
                if b'"exit"' in body and not self._done.done():
                    self._done.set_result(None)
                continue
            out.append(next(self._answers, b""))
        if out:
            self._out.write(b"".join(out))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            self._done.set_result(None)


async def main() -> None:
    with open(sys.argv[1], "rb") as f:
        answers = msgspec.json.decode(f.read(), type=list[bytes])
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    out, _ = await loop.connect_write_pipe(asyncio.Protocol, sys.stdout.buffer)
    await loop.connect_read_pipe(lambda: ReplayProtocol(out, answers, done), sys.stdin.buffer)  # type: ignore[arg-type]
    await done


if __name__ == "__main__":
    asyncio.run(main())
