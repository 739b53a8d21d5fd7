"""Collapse compaction on real transcripts: how far each cycle shrinks the context, and proof
that the retained tail is stored byte for byte as it was written.

Every transcript of ``--transcripts DIR`` with more than 100 messages is replayed in-process
into a real SQLite store through the engine service, with ``compaction.method = "collapse"``
and a model window (default 64,000 tokens, 8,000 output). Each assistant message is written
with ``tokens.input`` = the estimated size of the context window it would have been sent
(the runner's convention), then the engine's automatic check runs (``Engine.message_stored``)
and the replay waits for the engine's tasks. Prune is off (``--prune`` turns it on), so any
difference in a tail is the compaction's doing.

After each collapse compaction one row is printed: transcript, cycle, message index, context
before (the window the check saw) and after (the window read back from the store), after as a
share of the model window, what the compactor reported as "after" (plus the continue message
it appends), the messages kept verbatim,
how many older marker/summary pairs the window shows besides the newest, and ``tail
identical`` -- every retained message and each of its parts compared, as stored JSON
(``load_window(..., raws=...)``), with the bytes this script wrote, and no part added or lost.

    python bench/collapse.py [--context 64000] [--output 8000] [--transcripts DIR] [--prune]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from _host import Host  # bench/ is the script's own directory on sys.path
from recall import replay_args, to_part

from sidecar.engine import ledger
from sidecar.engine.service import Engine
from sidecar.engine.tokens import estimate, estimate_messages
from sidecar.engine.window import load_window
from sidecar.model.config import build
from sidecar.model.conversation import is_marker
from sidecar.model.ids import new_id, now_ms
from sidecar.model.messages import (
    AssistantMessage,
    MessageTime,
    ModelRef,
    UserMessage,
    WithParts,
)
from sidecar.model.parts import (
    Part,
)
from sidecar.model.session import Session, SessionTime
from sidecar.model.tokens import CacheTokens, Tokens
from sidecar.model.transcript import TMessage, Transcript, load
from sidecar.store import Store

enc = msgspec.json.encode
NAMED = (
    "pi-before-compaction",
    "pi-large-session",
    "pi-session-2025-12-17",
    "mini-swe-agent-django-13265",
)
_REPORTED = re.compile(r"^(\d+) -> (\d+) tokens$")


@dataclass
class Row:
    transcript: str
    cycle: int
    index: int
    before: int
    after: int
    reported: int
    tail: int
    old_pairs: int
    identical: bool


@dataclass
class Result:
    name: str
    messages: int
    rows: list[Row] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    peak: int = 0
    final: int = 0
    cycle1_files: set[str] = field(default_factory=set)
    final_files: set[str] = field(default_factory=set)
    seconds: float = 0.0


class Replay:
    def __init__(self, store: Store, engine: Engine, host: Host, t: Transcript, window: int):
        self.store = store
        self.engine = engine
        self.host = host
        self.t = t
        self.window = window
        self.model = ModelRef(provider_id="replay", model_id=t.model)
        self.written: dict[str, bytes] = {}  # id -> bytes written (messages and parts)
        self.parts_of: dict[str, list[str]] = {}  # message id -> its part ids, as written
        self.last = 0

    def tick(self) -> int:
        self.last = max(self.last + 1, now_ms())
        return self.last

    async def put(self, info: UserMessage | AssistantMessage, parts: list[Part]) -> None:
        raw = enc(info)
        raws = [enc(p) for p in parts]
        self.written[info.id] = raw
        self.parts_of[info.id] = [p.id for p in parts]
        self.written.update({p.id: r for p, r in zip(parts, raws, strict=True)})
        await self.store.put_many([(info, raw)], list(zip(parts, raws, strict=True)))

    async def context(self, session: Session, raws: dict[str, str] | None = None) -> Any:
        return await load_window(self.store, session, raws)

    async def sync_clock(self, sid: str) -> None:
        msgs = await self.store.window(sid)
        if msgs:
            self.last = max(self.last, max(m.info.time.created for m in msgs))

    async def run(self, result: Result) -> None:
        t = self.t
        now = now_ms()
        session = Session(
            id=new_id("ses"), title=t.session, time=SessionTime(created=now, updated=now)
        )
        await self.store.put_session(session)
        sid = session.id
        parent = ""
        cycle = 0
        for index, m in enumerate(t.messages):
            created = self.tick()
            if m.role == "user":
                info_u = UserMessage(
                    id=new_id("msg"),
                    session_id=sid,
                    time=MessageTime(created=created),
                    model=self.model,
                    agent="build",
                )
                parent = info_u.id
                await self.put(info_u, [to_part(p, sid, info_u.id, created) for p in m.parts])
                continue
            window = await self.context(session)
            prompt = estimate_messages(window)
            mid = new_id("msg")
            parts = [to_part(p, sid, mid, created) for p in m.parts]
            nxt: TMessage | None = t.messages[index + 1] if index + 1 < len(t.messages) else None
            has_tools = any(p.type == "tool" for p in m.parts)
            finish = (
                "tool-calls"
                if has_tools and nxt is not None and nxt.role == "assistant"
                else "stop"
            )
            output = sum(
                estimate(p.text) + (estimate(enc(p.input).decode()) if p.type == "tool" else 0)
                for p in m.parts
            )
            info = AssistantMessage(
                id=mid,
                session_id=sid,
                parent_id=parent,
                time=MessageTime(created=created, completed=created + 1),
                provider_id=self.model.provider_id,
                model_id=self.model.model_id,
                mode="build",
                agent="build",
                finish=finish,
                tokens=Tokens(input=prompt, output=output, cache=CacheTokens()),
            )
            await self.put(info, parts)
            before = estimate_messages(await self.context(session))
            result.peak = max(result.peak, before)
            seen = len(self.host.events)
            self.engine.message_stored(info)
            await self.engine.settle()  # ends the turn, as the runner's session/idle does
            events = self.host.events[seen:]
            for method, params in events:
                if method == "session/status" and params.status == "error":
                    result.errors.append(f"message {index}: {params.error}")
            compactions = [p for meth, p in events if meth == "session/compacted"]
            if not compactions:
                continue
            await self.sync_clock(sid)
            reported = [
                int(match.group(2))
                for meth, v in events
                if meth == "$/progress"
                and v.get("kind") == "end"
                and (match := _REPORTED.match(str(v.get("message", ""))))
            ]
            raws: dict[str, str] = {}
            after_window = await self.context(session, raws)
            after = estimate_messages(after_window)
            tail = [w for w in after_window if w.info.id in self.written]
            identical = all(self.identical(w, raws) for w in tail)
            markers = sum(1 for w in after_window if is_marker(w))
            # The compactor's "after" figure leaves out the continue message it appends.
            newest = max(w.info.time.created for w in after_window if is_marker(w))
            extra = estimate_messages(
                [
                    w
                    for w in after_window
                    if w.info.id not in self.written
                    and w.info.time.created > newest
                    and isinstance(w.info, UserMessage)
                    and not is_marker(w)
                ]
            )
            if cycle == 0:
                result.cycle1_files = await self.modified_files(sid)
            for k in range(len(compactions)):
                cycle += 1
                last = k == len(compactions) - 1
                result.rows.append(
                    Row(
                        transcript=t.session,
                        cycle=cycle,
                        index=index,
                        before=before,
                        after=after if last else -1,
                        reported=reported[k] + extra if k < len(reported) else -1,
                        tail=len(tail),
                        old_pairs=max(0, markers - 1),
                        identical=identical,
                    )
                )
                print_row(result.rows[-1], self.window)
        result.final = estimate_messages(await self.context(session))
        result.final_files = await self.modified_files(sid)

    async def modified_files(self, sid: str) -> set[str]:
        """The modified files of the newest summary's artifact ledger."""
        texts = await self.store.summary_texts(sid, 1)
        return set(ledger.latest(texts).modified) if texts else set()

    def identical(self, m: WithParts, raws: dict[str, str]) -> bool:
        """The stored JSON of ``m`` and of each of its parts is exactly what was written."""
        if raws.get(m.info.id, "").encode() != self.written[m.info.id]:
            return False
        if [p.id for p in m.parts] != self.parts_of[m.info.id]:
            return False
        return all(raws.get(p.id, "").encode() == self.written[p.id] for p in m.parts)


