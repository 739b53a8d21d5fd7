"""A 10 MiB frame through the depth check (issue 32, item 1).

A shared daemon on a unix socket. One client sends ``part/update`` frames whose text is 10 MiB
of ``x``: the baseline without a bracket (the check is two ``bytes.count``), then the issue's
frame, ``"[" * 100 + "x" * 10 MiB`` (more brackets than ``server.maxDepth``: the frame is
scanned). Meanwhile another client sends ``session/get`` one after the other. Prints, for
each, the daemon's peak memory while the frame is read (``VmHWM`` reset just before, minus
the RSS then) beside the frame's size, the time to the writer's reply, and the other
client's worst and median latency while the frame was on its way (target: at most 2x the
frame, under 100 ms), and the check alone (``too_deep``, in this process): its tracemalloc
peak and its time, the longest it can hold the daemon's event loop.

    python bench/depth_check.py [--mib 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "clients" / "python"))

from _util import frame, rss_mb, unix_daemon
from sidecar_client import connect

from sidecar.model.jsonguard import too_deep


async def read_reply(reader: asyncio.StreamReader, msg_id: int) -> dict[str, Any]:
    """The reply to ``msg_id``; notifications (a 10 MiB ``part/updated`` among them) are read
    and dropped undecoded, so the client's own decoding is not in its latency."""
    while True:
        header = await reader.readuntil(b"\r\n\r\n")
        length = int(header.split(b":", 1)[1])
        body = await reader.readexactly(length)
        if length > 1 << 20 and b'"method"' in body[:200]:
            continue
        reply: dict[str, Any] = json.loads(body)
        if reply.get("id") == msg_id:
            return reply


async def raw_client(sock: Path) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_unix_connection(str(sock), limit=1 << 20)
    writer.write(frame(1, "initialize", {"capabilities": {}}))
    await read_reply(reader, 1)
    return reader, writer


def checker_peak(body: bytes) -> tuple[float, float]:
    """The check alone: tracemalloc's peak in MiB, and its time in ms."""
    tracemalloc.start()
    start = time.perf_counter()
    too_deep(body, 64)
    took = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20, took * 1000


async def main(size_mib: int, rounds: int) -> None:
    async with unix_daemon("dc-") as (proc, sock):
        setup = await connect(f"unix:{sock}")
        sid = (await setup.create_session()).id
        msg = await setup.update_message({"role": "user", "sessionID": sid})
        await setup.close()
        reader, writer = await raw_client(sock)
        other_reader, other_writer = await raw_client(sock)
        probe_id = 1

        async def get() -> None:
            nonlocal probe_id
            probe_id += 1
            other_writer.write(frame(probe_id, "session/get", {"sessionID": sid}))
            await read_reply(other_reader, probe_id)

        text = "x" * (size_mib << 20)
        cases = [("baseline, no bracket", text), ('"[" * 100 + text', "[" * 100 + text)]
        next_id = 2
        warm = {"type": "text", "sessionID": sid, "messageID": msg.id, "text": text}
        writer.write(frame(next_id, "part/update", {"part": warm}))  # first-time costs
        await read_reply(reader, next_id)
        for name, body_text in cases:
            part = {"type": "text", "sessionID": sid, "messageID": msg.id, "text": body_text}
            data = frame(next_id, "part/update", {"part": part})
            body = data.split(b"\r\n\r\n", 1)[1]
            check_mib, check_ms = checker_peak(body)
            peaks, replies, worst, medians = [], [], [], []
            for _ in range(rounds):
                next_id += 1
                data = frame(next_id, "part/update", {"part": part})
                await get()
                Path(f"/proc/{proc.pid}/clear_refs").write_text("5")  # the peak from here
                base = rss_mb(proc.pid, "VmRSS")
                done = asyncio.Event()
                lat: list[float] = []

                async def probe(done: asyncio.Event = done, lat: list[float] = lat) -> None:
                    while not done.is_set():
                        t = time.perf_counter()
                        await get()
                        lat.append(time.perf_counter() - t)

                prober = asyncio.ensure_future(probe())
                start = time.perf_counter()
                writer.write(data)
                reply = await read_reply(reader, next_id)
                took = time.perf_counter() - start
                done.set()
                await prober
                assert "result" in reply, str(reply)[:300]
                peaks.append(rss_mb(proc.pid, "VmHWM") - base)
                replies.append(took * 1000)
                worst.append(max(lat) * 1000)
                medians.append(statistics.median(lat) * 1000)
            print(
                f"{size_mib} MiB part/update, {name}: frame {len(body) / 2**20:.1f} MiB; "
                f"daemon peak +{max(peaks):.1f} MiB ({max(peaks) / (len(body) / 2**20):.2f}x "
                f"the frame); reply in {statistics.median(replies):.0f} ms; other client "
                f"worst {max(worst):.1f} ms, median {statistics.median(medians):.2f} ms; "
                f"checker alone: peak {check_mib:.2f} MiB, {check_ms:.1f} ms"
            )
        writer.close()
        other_writer.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=10, help="the text's size in MiB")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.mib, args.rounds))
