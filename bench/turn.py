"""The cost of a turn against its physical floor: a recorded 100-turn OpenCode session replayed
into a real daemon over stdio, and the same work done the cheapest ways possible, in one run.

The session is ``bench/fixtures/turn_a100p.json``, recorded from OpenCode 1.1.53 (its JSON
storage after a scripted 100-turn run: every turn reads a ~60 K-character file, usage forced
over the limit at turn 50, so one automatic compaction; the model's window 200,000 tokens).
Long strings (the tool outputs) are stored as their lengths and regenerated here as
file-like lines of exactly that length, of random words as in the files the OpenCode peer's
driver makes (the history index's cost depends on the words: random ones cost it most,
about 2.4 ms of indexing per 60 K characters, where Python source takes about 0.65 ms).
``python bench/turn.py --record RUN`` makes such a fixture from another OpenCode run.

Per assistant step the client does what a frontend does (as the OpenCode side-by-side
driver): ``session/context`` (openai), ``message/update`` (no finish), each ``part/update``
(a tool part twice: running, then completed), ``message/update`` with finish and the tokens
OpenCode stored, ``session/idle``; a user message is ``message/update`` + ``part/update``. A
turn's time is the sum of its requests' latencies (write to reply read); compaction artifacts
are the daemon's own (extractive summarizer). Measured in the same run, alternating:

* daemon: ``python -m sidecar serve`` on a fresh SQLite file, with and without ``since`` on
  ``session/context`` (the incremental window), its history index brought up to date as soon
  as the writer is free (``history.indexDelayMs`` 0), so each turn pays for its own indexing;
* floor: the same turn's writes as plain SQLite WAL commits (one ``INSERT OR REPLACE`` and
  one commit per write, ``synchronous=NORMAL``, the same JSON texts) plus encoding every frame
  the daemon sent in that turn (``msgspec``), in this process;
* transport: the same request frames, sequentially, through ``bench/_replay_server.py``,
  which answers each with the bytes the daemon sent for it (notifications and reply).

Printed: turn p50/p95 of each; daemon ÷ floor and daemon ÷ (floor + transport) on the p50s
(targets <= 10 and <= 3); bytes to the client per turn with and without ``since``; the WAL's
largest size (sampled after every request) and the store's size at the end. The machine is
shared: compare ratios from one run, not absolute times across runs.

    python bench/turn.py [--fixture PATH] [--runs 3] [--turns N]
    python bench/turn.py --record RUN_DIR > bench/fixtures/turn_a100p.json
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import glob
import json
import os
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _util import median, pct  # noqa: E402

FIXTURE = HERE / "fixtures" / "turn_a100p.json"
LONG = 512  # strings longer than this are stored as their length
_encoder = msgspec.json.Encoder()
PROFILE = ""  # --profile: the daemon's cProfile output (the run without ``since``)


# -- the fixture -------------------------------------------------------------------------------


def _shrink(value: Any) -> Any:
    if isinstance(value, str) and len(value) > LONG:
        return {"$filler": len(value)}
    if isinstance(value, dict):
        return {k: _shrink(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shrink(v) for v in value]
    return value


def _filler(n: int, seed: int) -> str:
    rng = random.Random(seed)
    lines: list[str] = []
    size = 0
    i = 0
    while size < n:
        words = " ".join(
            "".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 18)))
            for _ in range(rng.randint(3, 6))
        )
        line = f"{i + 1:05d}| f{seed % 1000:03d} l{i:06d} {words}\n"
        lines.append(line)
        size += len(line)
        i += 1
    return "".join(lines)[:n]


def _grow(value: Any, seed: list[int]) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$filler"}:
            seed[0] += 1
            return _filler(value["$filler"], seed[0])
        return {k: _grow(v, seed) for k, v in value.items()}
    if isinstance(value, list):
        return [_grow(v, seed) for v in value]
    return value


def _kind(info: dict[str, Any], parts: list[dict[str, Any]]) -> str:
    if info["role"] == "user":
        if any(p["type"] == "compaction" for p in parts):
            return "marker"
        if parts and all(p["type"] == "text" and p.get("synthetic") for p in parts):
            return "continue"
        return "user"
    return "summary" if info.get("summary") is True else "step"


def record(run: Path) -> dict[str, Any]:
    """A fixture from an OpenCode 1.1.x run directory (drive.py's layout: JSON storage)."""
    st = run / "xdg" / "data" / "opencode" / "storage"
    sids = [Path(p).name for p in glob.glob(str(st / "message" / "ses_*"))]
    sid = max(sids, key=lambda s: len(os.listdir(st / "message" / s)))
    msgs = []
    for p in glob.glob(str(st / "message" / sid / "*.json")):
        info = json.loads(Path(p).read_text())
        parts = [
            json.loads(Path(q).read_text())
            for q in glob.glob(str(st / "part" / info["id"] / "*.json"))
        ]
        parts.sort(key=lambda x: x["id"])
        msgs.append({"info": info, "parts": parts})
    msgs.sort(key=lambda m: (m["info"]["time"]["created"], m["info"]["id"]))
    cfg = json.loads((run / "proj" / "opencode.json").read_text())
    provider_id, provider = next(iter(cfg["provider"].items()))
    model_id, model = next(iter(provider["models"].items()))
    turns: list[list[dict[str, Any]]] = []
    for m in msgs:
        kind = _kind(m["info"], m["parts"])
        if kind == "user" or not turns:
            turns.append([])
        turns[-1].append({"kind": kind, **_shrink(m)})
    storage = sum(f.stat().st_size for f in st.rglob("*") if f.is_file())
    # Where the run happened says nothing about the work: paths are kept relative to it.
    turns = json.loads(json.dumps(turns).replace(str(run.resolve()), "/run"))
    return {
        "source": "OpenCode 1.1.53 JSON storage, drive.py --turns 100 --force-overflow-at 50",
        "model": f"{provider_id}/{model_id}",
        "limit": {k: v for k, v in model["limit"].items() if k in ("context", "input", "output")},
        "session": sid,
        "opencode_storage_bytes": storage,
        "turns": turns,
    }


# -- the client --------------------------------------------------------------------------------


class Peer:
    """A stdio JSON-RPC peer: one request at a time, every byte it sends counted."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        assert proc.stdout is not None and proc.stdin is not None
        self._out = proc.stdout
        self._in = proc.stdin
        self._next = 0
        self.frames: list[bytes] = []  # everything received since the last ``take``

    @classmethod
    async def spawn(cls, *cmd: str, source: str | None = None) -> Peer:
        env = None
        if source:  # another checkout's daemon (``--compare``)
            env = {**os.environ, "PYTHONPATH": source}
        proc = await asyncio.create_subprocess_exec(
            *cmd,
            env=env,
            cwd=source,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            limit=1 << 26,
        )
        return cls(proc)

    def frame(self, method: str, params: Any) -> tuple[int, bytes]:
        self._next += 1
        body = _encoder.encode(
            {"jsonrpc": "2.0", "id": self._next, "method": method, "params": params}
        )
        return self._next, b"Content-Length: %d\r\n\r\n%b" % (len(body), body)

    async def exchange(self, rid: int, data: bytes) -> tuple[float, Any, list[bytes]]:
        """Send one request; (latency, its reply's result, every frame read until it)."""
        t0 = time.perf_counter()
        self._in.write(data)
        got: list[bytes] = []
        while True:
            head = await self._out.readuntil(b"\r\n\r\n")
            n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            body = await self._out.readexactly(n)
            got.append(head + body)
            if _reply_id(body) == rid:
                dt = time.perf_counter() - t0
                return dt, body, got

    async def request(self, method: str, params: Any) -> Any:
        rid, data = self.frame(method, params)
        _, body, _ = await self.exchange(rid, data)
        msg = json.loads(body)
        if "error" in msg:
            raise RuntimeError(f"{method}: {msg['error']}")
        return msg.get("result")

    async def close(self) -> None:
        try:
            await self.request("shutdown", None)
            self._in.write(b'Content-Length: 33\r\n\r\n{"jsonrpc":"2.0","method":"exit"}')
            await asyncio.wait_for(self.proc.wait(), 10)
        except Exception:
            self.proc.kill()
            await self.proc.wait()


class _Head(msgspec.Struct):
    id: int | None = None
    method: str | None = None


_head = msgspec.json.Decoder(_Head)


def _reply_id(body: bytes) -> int | None:
    """The id of a reply (None for a notification or a request), without building the rest."""
    head = _head.decode(body)
    return head.id if head.method is None else None


# -- the daemon run ----------------------------------------------------------------------------


class Turn(msgspec.Struct):
    latency: float = 0.0
    requests: list[bytes] = msgspec.field(default_factory=list)  # frames sent
    answers: list[bytes] = msgspec.field(default_factory=list)  # bytes received per request
    writes: list[tuple[str, str]] = msgspec.field(default_factory=list)  # (id, JSON) stored
    received: int = 0
    context: int = 0  # of ``received``: the session/context replies
    by_method: dict[str, float] = msgspec.field(default_factory=dict)


CPU: list[float] = []  # the last run_daemon's CPU seconds per turn (appended per run)


def _cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds (all threads), from /proc: steadier than wall
    time when neighbours load the machine."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def run_daemon(
    fx: dict[str, Any], turns: list[Any], since: bool, tmp: Path, source: str | None = None
) -> tuple[list[Turn], int, int]:
    """Replay into a fresh daemon; (per turn, largest WAL seen, store size at the end)."""
    db = tmp / f"turn-{since}-{time.monotonic_ns()}.db"
    cfg = tmp / "sidecar.json"
    # The history index's batches run as soon as the writer is free, not after half a second
    # of quiet: their CPU and time fall in the turn whose writes they index.
    cfg.write_text(
        json.dumps({"summarizer": {"provider": "extractive"}, "history": {"indexDelayMs": 0}})
    )
    profile = ["-m", "cProfile", "-o", PROFILE] if PROFILE and not since else []
    peer = await Peer.spawn(
        sys.executable,
        *profile,
        "-m",
        "sidecar",
        "serve",
        "--db",
        str(db),
        "--config",
        str(cfg),
        source=source,
    )
    await peer.request(
        "initialize",
        {
            "processId": os.getpid(),
            "capabilities": {},
            "initializationOptions": {"models": {fx["model"]: fx["limit"]}},
        },
    )
    peer._in.write(
        b'Content-Length: 52\r\n\r\n{"jsonrpc":"2.0","method":"initialized","params":{}}'
    )
    sid = fx["session"]
    await peer.request("session/create", {"id": sid, "title": "replay"})
    clock = [0]
    wal = Path(str(db) + "-wal")
    wal_max = 0
    revision: str | None = None
    users: set[str] = set()

    def tick() -> int:
        clock[0] = max(clock[0] + 1, now_ms())
        return clock[0]

    out: list[Turn] = []
    cpu0 = _cpu_s(peer.proc.pid)
    for turn in turns:
        t = Turn()

        async def call(method: str, params: dict[str, Any], t: Turn = t) -> Any:
            nonlocal wal_max
            rid, data = peer.frame(method, params)
            dt, body, got = await peer.exchange(rid, data)
            t.latency += dt
            t.by_method[method] = t.by_method.get(method, 0.0) + dt
            t.requests.append(data)
            t.answers.append(b"".join(got))
            t.received += sum(len(g) for g in got)
            if method == "session/context":
                t.context += len(got[-1])
            if method in ("message/update", "part/update"):
                row = params.get("message") or params.get("part")
                t.writes.append((row["id"], _encoder.encode(row).decode()))
            for g in got:  # the daemon's clock after a compaction (outside the timing)
                if b'"message/updated"' in g:
                    note = json.loads(g.split(b"\r\n\r\n", 1)[1])
                    created = note["params"]["message"].get("time", {}).get("created") or 0
                    clock[0] = max(clock[0], created)
            if wal.exists():
                wal_max = max(wal_max, wal.stat().st_size)
            msg = json.loads(body)
            if "error" in msg:
                raise RuntimeError(f"{method}: {msg['error']}")
            return msg.get("result")

        last_user = None
        for m in turn:
            info = copy.deepcopy(m["info"])
            if m["kind"] == "user":
                info.pop("summary", None)
                info["time"] = {"created": tick()}
                users.add(info["id"])
                await call("message/update", {"message": info})
                for p in m["parts"]:
                    await call("part/update", {"part": p})
                last_user = info["id"]
            elif m["kind"] != "step":
                continue  # markers, summaries, continues: the daemon makes its own
            else:
                params: dict[str, Any] = {"sessionID": sid, "format": "openai"}
                if since and revision:
                    params["since"] = revision
                ctx = await call("session/context", params)
                revision = ctx.get("revision")
                if info.get("parentID") not in users:
                    info["parentID"] = last_user or info.get("parentID")
                created = tick()
                first = {k: v for k, v in info.items() if k not in ("finish", "error")}
                first["time"] = {"created": created}
                first["tokens"] = {
                    "input": 0,
                    "output": 0,
                    "reasoning": 0,
                    "cache": {"read": 0, "write": 0},
                }
                await call("message/update", {"message": first})
                for p in m["parts"]:
                    p = copy.deepcopy(p)
                    if p["type"] == "tool" and p["state"].get("status") == "completed":
                        state = p["state"]
                        start = tick()
                        running = copy.deepcopy(p)
                        running["state"] = {
                            "status": "running",
                            "input": state.get("input") or {},
                            "title": state.get("title"),
                            "time": {"start": start},
                        }
                        await call("part/update", {"part": running})
                        state["time"] = {"start": start, "end": tick()}
                    await call("part/update", {"part": p})
                final = copy.deepcopy(info)
                final["time"] = {"created": created, "completed": tick()}
                await call("message/update", {"message": final})
                await call("session/idle", {"sessionID": sid})
        out.append(t)
    CPU.append((_cpu_s(peer.proc.pid) - cpu0) / max(1, len(turns)))
    await peer.close()
    size = sum(Path(str(db) + s).stat().st_size for s in ("", "-wal") if Path(str(db) + s).exists())
    return out, wal_max, size


# -- the floors --------------------------------------------------------------------------------


def run_floor(turns: list[Turn], tmp: Path) -> list[float]:
    """Each turn's writes as plain WAL commits, plus encoding what the daemon sent."""
    db = sqlite3.connect(tmp / f"floor-{time.monotonic_ns()}.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE rows (id TEXT PRIMARY KEY, data TEXT NOT NULL)")
    out = []
    for t in turns:
        replies = [
            [msgspec.json.decode(f.split(b"\r\n\r\n", 1)[1]) for f in _frames(a)] for a in t.answers
        ]
        t0 = time.perf_counter()
        for rid, data in t.writes:
            db.execute("BEGIN")
            db.execute("INSERT OR REPLACE INTO rows (id, data) VALUES (?, ?)", (rid, data))
            db.execute("COMMIT")
        for group in replies:
            for obj in group:
                body = _encoder.encode(obj)
                b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
        out.append(time.perf_counter() - t0)
    db.close()
    return out


def _frames(data: bytes) -> list[bytes]:
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        n = int(head.lower().split(b"content-length:")[1])
        out.append(head + b"\r\n\r\n" + rest[:n])
        data = rest[n:]
    return out


async def run_transport(turns: list[Turn], tmp: Path) -> list[float]:
    recorded = tmp / f"answers-{time.monotonic_ns()}.json"
    recorded.write_bytes(msgspec.json.encode([a for t in turns for a in t.answers]))
    peer = await Peer.spawn(sys.executable, str(HERE / "_replay_server.py"), str(recorded))
    out = []
    for t in turns:
        total = 0.0
        for data, answer in zip(t.requests, t.answers, strict=True):
            rid = json.loads(data.split(b"\r\n\r\n", 1)[1])["id"]
            t0 = time.perf_counter()
            peer._in.write(data)
            got = 0
            while got < len(answer):
                head = await peer._out.readuntil(b"\r\n\r\n")
                n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                body = await peer._out.readexactly(n)
                got += len(head) + n
                if _reply_id(body) == rid:
                    break
            total += time.perf_counter() - t0
        out.append(total)
    peer._in.write(b'Content-Length: 33\r\n\r\n{"jsonrpc":"2.0","method":"exit"}')
    try:
        await asyncio.wait_for(peer.proc.wait(), 10)
    except TimeoutError:
        peer.proc.kill()
    return out


# -- main --------------------------------------------------------------------------------------


def fmt_ms(s: float) -> str:
    return f"{s * 1000:.2f} ms"


async def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--fixture", type=Path, default=FIXTURE)
    ap.add_argument(
        "--runs", type=int, default=3, help="rounds (each: daemon, since, floor, transport)"
    )
    ap.add_argument("--turns", type=int, default=0, help="replay only the first N turns")
    ap.add_argument(
        "--record", type=Path, help="print a fixture made from this OpenCode run directory"
    )
    ap.add_argument("--profile", default="", help="write the daemon's cProfile stats here")
    ap.add_argument(
        "--compare",
        default="",
        help="also run the daemon of this checkout (before/after, same run)",
    )
    args = ap.parse_args()
    global PROFILE
    PROFILE = args.profile
    if args.record:
        print(json.dumps(record(args.record), separators=(",", ":")))
        return
    fx = json.loads(args.fixture.read_text())
    turns = _grow(fx["turns"], [0])
    if args.turns:
        turns = turns[: args.turns]
    rows: dict[str, list[float]] = {"daemon": [], "since": [], "floor": [], "transport": []}
    if args.compare:
        rows["compare"] = []
    p95: dict[str, list[float]] = {k: [] for k in rows}
    sent_full: list[float] = []
    sent_since: list[float] = []
    ctx_full: list[float] = []
    ctx_since: list[float] = []
    wal_max = store = 0
    methods: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {"daemon": [], "since": [], "compare": []}
    with tempfile.TemporaryDirectory(prefix="bench-turn-") as d:
        tmp = Path(d)
        for _ in range(args.runs):
            plain, wal1, store = await run_daemon(fx, turns, False, tmp)
            cpu["daemon"].append(CPU[-1])
            incr, wal2, _ = await run_daemon(fx, turns, True, tmp)
            cpu["since"].append(CPU[-1])
            wal_max = max(wal_max, wal1, wal2)
            for m in {k for t in plain for k in t.by_method}:
                methods.setdefault(m, []).append(median([t.by_method.get(m, 0.0) for t in plain]))
            floor = run_floor(plain, tmp)
            transport = await run_transport(plain, tmp)
            other: list[tuple[str, list[float]]] = []
            if args.compare:
                base, _, _ = await run_daemon(fx, turns, False, tmp, args.compare)
                cpu["compare"].append(CPU[-1])
                other.append(("compare", [t.latency for t in base]))
            for name, samples in (
                *other,
                ("daemon", [t.latency for t in plain]),
                ("since", [t.latency for t in incr]),
                ("floor", floor),
                ("transport", transport),
            ):
                rows[name].append(pct(samples, 50))
                p95[name].append(pct(samples, 95))
            sent_full.append(median([float(t.received) for t in plain]))
            sent_since.append(median([float(t.received) for t in incr]))
            ctx_full.append(median([float(t.context) for t in plain]))
            ctx_since.append(median([float(t.context) for t in incr]))
    n = len(turns)
    print(
        f"turn.py: {n} turns of {args.fixture.name} ({fx['source']}), "
        f"{args.runs} rounds, medians of rounds; the daemon's index batches counted in the "
        "turn that caused them (history.indexDelayMs 0)"
    )
    for name in rows:
        print(f"  {name:9s} turn p50 {fmt_ms(median(rows[name]))}  p95 {fmt_ms(median(p95[name]))}")
    print(
        "  daemon CPU per turn (all threads, /proc): "
        + ", ".join(f"{k} {fmt_ms(median(v))}" for k, v in cpu.items() if v)
    )
    split = ", ".join(f"{m} {fmt_ms(median(v))}" for m, v in sorted(methods.items()))
    print(f"  daemon per turn by method (p50): {split}")
    d50, f50, t50 = median(rows["daemon"]), median(rows["floor"]), median(rows["transport"])
    s50 = median(rows["since"])
    print(
        f"  daemon ÷ floor               {d50 / f50:6.1f}   (target <= 10)   "
        f"with since {s50 / f50:6.1f}"
    )
    print(
        f"  daemon ÷ (floor + transport) {d50 / (f50 + t50):6.1f}   (target <= 3)    "
        f"with since {s50 / (f50 + t50):6.1f}"
    )
    if args.compare:
        c50 = median(rows["compare"])
        print(
            f"  compare ({args.compare}) ÷ floor {c50 / f50:6.1f}, ÷ (floor + transport) "
            f"{c50 / (f50 + t50):6.1f}; daemon ÷ compare {d50 / c50:.2f}"
        )
    print(
        f"  bytes to the client per turn (median): {median(sent_full):,.0f} without since, "
        f"{median(sent_since):,.0f} with since ({median(sent_since) / median(sent_full):.1%}); "
        f"of which session/context {median(ctx_full):,.0f} and {median(ctx_since):,.0f} "
        f"({median(ctx_since) / median(ctx_full):.1%})"
    )
    oc = fx.get("opencode_storage_bytes")
    print(
        f"  WAL largest while running {wal_max / 1e6:.2f} MB; store at the end {store / 1e6:.2f} MB"
        + (f"; OpenCode 1.1.53's storage for the session {oc / 1e6:.2f} MB" if oc else "")
    )


if __name__ == "__main__":
    asyncio.run(main())
