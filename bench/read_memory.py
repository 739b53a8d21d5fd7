"""A read's memory against its reply on a 1,000,000-part session (issue 22: "a read's memory
<= 3x its reply on a 1,000,000-part session").

The store is one SQLite file holding ONE session of ``--parts`` parts (default 1,000,000):
turns of a user message (one text part) and an assistant message (step-start, reasoning,
text, four completed tool calls with outputs of 300 to 3,000 characters of file-like lines,
text, step-finish), i.e. 10 parts a turn, plus one finished compaction ``--tail`` parts
(default 10,000) before the end, so the window is only that tail. ``--seed-turns`` turns
(default 500) are written through the real store API (``Store.put_many``); the session is then
grown to size in SQL by copies of those turns shifted later in time, each under new
time-ordered ids (the JSON's ids and times rewritten to match), one transaction per copy with
the index flush the daemon's writer runs before each commit, so the history index triggers
index every copy (``bench/recall_search.py``'s ``grow``, within one session); the
compaction's two messages go in last through the store API. ``--cache PATH`` keeps the built
file (built beside it, renamed into place when done) so later runs skip the build; by
default it goes to a temporary directory removed at the end. The tail (10,000 parts, several
MB) is larger than any real model's window on purpose: a reply of MBs makes the ratio mean
something against the allocator's noise.

Each read is measured in its own fresh daemon (``python -m sidecar serve --db FILE`` over
stdio, default limits, ``initialize``d): the same request is first sent for a small second
session of the same shape (so the code path's imports and first-use caches are not charged
to the read), then the daemon's peak RSS is reset (``echo 5 > /proc/PID/clear_refs`` resets
``VmHWM`` to the current RSS), ``VmRSS`` is read, the request sent, its whole reply read
(bytes on the wire: header and body), and ``VmHWM`` read. The read's memory is ``VmHWM``
minus ``VmRSS`` before: what the read allocated at its peak, including what it leaves in the
daemon's caches (the window ``session/context`` loads stays cached). Reads:
``session/context`` in the formats ``parts``, ``openai`` and ``anthropic`` (the window after
the compaction); ``session/messages`` with the defaults (the whole history: -32047, as it
cannot fit one reply), a first page of ``limit`` 100, a first page of the most one page holds
(``limit`` and ``partLimit`` 10,000), and a page of the same size continued by a ``cursor``
from the middle of the session. Each is done ``--repeat`` times (default 3, a fresh daemon
each) and the median printed. A reply under 1 MiB gets no verdict: its ratio measures the
allocator, not the read; its absolute growth is printed.

    python bench/read_memory.py [--parts 1000000] [--tail 10000] [--seed-turns 500]
                                [--repeat 3] [--cache PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
from turn import Peer  # bench/ is the script's own directory on sys.path

from sidecar.model.ids import now_ms
from sidecar.model.messages import AssistantMessage, MessageTime, ModelRef, UserMessage
from sidecar.model.parts import (
    CompactionPart,
    Part,
    ReasoningPart,
    StepFinishPart,
    StepStartPart,
    TextPart,
    ToolCompleted,
    ToolPart,
    ToolTime,
)
from sidecar.model.session import Session, SessionTime
from sidecar.model.tokens import Tokens
from sidecar.store import Key, PageCursor, Store
from sidecar.store.packed import json_of, register
from sidecar.store.sqlite import index_noted

PY = sys.executable
PARTS_PER_TURN = 10
TURN_MS = 60_000  # a turn a minute: the user message at +0, the assistant's at +1 s
# Not configured, so its limits are unknown: ``session/context`` serves the window as stored
# (no fitting, no compaction) whatever its size.
MODEL = ModelRef(provider_id="bench", model_id="no-limits")
MIB = 1 << 20
TOOLS = ("read", "bash", "grep", "edit")

Row = tuple[Any, bytes]


class Words:
    """Deterministic random words, lines and file-like outputs."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        letters = "abcdefghijklmnopqrstuvwxyz"
        self.vocab = [
            "".join(self.rng.choice(letters) for _ in range(self.rng.randint(2, 10)))
            for _ in range(6000)
        ]

    def text(self, size: int) -> str:
        out: list[str] = []
        n = 0
        while n < size:
            w = self.rng.choice(self.vocab)
            out.append(w)
            n += len(w) + 1
        return " ".join(out)

    def lines(self, size: int) -> str:
        out: list[str] = []
        n = 0
        while n < size:
            line = "    " * self.rng.randint(0, 3) + self.text(self.rng.randint(20, 90))
            out.append(line)
            n += len(line) + 1
        return "\n".join(out)


