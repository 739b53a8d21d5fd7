"""The raw baseline for bench/ingest.py: asyncio + msgspec, the daemon's framing, nothing else.

An ``asyncio`` pipe transport on stdin/stdout, ``Content-Length`` frames parsed in
``data_received``, the envelope decoded with msgspec, and every request answered inline
(no task, no store): ``result`` is ``params.part`` when the params carry one, else the params.
``exit`` (or EOF on stdin) ends the process.

    python bench/_echo_server.py
"""

from __future__ import annotations

import asyncio

import msgspec
from _framed import FramedProtocol, frame, serve_stdio


class _Envelope(msgspec.Struct):
    id: int | str | None = None
    method: str = ""
    params: msgspec.Raw = msgspec.Raw(b"null")


class _Params(msgspec.Struct):
    part: msgspec.Raw = msgspec.Raw(b"")


_envelope = msgspec.json.Decoder(_Envelope)
_params = msgspec.json.Decoder(_Params)


class EchoProtocol(FramedProtocol):
    def on_frame(self, body: bytes) -> bytes:
        reply = self._handle(body)
        if reply is None:
            return b""
        return frame(reply)

    def _handle(self, body: bytes) -> bytes | None:
        env = _envelope.decode(body)
        if env.method == "exit":
            self.finish()
            return None
        if env.id is None:
            return None  # a notification
        result = bytes(env.params)
        if result.startswith(b"{"):
            part = _params.decode(result).part
            if len(part):
                result = bytes(part)
        rid = msgspec.json.encode(env.id)
        return b'{"jsonrpc":"2.0","id":%b,"result":%b}' % (rid, result)


if __name__ == "__main__":
    asyncio.run(serve_stdio(EchoProtocol))
