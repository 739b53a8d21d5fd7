"""Hostile ``history/search`` queries against a real daemon over stdio (issue 32's six).

A session of ``--parts`` (default 2,000) text and tool parts is written, then each hostile
query is sent while a second client asks ``daemon/status`` in a loop; printed: each query's
reply time and what it was answered, the worst of the six, and the other client's slowest
``daemon/status`` meanwhile, beside an ordinary one-word search of the same session.

    python bench/hostile_search.py [--parts 2000] [--db postgresql://...]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "clients" / "python"))

from _pg import Databases  # noqa: E402
from sidecar_client import Client, RpcError, spawn  # noqa: E402

HOSTILE = {
    "NEAR( x 5000": "NEAR(" * 5000,
    "fix OR x 5000": "fix OR " * 5000,
    "fix x 5000": "fix " * 5000,
    "10 MB query": "x" * (10 * 1024 * 1024),
    "NUL in a word": "fi\x00x",
    "100,000 kinds": None,  # ``kinds`` of 100,000 entries, query "fix"
}


async def seed(client: Client, parts: int) -> str:
    sid = (await client.create_session()).id
    calls = []
    for i in range(0, parts, 2):
        user = await client.request(
            "message/update", {"message": {"sessionID": sid, "role": "user"}}
        )
        base = {"sessionID": sid, "messageID": user["id"]}
        text = {"type": "text", "text": f"fix the bug number {i} in src/mod{i}.py please"}
        state = {
            "status": "completed",
            "input": {"command": "pytest"},
            "output": f"fix fix FAILED test_{i} " * 20,
            "title": "t",
            "metadata": {},
            "time": {"start": 1, "end": 2},
        }
        tool = {"type": "tool", "callID": f"c{i}", "tool": "bash", "state": state}
        for part in (text, tool):
            calls.append(client.call("part/update", {"part": base | part}))
    for call in calls:
        await call
    return sid


async def timed(client: Client, params: dict[str, Any]) -> tuple[float, str]:
    start = time.perf_counter()
    try:
        result = await client.request("history/search", params)
        outcome = f"{len(result['hits'])} hits" + (" partial" if result.get("partial") else "")
    except RpcError as exc:
        outcome = f"{exc.code}"
    return time.perf_counter() - start, outcome


async def watch(other: Client, stop: asyncio.Event, worst: list[float]) -> None:
    while not stop.is_set():
        start = time.perf_counter()
        await other.request("daemon/status", {})
        worst[0] = max(worst[0], time.perf_counter() - start)


async def run(db: str | Path, label: str, parts: int) -> None:
    client = await spawn(db)
    client.default_timeout = 300
    other: Client | None = None  # the same connection: a blocked loop delays it too
    try:
        sid = await seed(client, parts)
        ordinary, _ = await timed(client, {"sessionID": sid, "query": "fix"})
        ordinary, _ = await timed(client, {"sessionID": sid, "query": "fix"})
        worst_query = 0.0
        for name, query in HOSTILE.items():
            params: dict[str, Any] = {"sessionID": sid, "query": query}
            if query is None:
                params = {"sessionID": sid, "query": "fix", "kinds": ["text"] * 100_000}
            stop, slow = asyncio.Event(), [0.0]
            watcher = asyncio.create_task(watch(other or client, stop, slow))
            took, outcome = await timed(client, params)
            stop.set()
            await watcher
            worst_query = max(worst_query, took)
            print(
                f"  {label}: {name:<14} answered {outcome:<8} in {took * 1000:8.1f} ms; "
                f"daemon/status meanwhile at worst {slow[0] * 1000:.1f} ms"
            )
        print(
            f"hostile_search {label}: worst of the six hostile queries {worst_query * 1000:.1f} "
            f"ms (an ordinary search of the same {parts:,}-part session {ordinary * 1000:.1f} ms)"
        )
    finally:
        await client.close()
        if other is not None:
            await other.close()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", type=int, default=2000)
    ap.add_argument("--db", help="a PostgreSQL server URL (also measured on SQLite)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as tmp:
        await run(Path(tmp) / "s.db", "sqlite", args.parts)
    if args.db:
        dbs = Databases(args.db)
        try:
            await run(await dbs.fresh("hostile"), "postgresql", args.parts)
        finally:
            await dbs.drop_all()


if __name__ == "__main__":
    asyncio.run(main())
