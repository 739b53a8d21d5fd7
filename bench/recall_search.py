"""Is what compaction dropped still findable? ``history/search`` over the replayed transcripts.

Each transcript of ``--transcripts DIR`` is replayed in-process into one real SQLite store
(one session each) through the engine service, as ``bench/recall.py`` does: standard
compaction, extractive writer, prune on, a ``--context`` window (default 32,000 tokens), and a
closing compaction at the end (the window a fresh session would start from). Then:

1. **Recall.** From each session's stored history, candidate exact strings of four kinds are
   taken by this file's own rules (regular expressions over the parts' text, tool inputs and
   outputs): ``error`` lines (exceptions, ``error:``, ``FAILED``, ...), file ``path``s,
   ``identifier``s (snake_case or camelCase, 6+ characters), and shell ``command``s (the first
   line of a tool's ``command`` input). Those the final window no longer holds (whitespace
   collapsed) are the pool; ``--sample`` (default 200) are drawn from it with a fixed seed,
   spread evenly over the kinds and the sessions. Each is searched as typed (the string as the
   query, no quoting added) in its session through the same query ``history/search`` runs,
   and counts as found when one of the top 5 hits is a part whose content holds it. Printed
   beside it: the share the final window alone holds (0 for the pool by construction) and,
   over every candidate of the history, the share the final window holds.
2. **Latency.** The database is grown to ``--parts`` parts (default 1,000,000) by copying the
   replayed sessions under new ids in SQL (the index triggers index every copy), then the
   sampled queries are timed against it (each in its own session, top 20, as the tool asks),
   beside a plain ``LIKE '%string%'`` scan of the same session's parts for the first
   ``--like`` (default 40) of them.

    python bench/recall_search.py [--context 32000] [--sample 200] [--parts 1000000]
                                  [--like 40] [--transcripts DIR] [--seed 26]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from _host import Host  # bench/ is the script's own directory on sys.path
from recall import Clock, _enc, assistant_turn, norm, replay_args, to_part, window_text

from sidecar.engine.compactor import Request
from sidecar.engine.service import Engine
from sidecar.engine.tokens import estimate_messages
from sidecar.engine.window import load_window
from sidecar.model.config import build
from sidecar.model.ids import new_id, now_ms
from sidecar.model.messages import AssistantMessage, MessageTime, ModelRef, UserMessage
from sidecar.model.parts import Part, ReasoningPart, TextPart, ToolCompleted, ToolError, ToolPart
from sidecar.model.session import Session, SessionTime
from sidecar.model.transcript import Transcript, load
from sidecar.store import Store
from sidecar.store.packed import register
from sidecar.store.sqlite import index_noted

TOP = 5
KINDS = ("error", "path", "identifier", "command")
ERROR = re.compile(
    r"^\s*((?:[\w.]+(?:Error|Exception)\b.*|.*\berror(?:\[\w+\])?: .*|(?:FAILED|ERROR|FAIL)\b.*"
    r"|fatal: .*|.*: command not found|.*: No such file or directory))\s*$",
    re.M,
)
PATH = re.compile(r"(?<![\w/.-])((?:\.{0,2}/)?(?:[\w.-]+/)+[\w-]+\.[A-Za-z]\w{0,5})(?![\w/])")
IDENT = re.compile(r"\b([A-Za-z_]\w*(?:_[A-Za-z0-9]\w*|[a-z0-9][A-Z]\w*))\b")


@dataclass
class Replayed:
    name: str
    session_id: str
    window: str  # the final window's text, whitespace collapsed
    parts: list[Part] = field(default_factory=list)


async def replay(store: Store, t: Transcript, context: int, output: int) -> Replayed:
    """``bench/recall.py``'s replay, into a shared store, keeping the session."""
    model = ModelRef(provider_id="replay", model_id=t.model)
    cfg = build([{"models": {f"replay/{t.model}": {"context": context, "output": output}}}])
    engine = Engine(store, Host(), lambda: cfg)
    now = now_ms()
    session = Session(id=new_id("ses"), title=t.session, time=SessionTime(created=now, updated=now))
    await store.put_session(session)
    sid, parent = session.id, ""
    clock = Clock(engine, store, sid, now)
    out = Replayed(t.session, sid, "")

    try:
        for index, m in enumerate(t.messages):
            created = clock.tick()
            info: UserMessage | AssistantMessage
            if m.role == "user":
                info = UserMessage(
                    id=new_id("msg"), session_id=sid, time=MessageTime(created=created), model=model
                )
                parent = info.id
                parts = [to_part(p, sid, info.id, created) for p in m.parts]
            else:
                prompt = estimate_messages(await load_window(store, session))
                info, parts = assistant_turn(t, index, sid, parent, created, prompt, model)
            out.parts.extend(parts)
            await store.put_many([(info, _enc(info))], [(p, _enc(p)) for p in parts])
            if isinstance(info, AssistantMessage):
                engine.message_stored(info)
                await clock.settle()
        await engine.compact(Request(session_id=sid))
        await clock.settle()
        out.window = norm(window_text(await load_window(store, session)))
    finally:
        await engine.close()
    return out


