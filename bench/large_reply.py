"""An ~80 MB reply with the default limits (issue 19, item 2).

A shared daemon on a unix socket, default ``server.maxOutgoingBytes`` (64 MiB) and
``server.maxReplyBytes`` (128 MiB). One client writes a session of 8 parts of 10 MB; another
reads it with ``session/messages`` (~80 MB of reply), slowly: 64 KiB at a time with a pause
between reads (``--rate`` MB/s). Then a session of 14 such parts (~140 MB): -32047, nothing
of it sent. Prints the reply sizes, the time taken, and the daemon's RSS before the read and
its peak during it (``VmHWM`` reset just before).

    python bench/large_reply.py [--rate 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "clients" / "python"))

from _util import frame, rss_mb, unix_daemon
from sidecar_client import connect

PART = 10_000_000


async def read_frame(reader: asyncio.StreamReader, rate: float) -> tuple[int, dict[str, Any]]:
    header = await reader.readuntil(b"\r\n\r\n")
    length = int(header.split(b":", 1)[1])
    body = bytearray()
    while len(body) < length:
        body += await reader.readexactly(min(1 << 16, length - len(body)))
        await asyncio.sleep((1 << 16) / (rate * 1e6))  # a slow reader, on purpose
    return length, json.loads(body)


async def main(rate: float) -> None:
    async with unix_daemon("lr-") as (proc, sock):
        writer_client = await connect(f"unix:{sock}")
        writer_client.default_timeout = 600
        sids = []
        for parts in (8, 14):
            sid = (await writer_client.create_session()).id
            msg = await writer_client.update_message({"role": "user", "sessionID": sid})
            for i in range(parts):
                text = chr(ord("a") + i) * PART
                await writer_client.update_part(
                    {"type": "text", "sessionID": sid, "messageID": msg.id, "text": text}
                )
            sids.append(sid)
        await writer_client.close()
        reader, writer = await asyncio.open_unix_connection(str(sock), limit=1 << 20)
        writer.write(frame(1, "initialize", {"capabilities": {}}))
        await read_frame(reader, 1e6)
        Path(f"/proc/{proc.pid}/clear_refs").write_text("5")  # the peak from here on
        base = rss_mb(proc.pid)
        start = time.perf_counter()
        writer.write(frame(2, "session/messages", {"sessionID": sids[0]}))
        size, reply = await read_frame(reader, rate)
        took = time.perf_counter() - start
        parts = reply["result"]["messages"][0]["parts"]
        ok = [p["text"] == chr(ord("a") + i) * PART for i, p in enumerate(parts)]
        print(
            f"80 MB reply: {size:,} bytes delivered to a client reading at {rate:g} MB/s in "
            f"{took:.1f} s; {sum(ok)} of 8 parts intact; daemon RSS {base:.0f} MB before, "
            f"peak {rss_mb(proc.pid, 'VmHWM'):.0f} MB"
        )
        writer.write(frame(3, "session/messages", {"sessionID": sids[1]}))
        size, reply = await read_frame(reader, 1e6)
        print(f"140 MB session: a {size}-byte reply, error {reply['error']['code']}")
        writer.write(frame(4, "session/get", {"sessionID": sids[0]}))
        _, reply = await read_frame(reader, 1e6)
        print(f"same connection afterwards: session/get -> {'result' in reply}")
        writer.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=20.0, help="MB/s the reader reads at")
    asyncio.run(main(parser.parse_args().rate))
