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
from _framed import FramedProtocol, serve_stdio


class ReplayProtocol(FramedProtocol):
    def __init__(
        self, out: asyncio.WriteTransport, answers: list[bytes], done: asyncio.Future[None]
    ):
        super().__init__(out, done)
        self._answers = iter(answers)

    def on_frame(self, body: bytes) -> bytes:
        if b'"id"' not in body:  # a notification (initialized, exit)
            if b'"exit"' in body:
                self.finish()
            return b""
        return next(self._answers, b"")


async def main() -> None:
    with open(sys.argv[1], "rb") as f:
        answers = msgspec.json.decode(f.read(), type=list[bytes])
    await serve_stdio(lambda out, done: ReplayProtocol(out, answers, done))


if __name__ == "__main__":
    asyncio.run(main())