def _id(prefix: str, ms: int, j: int, rng: random.Random) -> str:
    """The daemon's id shape (``ids.new_id``) at ``ms``: the copies rewrite the time digits."""
    return f"{prefix}_{ms:013x}{j:04x}{rng.getrandbits(32):08x}"


def _enc(value: Any) -> bytes:
    return msgspec.json.encode(value)


def turn(w: Words, sid: str, at: int) -> tuple[list[Row], list[Row]]:
    """One turn at ``at`` ms: a user message and the assistant's reply, ten parts."""
    rng = w.rng
    user = UserMessage(
        id=_id("msg", at, 0, rng),
        session_id=sid,
        time=MessageTime(created=at),
        agent="build",
        model=MODEL,
    )
    ut = TextPart(
        id=_id("prt", at, 0, rng),
        session_id=sid,
        message_id=user.id,
        text=w.text(rng.randint(100, 600)),
    )
    ac = at + 1000
    done = ac + 20_000
    reply = AssistantMessage(
        id=_id("msg", ac, 0, rng),
        session_id=sid,
        time=MessageTime(created=ac, completed=done),
        parent_id=user.id,
        provider_id=MODEL.provider_id,
        model_id=MODEL.model_id,
        mode="build",
        agent="build",
        path={"cwd": "/work/project", "root": "/work/project"},
        cost=0.0123,
        tokens=Tokens(input=rng.randint(20_000, 90_000), output=rng.randint(100, 2000)),
        finish="stop",
    )
    ids = iter(range(PARTS_PER_TURN))

    def base() -> dict[str, str]:
        return {"id": _id("prt", ac, next(ids), rng), "session_id": sid, "message_id": reply.id}

    parts: list[Part] = [
        StepStartPart(**base(), snapshot=f"{rng.getrandbits(160):040x}"),
        ReasoningPart(**base(), text=w.text(rng.randint(200, 800))),
        TextPart(**base(), text=w.text(rng.randint(100, 500))),
    ]
    for k in range(4):
        tool = TOOLS[k]
        path = f"src/{w.text(8).split()[0]}/{w.text(8).split()[0]}.py"
        args: dict[str, Any] = {
            "read": {"filePath": f"/work/project/{path}"},
            "bash": {"command": f"pytest -q tests/{path} -x", "description": w.text(40)},
            "grep": {"pattern": w.text(12).split()[0], "path": "/work/project/src"},
            "edit": {"filePath": f"/work/project/{path}", "oldString": w.text(80),
                     "newString": w.text(90)},
        }[tool]  # fmt: skip
        start = ac + 2000 + k * 3000
        parts.append(
            ToolPart(
                **base(),
                call_id=f"call_{rng.getrandbits(64):016x}",
                tool=tool,
                state=ToolCompleted(
                    input=args,
                    output=w.lines(rng.randint(300, 3000)),
                    title=path,
                    metadata={"truncated": False},
                    time=ToolTime(start=start, end=start + 1500),
                ),
            )
        )
    parts.append(TextPart(**base(), text=w.text(rng.randint(100, 600))))
    parts.append(StepFinishPart(**base(), reason="stop", cost=0.0123, tokens=reply.tokens))
    messages = [(user, _enc(user)), (reply, _enc(reply))]
    return messages, [(ut, _enc(ut)), *((p, _enc(p)) for p in parts)]


