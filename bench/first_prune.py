"""The first prune of a long unpruned session (issue 19, item 3).

A stdio daemon with its default limits gets ``--turns`` turns (a user message, an assistant
message and a completed tool part of ``--output`` characters each: 100k messages and 50k
tool parts by default, as an import of a long session gives) written without a finished
turn, so nothing is pruned yet. Then one turn finishes and its prune marks nearly every
output. Prints what that prune sent the (reading) client in notifications, whether it is
still connected, and how long the turn's automatic work took.

    python bench/first_prune.py [--turns 50000] [--output 2500]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "clients" / "python"))
sys.path.insert(0, str(ROOT / "tests"))  # the test module imports its conftest

from sidecar_client import spawn  # noqa: E402

from tests.e2e import test_first_prune as t  # noqa: E402

WINDOW = 2000  # requests in flight


def _rss_mb(pid: int, key: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


async def main(turns: int, output: int) -> None:
    t.OUTPUT = "o" * output
    where = Path(tempfile.mkdtemp(prefix="fp-"))
    client = await spawn(where / "s.db")
    client.default_timeout = 600
    sid = (await client.create_session()).id
    start = time.perf_counter()
    calls = []
    for turn in range(turns):
        for method, params in t._messages(sid, turn, None):
            calls.append(client.call(method, params))
        if len(calls) >= WINDOW:
            for call in calls:
                await call
            calls = []
    for call in calls:
        await call
    wrote = time.perf_counter() - start
    print(f"wrote {2 * turns:,} messages, {turns:,} tool parts in {wrote:.1f} s")
    proc = client.process
    assert proc is not None
    rss_before = _rss_mb(proc.pid)
    before = len(client.all_notifications())
    start = time.perf_counter()
    for method, params in t._messages(sid, turns, "stop"):
        await client.request(method, params)
    await client.request("session/idle", {"sessionID": sid})
    took = time.perf_counter() - start
    burst = client.all_notifications()[before:]
    size = sum(
        len(json.dumps({"jsonrpc": "2.0", "method": m, "params": p}, separators=(",", ":"))) + 25
        for m, p in burst
    )
    pruned = [p for m, p in burst if m == "session/pruned"]
    ids = sum(len(p["partIDs"]) for p in pruned)
    print(
        f"final turn + prune: {took * 1000:.0f} ms; {ids:,} parts pruned; notifications sent: "
        f"{len(burst)} ({len(pruned)} session/pruned), {size:,} bytes (limit "
        f"{64 << 20:,}, server.maxOutgoingBytes)"
    )
    still = await client.request("session/get", {"sessionID": sid})
    print(f"client still connected and served: {still['id'] == sid}")
    print(
        f"daemon RSS {rss_before:.0f} MB before the final turn, {_rss_mb(proc.pid):.0f} MB "
        f"after; peak {_rss_mb(proc.pid, 'VmHWM'):.0f} MB over the whole run"
    )
    await client.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50_000)
    parser.add_argument("--output", type=int, default=2500)
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.output))
