"""Issue 32 item 10: two daemons on one database, both compacting and reading the same
sessions, with ``compaction.prepare`` on.

Two real daemon processes on unix sockets share one database (a SQLite file, or a PostgreSQL
database). Each session is written through one daemon and read, in a tight loop, through
both: overflowing turns compact on the writer's daemon (a prepared summary committed, or a
compaction as usual), over-budget reads compact on the reader's (``fit``), and every commit of
one daemon lands between the reads of the other. It once answered ``session/context`` with
-32603 (``KeyError``): a window read in two statements, messages then parts, with the other
daemon's compaction committed between them. What must hold: no request is answered -32603,
and once both are idle, each daemon serves every session's window exactly as a fresh build
from the store gives it. Bounded in turns and in time.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest_asyncio
from sidecar_client import Client, RpcError
from wire import put_message, put_part

from sidecar.engine import context as context_mod
from sidecar.store import Store

from .conftest import SocketDaemon

MODEL = {"providerID": "test", "modelID": "m32"}
LIMITS = {"context": 32_000, "output": 4_000}  # usable 28,000
# Reported input tokens per turn, in cycles: below, where prepare (0.5) starts, over.
CYCLE = (6_000, 16_000, 29_000)
SESSIONS = 4
TURNS = 15  # per session: five overflows each
READ_TIMEOUT = 40.0  # seconds for the whole run, writes and reads


@pytest_asyncio.fixture(loop_scope="session")
async def pair(
    db: str | Path, daemon_env: dict[str, str | None]
) -> AsyncIterator[list[SocketDaemon]]:
    where = Path(tempfile.mkdtemp(prefix="sc2-"))
    config = where / "config.json"
    config.write_text(json.dumps({"compaction": {"prepare": 0.5}, "models": {"test/m32": LIMITS}}))
    started: list[SocketDaemon] = []
    try:
        for i in range(2):
            started.append(
                await SocketDaemon.start(
                    f"unix:{where / f'd{i}.sock'}",
                    db,
                    daemon_env,
                    extra_args=["--config", str(config)],
                )
            )
        yield started
    finally:
        for daemon in started:
            await daemon.stop()
        shutil.rmtree(where, ignore_errors=True)


def _tokens(n: int) -> dict[str, Any]:
    return {"input": n, "output": 200, "reasoning": 0, "cache": {"read": 0, "write": 0}}


async def _turn(c: Client, sid: str, n: int) -> None:
    user = await put_message(c, {"role": "user", "sessionID": sid, "model": MODEL})
    text = f"Turn {n}: refactor src/mod{n}.py and run the tests. " * 60
    await put_part(c, {"type": "text", "sessionID": sid, "messageID": user["id"], "text": text})
    a = await put_message(
        c, {"role": "assistant", "sessionID": sid, "parentID": user["id"], **MODEL}
    )
    answer = f"Done with src/mod{n}.py; the diff is below. " * 80
    await put_part(c, {"type": "text", "sessionID": sid, "messageID": a["id"], "text": answer})
    a.update(finish="stop", tokens=_tokens(CYCLE[n % len(CYCLE)]))
    await put_message(c, a)


async def test_two_daemons_compacting_and_reading_the_same_sessions(
    pair: list[SocketDaemon], db: str | Path
) -> None:
    writers = [await d.connect() for d in pair]
    readers = [await d.connect() for d in pair]
    sessions = [(await writers[i % 2].create_session()).id for i in range(SESSIONS)]
    internal: list[str] = []
    other: list[str] = []
    done = asyncio.Event()

    def failed(exc: RpcError) -> None:
        (internal if exc.code == -32603 else other).append(str(exc))

    async def write(i: int) -> None:
        c, sid = writers[i % 2], sessions[i]
        for n in range(TURNS):
            try:
                await _turn(c, sid, n)
                # What a frontend does before its next model call: read the window.
                await c.request("session/context", {"sessionID": sid})
            except RpcError as exc:
                failed(exc)

    async def read(reader: Client) -> int:
        reads = 0
        while not done.is_set():
            for sid in sessions:
                try:
                    await reader.request("session/context", {"sessionID": sid, "wait": False})
                except RpcError as exc:
                    failed(exc)
                reads += 1
        return reads

    reading = [asyncio.create_task(read(r)) for r in readers]
    try:
        async with asyncio.timeout(READ_TIMEOUT):
            await asyncio.gather(*(write(i) for i in range(SESSIONS)))
    finally:
        done.set()
        reads = await asyncio.gather(*reading)
    assert all(n > 0 for n in reads)
    assert internal == [], internal[:3]
    # Busy (-32044: the other daemon holds the compaction lease) is a fair answer to a read
    # that wanted to compact; nothing else is.
    assert [e for e in other if "[-32044]" not in e] == []

    for sid in sessions:
        for c in writers:
            await c.request("session/idle", {"sessionID": sid})
    compactions = 0
    fresh_store = await Store.open(db, readonly=True)
    try:
        for sid in sessions:
            session = await fresh_store.require_session(sid)
            expected = await context_mod.build(fresh_store, session, "parts")
            want = msgspec.json.decode(msgspec.json.encode(expected))
            for c in readers:
                got = await c.request(
                    "session/context", {"sessionID": sid, "fit": False, "wait": False}
                )
                ids = [m["info"]["id"] for m in got["messages"]]
                assert ids == [m["info"]["id"] for m in want["messages"]]
                assert got["messages"] == want["messages"]
                assert got["estimatedTokens"] == want["estimatedTokens"]
            listed = await writers[0].request("session/compactions", {"sessionID": sid})
            compactions += len(listed["compactions"])
    finally:
        await fresh_store.close()
    assert compactions >= SESSIONS  # the sessions did compact, on both daemons