def compaction(w: Words, sid: str, at: int) -> tuple[list[Row], list[Row]]:
    """A finished compaction at ``at``: the marker and its summary (what the engine writes)."""
    rng = w.rng
    marker = UserMessage(
        id=_id("msg", at, 0, rng), session_id=sid, time=MessageTime(created=at), model=MODEL
    )
    mark = CompactionPart(
        id=_id("prt", at, 0, rng), session_id=sid, message_id=marker.id, auto=True
    )
    summary = AssistantMessage(
        id=_id("msg", at + 1000, 0, rng),
        session_id=sid,
        time=MessageTime(created=at + 1000, completed=at + 9000),
        parent_id=marker.id,
        provider_id=MODEL.provider_id,
        model_id=MODEL.model_id,
        mode="compaction",
        agent="compaction",
        summary=True,
        tokens=Tokens(input=150_000, output=1500),
        finish="stop",
    )
    text = TextPart(
        id=_id("prt", at + 1000, 0, rng),
        session_id=sid,
        message_id=summary.id,
        text=w.lines(4000),
    )
    return (
        [(marker, _enc(marker)), (summary, _enc(summary))],
        [(mark, _enc(mark)), (text, _enc(text))],
    )


async def seed(store: Store, w: Words, sid: str, t0: int, turns: int) -> None:
    now = now_ms()
    await store.put_session(
        Session(id=sid, title=f"read_memory {sid}", time=SessionTime(created=t0, updated=now))
    )
    for first in range(0, turns, 100):
        msgs: list[Row] = []
        parts: list[Row] = []
        for i in range(first, min(turns, first + 100)):
            m, p = turn(w, sid, t0 + i * TURN_MS)
            msgs += m
            parts += p
        await store.put_many(msgs, parts)


# A copy of the seed's turns shifted ``:shift`` ms later: each id's 13 time digits rewritten
# (the rest kept, so the order within a message holds), the JSON's ids and times to match.
_NEW_MSG = "'msg_' || printf('%013x', m.created + :shift) || substr(m.id, 18)"
_COPY_MESSAGES = f"""
    INSERT INTO messages (id, session_id, created, role, parent_id, summary_ok, data)
    SELECT nid, session_id, created, role, npid, summary_ok,
        CASE role WHEN 'assistant' THEN json_set(data, '$.id', nid, '$.time.created', created,
            '$.time.completed', json_extract(data, '$.time.completed') + :shift,
            '$.parentID', npid)
        ELSE json_set(data, '$.id', nid, '$.time.created', created) END
    FROM (
        SELECT {_NEW_MSG} AS nid, m.session_id, m.created + :shift AS created, m.role,
            CASE WHEN m.parent_id IS NULL THEN NULL
            ELSE 'msg_' || printf('%013x', u.created + :shift) || substr(m.parent_id, 18)
            END AS npid,
            m.summary_ok, m.data
        FROM messages m LEFT JOIN messages u ON u.id = m.parent_id
        WHERE m.session_id = :sid AND m.rowid <= :top AND m.created < :until
        ORDER BY m.created, m.id
    )
"""
_COPY_PARTS = f"""
    INSERT INTO parts (id, message_id, session_id, type, data)
    SELECT nid, nmid, session_id, type,
        CASE type WHEN 'tool' THEN json_set(data, '$.id', nid, '$.messageID', nmid,
            '$.state.time.start', json_extract(data, '$.state.time.start') + :shift,
            '$.state.time.end', json_extract(data, '$.state.time.end') + :shift)
        ELSE json_set(data, '$.id', nid, '$.messageID', nmid) END
    FROM (
        SELECT 'prt_' || printf('%013x', m.created + :shift) || substr(p.id, 18) AS nid,
            {_NEW_MSG} AS nmid, p.session_id, p.type, {json_of("p")} AS data
        FROM parts p JOIN messages m ON m.id = p.message_id
        WHERE p.session_id = :sid AND p.rowid <= :top AND m.created < :until
        ORDER BY p.rowid
    )
"""