def texts_of(part: Part) -> list[str]:
    if isinstance(part, TextPart | ReasoningPart):
        return [part.text]
    if not isinstance(part, ToolPart):
        return []
    out = [str(v) for v in part.state.input.values() if isinstance(v, str | int | float)]
    if isinstance(part.state, ToolCompleted):
        out.append(part.state.output)
    elif isinstance(part.state, ToolError):
        out.append(part.state.error)
    return out


def candidates(r: Replayed) -> dict[str, set[str]]:
    """Every candidate string of each kind in a session's history."""
    found: dict[str, set[str]] = {k: set() for k in KINDS}
    for part in r.parts:
        for text in texts_of(part):
            for line in ERROR.findall(text):
                line = norm(line)
                if 12 <= len(line) <= 160:
                    found["error"].add(line)
            found["path"].update(p for p in PATH.findall(text) if len(p) >= 6)
            found["identifier"].update(i for i in IDENT.findall(text) if len(i) >= 6)
        if isinstance(part, ToolPart):
            command = part.state.input.get("command")
            if isinstance(command, str) and command.strip():
                first = norm(command.strip().splitlines()[0])
                if 4 <= len(first) <= 160:
                    found["command"].add(first)
    return found


def sample(runs: list[Replayed], n: int, seed: int) -> tuple[list[tuple[str, str, str]], float]:
    """``n`` (session, kind, string) the final windows do not hold, spread over kinds and
    sessions; and the share of all candidates the final windows hold."""
    rng = random.Random(seed)
    pools: dict[str, list[tuple[str, str, str]]] = {k: [] for k in KINDS}
    held = total = 0
    for r in runs:
        for kind, strings in candidates(r).items():
            for s in sorted(strings):
                total += 1
                if s in r.window:
                    held += 1
                else:
                    pools[kind].append((r.session_id, kind, s))
    chosen: list[tuple[str, str, str]] = []
    per_kind = n // len(KINDS)
    for i, kind in enumerate(KINDS):
        want = per_kind + (1 if i < n % len(KINDS) else 0)
        by_session: dict[str, list[tuple[str, str, str]]] = {}
        for item in pools[kind]:
            by_session.setdefault(item[0], []).append(item)
        for items in by_session.values():
            rng.shuffle(items)
        # Round robin over the sessions, so no one transcript dominates.
        order = sorted(by_session)
        while want and any(by_session.values()):
            for sid in order:
                if want and by_session[sid]:
                    chosen.append(by_session[sid].pop())
                    want -= 1
    return chosen, held / total if total else 0.0


async def found_in_top(store: Store, sid: str, query: str) -> tuple[bool, float]:
    start = time.perf_counter()
    hits = (await store.search_history(sid, query, TOP)).hits
    took = time.perf_counter() - start
    needle = norm(query)
    for hit in hits:
        got = await store.get_part(hit[2])
        if got is not None and any(needle in norm(t) for t in texts_of(got[0])):
            return True, took
    return False, took


def grow(path: Path, target: int) -> int:
    """Copy the replayed sessions under new ids until the store holds ``target`` parts."""
    db = sqlite3.connect(path)
    register(db)  # the schema's views and triggers read compressed parts through it
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")
    base = db.execute("SELECT count(*) FROM parts").fetchone()[0]
    have, copy = base, 0
    while have < target:
        copy += 1
        tag = f"~{copy}"
        with db:
            db.execute(
                "INSERT INTO sessions SELECT id || ?, parent_id, created, updated, data "
                "FROM sessions WHERE instr(id, '~') = 0",
                (tag,),
            )
            db.execute(
                "INSERT INTO messages SELECT id || ?1, session_id || ?1, created, role, "
                "parent_id || ?1, summary_ok, data FROM messages WHERE instr(id, '~') = 0",
                (tag,),
            )
            rows = min(base, target - have)
            db.execute(
                "INSERT INTO parts SELECT id || ?1, message_id || ?1, session_id || ?1, type, "
                "data, z FROM parts WHERE instr(id, '~') = 0 ORDER BY rowid LIMIT ?2",
                (tag, rows),
            )
            index_noted(db)  # what the daemon's indexer does after commits
        have += rows
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return have


