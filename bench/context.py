"""session/context and session/prune cost: a window behind 100k parts of history vs. alone,
and what the default wait+fit cost over a plain read when nothing is pending.

Both sessions hold the same 1,000-message window (user turns and assistant steps with tool
calls); session A also has 100,000 parts of older history behind a finished compaction.
Timed in-process through the engine service on a real SQLite file (what the daemon's handlers
call), interleaved A/B so machine noise hits both; a part is written to each session before
every round, as a frontend does between two reads. "cold" drops the window cache first (the
first read of a session, from SQLite). Prints one line per figure and the ratios.

With ``--db postgresql://...`` (a server, see ``bench/_pg.py``) the same figures follow on a
fresh PostgreSQL database (``ANALYZE``d after the load, as autovacuum would), then each one
beside SQLite's.

    python bench/context.py [--history-parts 100000] [--window 1000] [--rounds 30]
                            [--db postgresql://user@/postgres?host=/run/postgresql]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pg import Databases
from _util import median, ms, pct

from sidecar.engine.host import Host
from sidecar.engine.service import Engine
from sidecar.model.config import build
from sidecar.model.ids import new_id
from sidecar.model.messages import AssistantMessage, MessageTime, UserMessage
from sidecar.model.parts import (
    CompactionPart,
    TextPart,
    ToolCompleted,
    ToolPart,
    ToolTime,
)
from sidecar.model.session import Session, SessionTime
from sidecar.store import Store

enc = msgspec.json.encode


class QuietHost:
    def publish(self, *a: object) -> None: ...
    def log(self, text: str) -> None: ...
    def progress(self, *a: object) -> None: ...
    async def compacting_hook(self, session_id: str) -> list:  # type: ignore[type-arg]
        return []

    async def client_complete(self, params: object) -> object:
        raise RuntimeError("unused")


def turn(sid: str, t: int, i: int) -> tuple[list, list]:  # type: ignore[type-arg]
    """A user message or an assistant step with a tool call: ~2 parts per message."""
    if i % 4 == 0:
        m = UserMessage(id=new_id("msg"), session_id=sid, time=MessageTime(created=t))
        return [m], [TextPart(id=new_id("prt"), session_id=sid, message_id=m.id, text=f"step {i}")]
    a = AssistantMessage(
        id=new_id("msg"),
        session_id=sid,
        time=MessageTime(created=t),
        parent_id="",
        provider_id="anthropic",
        model_id="claude-sonnet-4-5",
        finish="tool-calls",
    )
    tool = ToolPart(
        id=new_id("prt"),
        session_id=sid,
        message_id=a.id,
        call_id=f"c{t}",
        tool="read",
        state=ToolCompleted(
            input={"filePath": f"src/m{i}.py"}, output="line\n" * 80, time=ToolTime(start=1, end=2)
        ),
    )
    text = TextPart(id=new_id("prt"), session_id=sid, message_id=a.id, text="Reading the file.")
    return [a], [tool, text]


async def fill(store: Store, sid: str, start_t: int, n_messages: int) -> int:
    t = start_t
    msgs: list = []  # type: ignore[type-arg]
    parts: list = []  # type: ignore[type-arg]
    count = 0
    for i in range(n_messages):
        t += 1
        m, p = turn(sid, t, i)
        msgs += [(x, enc(x)) for x in m]
        parts += [(x, enc(x)) for x in p]
        count += len(p)
        if len(parts) >= 2000:
            await store.put_many(msgs, parts)
            msgs, parts = [], []
    await store.put_many(msgs, parts)
    return t


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--history-parts", type=int, default=100_000)
    ap.add_argument("--window", type=int, default=1_000)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--db", metavar="POSTGRESQL_URL", help="also run on PostgreSQL (a server)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print("== SQLite")
        sqlite = await run(str(Path(tmp) / "bench.db"), args)
    if not args.db:
        return
    dbs = Databases(args.db)
    try:
        print("== PostgreSQL")
        pg = await run(await dbs.fresh("context"), args)
    finally:
        await dbs.drop_all()
    print("== PostgreSQL beside SQLite (p50)")
    for name in sorted(sqlite):
        print(
            f"{name:<24}: SQLite {ms(median(sqlite[name]))}  PostgreSQL {ms(median(pg[name]))}  "
            f"ratio {median(pg[name]) / median(sqlite[name]):.2f}"
        )


async def run(db: str, args: argparse.Namespace) -> dict[str, list[float]]:
    """Every figure on one database; the timings by name."""
    store = await Store.open(db, synchronous="NORMAL")
    cfg = build([])
    host: Host = QuietHost()  # type: ignore[assignment]
    engine = Engine(store, host, lambda: cfg)
    a = Session(id=new_id("ses"), title="history", time=SessionTime(created=1, updated=1))
    b = Session(id=new_id("ses"), title="window", time=SessionTime(created=1, updated=1))
    await store.put_session(a)
    await store.put_session(b)
    # Session A: history (~1.5 parts per message) then a finished compaction, then the window.
    t = await fill(store, a.id, 0, int(args.history_parts / 1.5))
    marker = UserMessage(id=new_id("msg"), session_id=a.id, time=MessageTime(created=t + 1))
    mpart = CompactionPart(id=new_id("prt"), session_id=a.id, message_id=marker.id, auto=True)
    summ = AssistantMessage(
        id=new_id("msg"),
        session_id=a.id,
        time=MessageTime(created=t + 2),
        parent_id=marker.id,
        summary=True,
        finish="stop",
        mode="compaction",
    )
    stext = TextPart(id=new_id("prt"), session_id=a.id, message_id=summ.id, text="summary")
    await store.put_many(
        [(marker, enc(marker)), (summ, enc(summ))], [(mpart, enc(mpart)), (stext, enc(stext))]
    )
    await fill(store, a.id, t + 2, args.window)
    await fill(store, b.id, 0, args.window)
    if db.startswith("postgresql"):
        # Fresh statistics, as autovacuum gives a database within a minute or so of a load:
        # without them PostgreSQL's planner hash-joins every part in the database for a
        # window's parts (measured ~50 ms instead of ~0.7 ms per query after this ANALYZE).
        import asyncpg

        conn = await asyncpg.connect(db)
        await conn.execute("ANALYZE")
        await conn.close()
    total_a = await store.count_messages(a.id)
    print(
        f"setup: session A {total_a} messages ({args.history_parts}+ parts of history), "
        f"session B {await store.count_messages(b.id)} messages (window only)"
    )

    results: dict[str, list[float]] = {}

    async def timed(name: str, coro_fn) -> None:  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        await coro_fn()
        results.setdefault(name, []).append(time.perf_counter() - t0)

    for _ in range(3):  # warm-up
        await engine.context(a.id, "parts")
        await engine.context(b.id, "parts")

    async def cold(sid: str) -> None:
        store.cache.invalidate(sid)  # the first read of a session: SQLite, not memory
        await engine.context(sid, "parts")

    for i in range(args.rounds):
        # A frontend writes between two context reads: one new part per round in each.
        for sess in (a, b):
            last = await anext(aiter(store.newest_first(sess.id, page=1)))
            last_id = last[0].info.id
            extra = TextPart(
                id=new_id("prt"),
                session_id=sess.id,
                message_id=last_id,
                text=f"streamed text {i}",
            )
            await store.put_part(extra, enc(extra))
        for fmt in ("parts", "openai"):
            await timed(f"context[{fmt}] A", lambda f=fmt: engine.context(a.id, f))
            await timed(f"context[{fmt}] B", lambda f=fmt: engine.context(b.id, f))
        # What read-your-writes (wait) and fit cost when nothing is pending: vs. neither.
        await timed(
            "context[parts] plain A",
            lambda: engine.context(a.id, "parts", wait=False, fit=False),
        )
        await timed("context[parts] cold A", lambda: cold(a.id))
        await timed("context[parts] cold B", lambda: cold(b.id))
        await timed("prune A", lambda: engine.prune(a.id))
        await timed("prune B", lambda: engine.prune(b.id))
    ctx = await engine.context(a.id, "parts")
    print(f"window: {len(ctx.messages)} messages, {ctx.estimated_tokens} estimated tokens")
    for op in ("context[parts]", "context[openai]", "context[parts] cold", "prune"):
        ra, rb = results[f"{op} A"], results[f"{op} B"]
        print(f"{op} with 100k-part history : p50 {ms(median(ra))}  p95 {ms(pct(ra, 95))}")
        print(f"{op} window only           : p50 {ms(median(rb))}  p95 {ms(pct(rb, 95))}")
        print(f"{op} ratio history/window  : {median(ra) / median(rb):.2f} (target <= 1.2)")
    ra, rp = results["context[parts] A"], results["context[parts] plain A"]
    print(f"context[parts] wait+fit, nothing pending : p50 {ms(median(ra))}")
    print(f"context[parts] wait=false fit=false      : p50 {ms(median(rp))}")
    print(f"context[parts] ratio wait+fit/plain       : {median(ra) / median(rp):.2f}")
    await engine.close()
    await store.close()
    return results


if __name__ == "__main__":
    asyncio.run(main())