def grow(path: Path, sid: str, t0: int, seed_turns: int, turns: int) -> None:
    """Copy the seed's turns (from ``t0``), shifted later, until the session holds ``turns``."""
    db = sqlite3.connect(path)
    register(db)  # the schema's views and triggers read compressed parts through it
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")
    top_msg, top_part = (
        db.execute(f"SELECT max(rowid) FROM {table} WHERE session_id = ?", (sid,)).fetchone()[0]
        for table in ("messages", "parts")
    )
    have = seed_turns
    while have < turns:
        take = min(seed_turns, turns - have)
        shift = have * TURN_MS
        args = {"shift": shift, "sid": sid, "until": t0 + take * TURN_MS}
        with db:
            db.execute(_COPY_MESSAGES, {**args, "top": top_msg})
            db.execute(_COPY_PARTS, {**args, "top": top_part})
            index_noted(db)  # what the daemon's indexer does after commits
        have += take
        if have % (20 * seed_turns) == 0:
            print(f"   grown to {have * PARTS_PER_TURN:,} parts", file=sys.stderr, flush=True)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


async def build(path: Path, args: argparse.Namespace) -> None:
    """The store: the big session, grown by copies, and a small one of the same shape."""
    turns = args.parts // PARTS_PER_TURN
    tail = args.tail // PARTS_PER_TURN
    w = Words(22)
    t0 = now_ms() - (turns + 10) * TURN_MS
    big, small = "ses_read_memory_big", "ses_read_memory_small"
    store = await Store.open(path, synchronous="OFF")
    try:
        await seed(store, w, big, t0, min(args.seed_turns, turns))
        await seed(store, w, small, t0, 20)
        m, p = compaction(w, small, t0 + 10 * TURN_MS - TURN_MS // 2)
        await store.put_many(m, p)
    finally:
        await store.close()
    grow(path, big, t0, min(args.seed_turns, turns), turns)
    store = await Store.open(path, synchronous="OFF")
    try:
        m, p = compaction(w, big, t0 + (turns - tail) * TURN_MS - TURN_MS // 2)
        await store.put_many(m, p)
    finally:
        await store.close()


def vm(pid: int) -> dict[str, int]:
    """``/proc/PID/status``'s ``Vm*`` lines, in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Vm"):
            name, value = line.split(":", 1)
            out[name] = int(value.split()[0]) * 1024
    return out


class Sample(msgspec.Struct):
    reply: int  # bytes on the wire, header and body
    growth: int  # VmHWM after minus VmRSS before
    seconds: float
    error: int | None


async def measure(db: Path, method: str, params: dict[str, Any], warm: dict[str, Any]) -> Sample:
    """One read in a fresh daemon, after the same read of the small session."""
    peer = await Peer.spawn(PY, "-m", "sidecar", "serve", "--db", str(db))
    try:
        await peer.request("initialize", {"processId": os.getpid(), "capabilities": {}})
        rid, data = peer.frame(method, warm)
        await peer.exchange(rid, data)
        pid = peer.proc.pid
        rid, data = peer.frame(method, params)
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
        before = vm(pid)["VmRSS"]
        took, body, got = await peer.exchange(rid, data)
        peak = vm(pid)["VmHWM"]
        msg = json.loads(body)
        error = msg["error"]["code"] if "error" in msg else None
        return Sample(len(got[-1]), peak - before, took, error)
    finally:
        await peer.close()


def reads(db: Path) -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """(name, method, params, the small session's params) of every read measured."""
    conn = sqlite3.connect(db)
    big, small = "ses_read_memory_big", "ses_read_memory_small"
    n = conn.execute("SELECT count(*) FROM messages WHERE session_id = ?", (big,)).fetchone()[0]
    created, mid = conn.execute(
        "SELECT created, id FROM messages WHERE session_id = ? ORDER BY created, id "
        "LIMIT 1 OFFSET ?",
        (big, n // 2),
    ).fetchone()
    conn.close()
    deep = PageCursor(Key(created, mid)).encode()
    page = {"limit": 10_000, "partLimit": 10_000}
    out: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = []
    for fmt in ("parts", "openai", "anthropic"):
        p = {"format": fmt}
        out.append((f"session/context {fmt}", "session/context", p, p))
    for name, p in (
        ("session/messages defaults (whole history)", {}),
        ("session/messages first page, limit 100", {"limit": 100}),
        ("session/messages first page, limit+partLimit 10,000", page),
        ("session/messages page at a cursor mid-session, limit+partLimit 10,000",
         {**page, "cursor": deep}),
    ):  # fmt: skip
        warm = {k: v for k, v in p.items() if k != "cursor"}
        out.append((name, "session/messages", p, warm))
    return [
        (name, method, {"sessionID": big, **p}, {"sessionID": small, **w})
        for name, method, p, w in out
    ]


async def run(args: argparse.Namespace, db: Path) -> None:
    if db.exists():
        print(f"read_memory bench: cached store {db} ({db.stat().st_size / MIB:,.0f} MiB)")
    else:
        db.parent.mkdir(parents=True, exist_ok=True)
        part = db.with_name(db.name + ".building")
        for stale in (part, Path(f"{part}-wal"), Path(f"{part}-shm")):
            stale.unlink(missing_ok=True)
        start = time.perf_counter()
        await build(part, args)
        took = time.perf_counter() - start
        part.replace(db)
        print(
            f"read_memory bench: store built in {took:.0f} s ({db.stat().st_size / MIB:,.0f} MiB)"
        )
    conn = sqlite3.connect(db)
    register(conn)
    parts, size = conn.execute(
        "SELECT count(*), sum(length(data)) FROM part_json WHERE session_id = 'ses_read_memory_big'"
    ).fetchone()
    conn.close()
    print(
        f"session: {parts:,} parts ({size / MIB:,.0f} MiB of stored JSON), one finished "
        f"compaction {args.tail:,} parts before the end; each read in a fresh daemon, "
        f"median of {args.repeat}"
    )
    for name, method, params, warm in reads(db):
        samples = [await measure(db, method, params, warm) for _ in range(args.repeat)]
        reply = int(statistics.median(s.reply for s in samples))
        growth = int(statistics.median(s.growth for s in samples))
        took = statistics.median(s.seconds for s in samples)
        error = f" (error {samples[0].error})" if samples[0].error is not None else ""
        head = (
            f"{name}: reply {reply:,} B{error}, memory +{growth / MIB:.1f} MiB "
            f"(max {max(s.growth for s in samples) / MIB:.1f}), {took * 1000:.0f} ms"
        )
        if reply < MIB:
            print(f"{head}; reply under 1 MiB: no ratio (allocator noise), absolute growth only")
        else:
            ratio = growth / reply
            verdict = "OK" if ratio <= 3 else "MISSED"
            print(f"{head}; {ratio:.2f}x its reply (target <= 3x)  {verdict}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", type=int, default=1_000_000)
    ap.add_argument("--tail", type=int, default=10_000, help="parts after the compaction")
    ap.add_argument("--seed-turns", type=int, default=500, help="turns written through the API")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cache", type=Path, default=None, help="keep the built store here")
    args = ap.parse_args()
    if args.cache is not None:
        asyncio.run(run(args, args.cache))
        return
    with tempfile.TemporaryDirectory(prefix="bench-read-memory-") as tmp:
        asyncio.run(run(args, Path(tmp) / "read-memory.db"))


if __name__ == "__main__":
    main()