def like_scan(path: Path, queries: list[tuple[str, str, str]]) -> list[float]:
    db = sqlite3.connect(path)
    register(db)
    took = []
    for sid, _kind, s in queries:
        pattern = "%" + s.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        start = time.perf_counter()
        db.execute(
            "SELECT id FROM part_json WHERE session_id = ? AND data LIKE ? ESCAPE '\\' LIMIT 20",
            (sid, pattern),
        ).fetchall()
        took.append(time.perf_counter() - start)
    db.close()
    return took


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


async def run(args: argparse.Namespace, tmp: Path) -> None:
    paths = sorted(args.transcripts.glob("*.jsonl"))
    if not paths:
        sys.exit(f"no transcripts in {args.transcripts}")
    db = tmp / "recall-search.db"
    store = await Store.open(db, synchronous="OFF")
    runs = []
    try:
        for path in paths:
            runs.append(await replay(store, load(path), args.context, args.output))
        chosen, window_share_all = sample(runs, args.sample, args.seed)
        found: dict[str, list[bool]] = {k: [] for k in KINDS}
        misses: list[str] = []
        for sid, kind, s in chosen:
            ok, _took = await found_in_top(store, sid, s)
            found[kind].append(ok)
            if not ok:
                misses.append(f"{kind}: {s!r}")
    finally:
        await store.close()
    parts = sum(len(r.parts) for r in runs)
    every = [ok for oks in found.values() for ok in oks]
    print(
        f"recall_search bench: {len(runs)} transcripts replayed into one SQLite store, window "
        f"{args.context:,} tokens, standard compaction + closing compaction; {parts:,} parts"
    )
    share = sum(every) / len(every) if every else 0.0
    by_kind = ", ".join(f"{k} {sum(v)}/{len(v)}" for k, v in found.items())
    print(
        f"recall: {len(every)} exact strings the final windows no longer hold; found in the top "
        f"{TOP} hits of history_search: {share:.3f} ({by_kind}) (target >= 0.95)  "
        + ("OK" if share >= 0.95 else "MISSED")
    )
    print(
        f"recall: the final window alone holds 0.000 of them (by construction); over every "
        f"candidate string of the histories it holds {window_share_all:.3f}"
    )
    for miss in misses[:10]:
        print(f"   missed {miss}")

    start = time.perf_counter()
    total = grow(db, args.parts)
    grown = time.perf_counter() - start
    size = db.stat().st_size / 2**20
    store = await Store.open(db, synchronous="OFF")
    took: list[float] = []
    try:
        for sid, _kind, s in chosen:  # a warm-up pass, then the timed one
            await store.search_history(sid, s, 20)
        for sid, _kind, s in chosen:
            start = time.perf_counter()
            await store.search_history(sid, s, 20)
            took.append(time.perf_counter() - start)
        slowest = sorted(zip(took, chosen, strict=True), reverse=True)[:3]
        star: list[float] = []
        for _sid, _kind, s in chosen[: args.like]:  # a warm-up pass, then the timed one
            await store.search_history(None, s, 20)
        for _sid, _kind, s in chosen[: args.like]:
            start = time.perf_counter()
            await store.search_history(None, s, 20)
            star.append(time.perf_counter() - start)
    finally:
        await store.close()
    like = like_scan(db, chosen[: args.like])
    p95 = pct(took, 0.95)
    print(
        f"latency on {total:,} parts ({size:,.0f} MiB, grown by SQL copies in {grown:.0f} s): "
        f"history_search p50 {pct(took, 0.5):.1f} ms p95 {p95:.1f} ms over {len(took)} queries "
        f"(target p95 <= 50 ms)  " + ("OK" if p95 <= 50 else "MISSED")
    )
    for t, (_sid, kind, s) in slowest:
        print(f"   slowest: {t * 1000:.1f} ms {kind} {s[:80]!r}")
    star95 = pct(star, 0.95)
    print(
        f'latency: sessionID "*" (all {total:,} parts) p50 {pct(star, 0.5):.1f} ms p95 '
        f"{star95:.1f} ms over {len(star)} queries (target p95 <= 50 ms)  "
        + ("OK" if star95 <= 50 else "MISSED")
    )
    print(
        f"latency: plain LIKE scan of the session's parts p50 {pct(like, 0.5):.1f} ms p95 "
        f"{pct(like, 0.95):.1f} ms over {len(like)} queries"
    )


def main() -> None:
    ap = replay_args(__doc__, 32_000, 4_000)
    ap.add_argument("--sample", type=int, default=200)
    ap.add_argument("--parts", type=int, default=1_000_000)
    ap.add_argument("--like", type=int, default=40)
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--tmp", type=Path, default=None, help="where the database goes")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-recall-search-", dir=args.tmp) as tmp:
        asyncio.run(run(args, Path(tmp)))


if __name__ == "__main__":
    main()