HEADER = (
    f"{'transcript':<30} {'cycle':>5} {'msg':>5} {'before':>8} {'after':>8} {'after%':>7} "
    f"{'reported':>8} {'tail':>5} {'old pairs':>9}  tail identical"
)


def _identical(r: Row) -> str:
    if not r.identical:
        return "no"
    return "yes" if r.tail else "n/a (no tail kept)"


def print_row(r: Row, window: int) -> None:
    after = f"{r.after:,}" if r.after >= 0 else "-"
    share = f"{100 * r.after / window:.1f}%" if r.after >= 0 else "-"
    reported = f"{r.reported:,}" if r.reported >= 0 else "?"
    print(
        f"{r.transcript:<30} {r.cycle:>5} {r.index:>5} {r.before:>8,} {after:>8} {share:>7} "
        f"{reported:>8} {r.tail:>5} {r.old_pairs:>9}  {_identical(r)}",
        flush=True,
    )


async def replay(path: Path, args: argparse.Namespace) -> Result:
    t = load(path)
    result = Result(name=t.session, messages=len(t.messages))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-collapse-") as tmp:
        store = await Store.open(Path(tmp) / "bench.db", synchronous="OFF")
        cfg = build(
            [
                {
                    "compaction": {"method": "collapse", "prune": bool(args.prune)},
                    "models": {
                        f"replay/{t.model}": {"context": args.context, "output": args.output}
                    },
                }
            ]
        )
        host = Host()
        engine = Engine(store, host, lambda: cfg)
        try:
            await Replay(store, engine, host, t, args.context).run(result)
        finally:
            await engine.close()
            await store.close()
    result.seconds = time.perf_counter() - started
    return result


