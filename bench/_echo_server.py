"""The raw baseline for bench/ingest.py: asyncio + msgspec, the daemon's framing, nothing else.

An ``asyncio`` pipe transport on stdin/stdout, ``Content-Length`` frames parsed in
``data_received``, the envelope decoded with msgspec, and every request answered inline
(no task, no store): ``result`` is ``params.part`` when the params carry one, else the params.
``exit`` (or EOF on stdin) ends the process.

    python bench/_echo_server.py
"""

from __future__ import annotations

import asyncio
import sys

import msgspec


class _Envelope(msgspec.Struct):
    id: int | str | None = None
    method: str = ""
    params: msgspec.Raw = msgspec.Raw(b"null")


class _Params(msgspec.Struct):
    part: msgspec.Raw = msgspec.Raw(b"")


_envelope = msgspec.json.Decoder(_Envelope)
_params = msgspec.json.Decoder(_Params)


class EchoProtocol(asyncio.Protocol):
    def __init__(self, out: asyncio.WriteTransport, done: asyncio.Future[None]) -> None:
        self._out = out
        self._done = done
        self._buf = bytearray()
        self._need = -1

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        replies: list[bytes] = []
        while True:
            if self._need < 0:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    break
                length = -1
                for line in bytes(buf[:end]).split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                del buf[: end + 4]
                if length < 0:
                    continue
                self._need = length
            if len(buf) < self._need:
                break
            body = bytes(buf[: self._need])
            del buf[: self._need]
            self._need = -1
            reply = self._handle(body)
            if reply is not None:
                replies.append(b"Content-Length: %d\r\n\r\n%b" % (len(reply), reply))
        if replies:
            self._out.write(b"".join(replies))

    def _handle(self, body: bytes) -> bytes | None:
        env = _envelope.decode(body)
        if env.method == "exit":
            if not self._done.done():
                self._done.set_result(None)
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

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            self._done.set_result(None)


async def main() -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    out, _ = await loop.connect_write_pipe(asyncio.Protocol, sys.stdout.buffer)
    await loop.connect_read_pipe(lambda: EchoProtocol(out, done), sys.stdin.buffer)  # type: ignore[arg-type]
    await done


if __name__ == "__main__":
    asyncio.run(main())