def summary_line(r: Result, window: int) -> str:
    n = len(r.rows)
    shares = [100 * x.after / window for x in r.rows if x.after >= 0]
    ident = all(x.identical for x in r.rows)
    grew = sum(1 for x in r.rows if x.after >= 0 and x.after >= x.before)
    off = sum(1 for x in r.rows if x.after >= 0 and x.reported >= 0 and x.after != x.reported)
    tails = [x.tail for x in r.rows]
    return (
        f"== {r.name}: {r.messages} messages, {n} collapse compactions"
        + (
            f", after {min(shares):.1f}-{max(shares):.1f}% of the window"
            f" (mean {sum(shares) / len(shares):.1f}%), tail {min(tails)}-{max(tails)} messages"
            if shares
            else ""
        )
        + f", peak {r.peak:,} / final {r.final:,} tokens, tails identical: "
        + ("yes" if ident else "NO")
        + f", did not shrink: {grew}, window != reported: {off}"
        + (
            f", cycle-1 modified files still in the rolling summary: "
            f"{len(r.cycle1_files & r.final_files)}/{len(r.cycle1_files)}"
            if n
            else ""
        )
        + f", errors: {len(r.errors)}, {r.seconds:.1f}s"
    )


def main() -> None:
    ap = replay_args(__doc__, 64_000, 8_000)
    ap.add_argument("--min-messages", type=int, default=100)
    ap.add_argument("--prune", action="store_true", help="also prune at turn ends")
    args = ap.parse_args()
    paths = sorted(args.transcripts.glob("*.jsonl"))
    if not paths:
        sys.exit(f"no transcripts in {args.transcripts}")
    chosen = []
    for p in paths:
        n = sum(1 for line in p.read_bytes().splitlines() if line.strip()) - 1
        if n > args.min_messages or p.stem in NAMED:
            chosen.append(p)
    order = {name: i for i, name in enumerate(NAMED)}
    chosen.sort(key=lambda p: (order.get(p.stem, len(NAMED)), p.stem))
    print(
        f"collapse bench: window {args.context:,} tokens (output {args.output:,}), "
        f"trigger 0.85 x usable, extractive writer, prune {'on' if args.prune else 'off'}"
    )
    print(HEADER)
    results = [asyncio.run(replay(p, args)) for p in chosen]
    print()
    for r in results:
        print(summary_line(r, args.context))
        for e in r.errors[:3]:
            print(f"   error: {e}")
    if not all(x.identical for r in results for x in r.rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
