"""Ingest throughput of the daemon (``part/update``) against a raw asyncio + msgspec echo server.

Both servers are separate processes on stdio with the same Content-Length framing and are
driven by the same client (an ``asyncio.SubprocessProtocol`` that parses frames in
``pipe_data_received`` and writes everything a read produced in one ``write``):

* the daemon: ``python -m sidecar serve --db <tmp>/bench-*.db`` (durable: it answers after the
  SQLite commit), after ``initialize``/``initialized``, one ``session/create`` and one
  ``message/update``; the workload is ``part/update`` of a ~200-byte text part with a fresh
  ascending part id each time. Its ``part/updated`` notifications (the writer is subscribed to
  the session) are read and discarded;
* ``quiet``: the same daemon, its client declaring ``capabilities.echo`` false in
  ``initialize`` (as the OpenCode plugin and the pi extension do), so its writes are answered
  and not echoed back (no target: the verdicts are the default client's);
* ``bench/_echo_server.py``: inline handler, ``result`` = ``params.part``;
* ``bench/_durable_server.py``, the durable floor (no target; for comparison): the echo plus
  what makes an answer mean "stored": the part validated into a Struct, upserted into SQLite
  (WAL, ``synchronous=NORMAL``, no triggers) with one commit per read, and answered with the
  reply and one ``part/updated``, as the daemon answers. What the daemon costs above it is its
  own work (ordering, the write door, the cache, the index notes, events, bounds, errors).

Figures: pipelined (N requests, ``--inflight`` in flight, a new one sent per reply), sequential
round trips (send, await reply, repeat), and spawn-to-``initialize`` of the daemon vs. the bare
``python -c "import pygls.server"``. Every measurement uses a fresh process (and a fresh database
for the daemon); targets alternate daemon, durable, echo, daemon, ... and figures are medians over
``--runs``; the target verdicts use the ratio of those medians, and each adjacent daemon/echo
pair's own ratio is printed beside it (a pair shares the neighbours' load). Latency = client
write -> client read of the reply. "server CPU" is the server process's utime+stime (all
threads, from /proc, 10 ms ticks) over the measured load divided by its requests: steadier
than req/s when neighbours load the 2 shared cores.

The client is this file's own: the project's ``sidecar_client`` measured ~36 k req/s with 64
tasks in flight and ~110 µs sequential p50 against the echo server, against ~70-120 k req/s
and ~60 µs for this one, so it would cap the baseline rather than measure it.

For the throughput runs the daemon is started as ``python -c <wrapper> serve --db ...``: the
wrapper calls the same ``sidecar.cli.main`` as ``python -m sidecar`` and only records the
store writer's commit count, printed to stderr at exit (``--plain-daemon`` skips it).
Spawn-to-initialize always uses the literal ``python -m sidecar serve``.

With ``--db postgresql://...`` (a server, see ``bench/_pg.py``) every run also measures the
daemon on PostgreSQL (``daemon-pg``, a fresh database each time) beside SQLite and the echo
server, interleaved the same way.

    python bench/ingest.py [--n 20000] [--inflight 64] [--seq 3000] [--runs 3] [--spawns 7]
                           [--db postgresql://user@/postgres?host=/run/postgresql]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _pg import COMMIT_WRAPPER, Databases  # noqa: E402
from _util import median, pct  # noqa: E402

PY = sys.executable
ECHO_CMD = [PY, str(HERE / "_echo_server.py")]
DURABLE = str(HERE / "_durable_server.py")
# ~200 bytes of text, JSON-safe and free of '%' (it goes into a bytes %-template).
TEXT = (
    b"The quick brown fox jumps over the lazy dog while the compaction sidecar stores "
    b"every streamed part durably; this sentence pads the text part to about two hundred "
    b"bytes of payload."
)[:200].ljust(200, b".")
WARMUP_PIPELINED = 1000
WARMUP_SEQ = 200


# -- client ------------------------------------------------------------------------------------


class _Incoming(msgspec.Struct):
    id: int | str | None = None
    method: str = ""
    result: msgspec.Raw = msgspec.Raw(b"null")
    error: msgspec.Raw = msgspec.Raw(b"")


_incoming = msgspec.json.Decoder(_Incoming)
_CONTENT_LENGTH = re.compile(rb"(?i)content-length:\s*(\d+)")
_any = msgspec.json.Decoder()
_encode = msgspec.json.encode


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n%b" % (len(body), body)


class RpcError(Exception):
    pass


class Load:
    """N requests with ``inflight`` outstanding; request ids are the ints 0..N-1."""

    def __init__(self, peer: Peer, n: int, inflight: int, make: Callable[[int], bytes]) -> None:
        self.peer = peer
        self.n = n
        self.inflight = inflight
        self.make = make
        self.sent = 0
        self.done = 0
        self.errors: list[bytes] = []
        self.t_sent = [0.0] * n
        self.lat = [0.0] * n
        self.outbox: list[bytes] = []
        self.t0 = self.t_end = 0.0
        self.cpu = float("nan")  # server process CPU seconds (all threads) during the load
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def start(self) -> None:
        for _ in range(min(self.inflight, self.n)):
            self.outbox.append(self.make(self.sent))
            self.sent += 1
        self.t0 = time.perf_counter()
        self.flush()

    def flush(self) -> None:
        now = time.perf_counter()
        t_sent = self.t_sent
        for i in range(self.sent - len(self.outbox), self.sent):
            t_sent[i] = now
        self.peer.write(b"".join(self.outbox))
        self.outbox.clear()

    def reply(self, i: int, now: float, error: msgspec.Raw) -> None:
        self.lat[i] = now - self.t_sent[i]
        self.done += 1
        if len(error):
            self.errors.append(bytes(error))
        if self.sent < self.n:
            self.outbox.append(self.make(self.sent))
            self.sent += 1
        elif self.done == self.n:
            self.t_end = now
            if not self.finished.done():
                self.finished.set_result(None)

    def fail(self, exc: BaseException) -> None:
        if not self.finished.done():
            self.finished.set_exception(exc)


class Peer(asyncio.SubprocessProtocol):
    """One server process on pipes: frames parsed in ``pipe_data_received``."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.exited: asyncio.Future[None] = loop.create_future()
        self.transport: asyncio.SubprocessTransport | None = None
        self._stdin: Any = None
        self._buf = bytearray()
        self._need = -1
        self._calls: dict[str, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)
        self.notifications = 0
        self.load: Load | None = None

    # -- asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._stdin = self.transport.get_pipe_transport(0)  # type: ignore[union-attr]

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd != 1:
            return
        now = time.perf_counter()
        buf = self._buf
        buf += data
        while True:
            if self._need < 0:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    break
                m = _CONTENT_LENGTH.search(bytes(buf[:end]))
                del buf[: end + 4]
                if m is None:
                    raise RuntimeError("frame without Content-Length from the server")
                self._need = int(m.group(1))
            if len(buf) < self._need:
                break
            body = bytes(buf[: self._need])
            del buf[: self._need]
            self._need = -1
            self._on_frame(body, now)
        load = self.load
        if load is not None and load.outbox:
            load.flush()

    def _on_frame(self, body: bytes, now: float) -> None:
        msg = _incoming.decode(body)
        if msg.method:
            self.notifications += 1  # part/updated etc.: read and discarded
            return
        rid = msg.id
        if type(rid) is int:
            assert self.load is not None, "reply to a load request without a load"
            self.load.reply(rid, now, msg.error)
            return
        if rid is None:  # an error the server could not attribute to a request
            exc = RpcError(f"error reply with id null: {bytes(msg.error)[:300]!r}")
            if self.load is not None:
                self.load.fail(exc)
            for fut in self._calls.values():
                if not fut.done():
                    fut.set_exception(exc)
            return
        fut = self._calls.pop(str(rid), None)
        if fut is None or fut.done():
            return
        if len(msg.error):
            fut.set_exception(RpcError(bytes(msg.error).decode()))
        else:
            fut.set_result(_any.decode(msg.result))

    def process_exited(self) -> None:
        exc = ConnectionError("server process exited")
        for fut in self._calls.values():
            if not fut.done():
                fut.set_exception(exc)
        if self.load is not None:
            self.load.fail(exc)
        if not self.exited.done():
            self.exited.set_result(None)

    # -- API

    def write(self, data: bytes) -> None:
        self._stdin.write(data)

    def send(self, method: str, params: Any) -> asyncio.Future[Any]:
        rid = f"c{next(self._ids)}"
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._calls[rid] = fut
        body = _encode({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        self.write(frame(body))
        return fut

    async def call(self, method: str, params: Any, timeout: float = 60.0) -> Any:
        return await asyncio.wait_for(self.send(method, params), timeout)

    def notify(self, method: str, params: Any) -> None:
        self.write(frame(_encode({"jsonrpc": "2.0", "method": method, "params": params})))

    async def run_load(self, n: int, inflight: int, make: Callable[[int], bytes]) -> Load:
        load = self.load = Load(self, n, inflight, make)
        load.start()
        try:
            await asyncio.wait_for(load.finished, timeout=300)
        finally:
            self.load = None
        if load.errors:
            raise RpcError(f"{len(load.errors)} error replies, first: {load.errors[0][:300]!r}")
        return load


def process_cpu(pid: int) -> float:
    """utime + stime of a process (all threads) in seconds; NaN where /proc is missing."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def spawn(cmd: list[str], stderr: Any) -> tuple[asyncio.SubprocessTransport, Peer]:
    loop = asyncio.get_running_loop()
    transport, peer = await loop.subprocess_exec(
        Peer, *cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=stderr
    )
    return transport, peer


async def stop(transport: asyncio.SubprocessTransport, peer: Peer, daemon: bool) -> None:
    try:
        if daemon:
            await peer.call("shutdown", {}, timeout=30)
        peer.notify("exit", None)
        await asyncio.wait_for(asyncio.shield(peer.exited), 30)
    except (TimeoutError, ConnectionError, RpcError):
        transport.kill()
        await peer.exited
    finally:
        transport.close()


# -- one measured target -----------------------------------------------------------------------


class Target:
    def __init__(
        self,
        name: str,
        cmd: Callable[[str], list[str]],
        daemon: bool,
        databases: Databases | None = None,
        capabilities: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.cmd = cmd
        self.daemon = daemon
        self.capabilities = capabilities or {}
        self.databases = databases  # PostgreSQL: a fresh database per measurement
        self.spawns = 0

    async def measure(
        self, tmp: Path, n: int, inflight: int, warmup: int, mixed: bool = False
    ) -> tuple[Load, int, int | None]:
        """Spawn, set up, warm up, measure; returns (load, notifications, commits).

        ``mixed``: every other request is a ``message/update`` of a new message, and the
        ``part/update`` pipelined right behind it is that message's text (the frontend's
        pattern: it must never overtake its message).
        """
        self.spawns += 1
        db = str(tmp / f"bench-{self.name}-{self.spawns}.db")
        if self.databases is not None:
            db = await self.databases.fresh(f"ingest{self.spawns}")
        errfile = tmp / f"{self.name}-{self.spawns}.stderr"
        with errfile.open("wb") as err:
            transport, peer = await spawn(self.cmd(db), err)
        try:
            sid, mid = b"ses_bench_%04d" % self.spawns, b"msg_bench_%04d" % self.spawns
            hello = {"processId": os.getpid(), "capabilities": self.capabilities}
            await peer.call("initialize", hello)
            peer.notify("initialized", {})
            await peer.call("session/create", {"id": sid.decode(), "title": "ingest bench"})
            message = {
                "id": mid.decode(),
                "sessionID": sid.decode(),
                "role": "user",
                "time": {"created": time.time_ns() // 1_000_000},
            }
            await peer.call("message/update", {"message": message})
            template = (
                b'{"jsonrpc":"2.0","id":%d,"method":"part/update","params":{"part":'
                b'{"id":"prt_bench_%06d","sessionID":"'
                + sid
                + b'","messageID":"'
                + mid
                + b'","type":"text","text":"'
                + TEXT
                + b'"}}}'
            )
            seq = itertools.count(1)
            message_template = (
                b'{"jsonrpc":"2.0","id":%d,"method":"message/update","params":{"message":'
                b'{"id":"msg_mixed_%06d","sessionID":"'
                + sid
                + b'","role":"user","time":{"created":%d}}}}'
            )
            part_template = (
                b'{"jsonrpc":"2.0","id":%d,"method":"part/update","params":{"part":'
                b'{"id":"prt_mixed_%06d","sessionID":"'
                + sid
                + b'","messageID":"msg_mixed_%06d","type":"text","text":"'
                + TEXT
                + b'"}}}'
            )
            t0 = time.time_ns() // 1_000_000

            def make(i: int) -> bytes:
                k = next(seq)
                if not mixed:
                    body = template % (i, k)
                elif k % 2:
                    body = message_template % (i, k, t0 + k)
                else:
                    body = part_template % (i, k, k - 1)
                return b"Content-Length: %d\r\n\r\n%b" % (len(body), body)

            await peer.run_load(warmup, inflight, make)
            cpu0 = process_cpu(transport.get_pid())
            load = await peer.run_load(n, inflight, make)
            load.cpu = process_cpu(transport.get_pid()) - cpu0
            notes = peer.notifications
        except BaseException:
            transport.kill()
            print(f"{self.name} failed; stderr:\n{errfile.read_text()[-3000:]}", file=sys.stderr)
            raise
        await stop(transport, peer, self.daemon)
        m = re.search(r"BENCH_COMMITS (\d+)", errfile.read_text())
        return load, notes, int(m.group(1)) if m else None


# -- spawn-to-initialize -----------------------------------------------------------------------


async def spawn_to_initialize(db: Path, errfile: Path, env: dict[str, str] | None) -> float:
    loop = asyncio.get_running_loop()
    with errfile.open("ab") as err:
        t0 = time.perf_counter()
        transport, peer = await loop.subprocess_exec(
            Peer,
            PY,
            "-m",
            "sidecar",
            "serve",
            "--db",
            str(db),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
            env=env,
        )
        await peer.call("initialize", {"processId": os.getpid(), "capabilities": {}})
        elapsed = time.perf_counter() - t0
    await stop(transport, peer, daemon=True)
    return elapsed


async def run_to_exit(args: list[str], env: dict[str, str] | None) -> float:
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(*args, env=env)
    rc = await proc.wait()
    elapsed = time.perf_counter() - t0
    if rc != 0:
        raise RuntimeError(f"{args} exited with {rc}")
    return elapsed


async def startup(tmp: Path, spawns: int, env: dict[str, str] | None) -> dict[str, list[float]]:
    db = tmp / "startup.db"
    err = tmp / "startup.stderr"
    imp = [PY, "-c", "import pygls.server"]
    res: dict[str, list[float]] = {"init": [], "import": [], "pass": []}
    await spawn_to_initialize(db, err, env)  # warm-up: creates the database, fills caches
    await run_to_exit(imp, env)
    for _ in range(spawns):
        res["init"].append(await spawn_to_initialize(db, err, env))
        res["import"].append(await run_to_exit(imp, env))
        res["pass"].append(await run_to_exit([PY, "-c", "pass"], env))
    return res


# -- report ------------------------------------------------------------------------------------


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs" if seconds < 0.01 else f"{seconds * 1e3:,.1f} ms"


def verdict(ok: bool) -> str:
    return "OK" if ok else "MISSED"


def summarize(loads: list[Load]) -> tuple[float, float, float, list[float]]:
    rates = [ld.n / (ld.t_end - ld.t0) for ld in loads]
    p50 = median([pct(ld.lat, 50) for ld in loads])
    p99 = median([pct(ld.lat, 99) for ld in loads])
    return median(rates), p50, p99, rates


def pair_ratios(daemon: list[Load], echo: list[Load], figure: int) -> list[float]:
    """Each adjacent daemon/echo run's ratio of one ``summarize`` figure (0 rate, 1 p50)."""
    return [
        summarize([d])[figure] / summarize([e])[figure] for d, e in zip(daemon, echo, strict=True)
    ]


def per_pair(
    loads: dict[str, list[Load]], figure: int, spec: str, with_pg: bool, unit: str = ""
) -> None:
    """Each adjacent daemon/echo run's ratio (``spec`` formats it), then PostgreSQL's lines."""
    paired = pair_ratios(loads["daemon"], loads["echo"], figure)
    print(
        f"    [per adjacent daemon/echo pair: {', '.join(format(r, spec) + unit for r in paired)}]"
    )
    if with_pg:
        compare_pg(loads, figure)


def compare_pg(loads: dict[str, list[Load]], figure: int) -> None:
    """The PostgreSQL daemon's line, and its figure beside SQLite's and the echo's."""
    rate, p50 = line("daemon-pg", loads["daemon-pg"])
    sq_rate, sq_p50 = summarize(loads["daemon"])[:2]
    e_rate, e_p50 = summarize(loads["echo"])[:2]
    if figure == 0:
        print(
            f"  ratio daemon-pg/echo rate: {rate / e_rate:.1%}; daemon-pg/daemon (SQLite) rate: "
            f"{rate / sq_rate:.1%}"
        )
    else:
        print(
            f"  ratio daemon-pg/echo p50: {p50 / e_p50:.2f}x; daemon-pg/daemon (SQLite) p50: "
            f"{p50 / sq_p50:.2f}x"
        )


def durable_ratios(
    daemon: float, durable: float, echo: float, figure: str, spec: str, unit: str = ""
) -> None:
    """The durable floor's ``figure`` against the echo's, and the daemon's against it."""
    print(
        f"  ratio durable/echo {figure}: {format(durable / echo, spec)}{unit}; "
        f"daemon/durable: {format(daemon / durable, spec)}{unit}"
    )


def quiet_ratio(ratio: float, spec: str, to_daemon: float, unit: str = "") -> None:
    """The quiet client's figure against the echo's (no target: the targets are the
    default client's), and against the default client's."""
    print(
        f"  ratio quiet/echo: {format(ratio, spec)}{unit} (no target; the client declared "
        f"capabilities.echo false); quiet/daemon: {to_daemon:.2f}x"
    )


def line(label: str, loads: list[Load]) -> tuple[float, float]:
    rate, p50, p99, rates = summarize(loads)
    runs = ", ".join(f"{r:,.0f}" for r in rates)
    cpu = median([ld.cpu / ld.n for ld in loads])
    print(
        f"  {label:<9} {rate:>9,.0f} req/s  p50 {us(p50):>9}  p99 {us(p99):>9}  "
        f"server CPU {cpu * 1e6:>4.0f} µs/req   [req/s per run: {runs}]"
    )
    return rate, p50


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20_000, help="pipelined requests per run")
    ap.add_argument("--inflight", type=int, default=64)
    ap.add_argument("--seq", type=int, default=3_000, help="sequential round trips per run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--spawns", type=int, default=7, help="spawn-to-initialize samples")
    ap.add_argument(
        "--plain-daemon",
        action="store_true",
        help="run `python -m sidecar serve` literally (no commit count)",
    )
    ap.add_argument(
        "--pycache-prefix",
        action="store_true",
        help="also time startup with bytecode caching into a temporary "
        "PYTHONPYCACHEPREFIX (this environment sets PYTHONDONTWRITEBYTECODE)",
    )
    ap.add_argument(
        "--db",
        metavar="POSTGRESQL_URL",
        help="also measure the daemon on PostgreSQL: a server where databases may be created",
    )
    args = ap.parse_args()

    def daemon_cmd(db: str) -> list[str]:
        if args.plain_daemon:
            return [PY, "-m", "sidecar", "serve", "--db", db]
        return [PY, "-c", COMMIT_WRAPPER, "serve", "--db", db]

    daemon = Target("daemon", daemon_cmd, daemon=True)
    # The same daemon, its client declaring ``capabilities.echo`` false (as the agent plugins
    # do): its writes are answered only, never echoed back as ``part/updated``.
    quiet = Target("quiet", daemon_cmd, daemon=True, capabilities={"echo": False})
    echo = Target("echo", lambda db: ECHO_CMD, daemon=False)
    durable = Target("durable", lambda db: [PY, DURABLE, db], daemon=False)
    pg_dbs = Databases(args.db) if args.db else None
    pg = Target("daemon-pg", daemon_cmd, daemon=True, databases=pg_dbs) if pg_dbs else None
    targets = (
        (daemon, quiet, pg, durable, echo) if pg is not None else (daemon, quiet, durable, echo)
    )
    t_start = time.perf_counter()
    names = [t.name for t in targets]
    pipe: dict[str, list[Load]] = {n: [] for n in names}
    seqs: dict[str, list[Load]] = {n: [] for n in names}
    mixed: dict[str, list[Load]] = {n: [] for n in names}
    commits: dict[str, list[tuple[int, int]]] = {"pipe": [], "seq": []}
    pg_commits: dict[str, list[tuple[int, int]]] = {"pipe": [], "seq": []}
    notes = 0

    async def sweep(
        loads: dict[str, list[Load]],
        kind: str | None,
        n: int,
        inflight: int,
        warmup: int,
        mixed: bool = False,
    ) -> None:
        """One run of every target; a daemon's commit count is kept under ``kind``."""
        nonlocal notes
        for target in targets:
            load, nn, c = await target.measure(tmp, n, inflight, warmup, mixed=mixed)
            loads[target.name].append(load)
            if target.daemon:
                notes += nn
                if c is not None and kind is not None and target is not quiet:
                    into = commits if target is daemon else pg_commits
                    into[kind].append((n + warmup + 2, c))

    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmpdir:
        tmp = Path(tmpdir)
        for _ in range(args.runs):
            await sweep(pipe, "pipe", args.n, args.inflight, WARMUP_PIPELINED)
            await sweep(mixed, None, args.n, args.inflight, WARMUP_PIPELINED, mixed=True)
            await sweep(seqs, "seq", args.seq, 1, WARMUP_SEQ)
        st = await startup(tmp, args.spawns, None)
        st_cached = None
        if args.pycache_prefix:
            env = dict(os.environ)
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
            st_cached = await startup(tmp, args.spawns, env)
        if pg_dbs is not None:
            await pg_dbs.drop_all()

    print(
        f"ingest bench: part/update, {len(TEXT)}-byte text parts; medians of {args.runs} "
        f"interleaved runs (daemon, durable, echo, ...); {os.cpu_count()} CPUs; Python "
        f"{sys.version.split()[0]}"
    )
    print(f"pipelined: N={args.n:,}, {args.inflight} in flight (+{WARMUP_PIPELINED} warm-up)")
    d_rate, _ = line("daemon", pipe["daemon"])
    q_rate, _ = line("quiet", pipe["quiet"])
    f_rate, _ = line("durable", pipe["durable"])
    e_rate, _ = line("raw echo", pipe["echo"])
    ratio = d_rate / e_rate
    print(f"  ratio daemon/echo rate: {ratio:.1%} (target >= 25%)  {verdict(ratio >= 0.25)}")
    quiet_ratio(q_rate / e_rate, ".1%", q_rate / d_rate)
    durable_ratios(d_rate, f_rate, e_rate, "rate", ".1%")
    per_pair(pipe, 0, ".1%", pg is not None)
    print(
        f"pipelined message+part: N={args.n:,} alternating message/update and the part/update "
        f"of that message right behind it, {args.inflight} in flight"
    )
    d_rate, _ = line("daemon", mixed["daemon"])
    q_rate, _ = line("quiet", mixed["quiet"])
    f_rate, _ = line("durable", mixed["durable"])
    e_rate, _ = line("raw echo", mixed["echo"])
    print(f"  ratio daemon/echo rate: {d_rate / e_rate:.1%} (no target; for comparison)")
    quiet_ratio(q_rate / e_rate, ".1%", q_rate / d_rate)
    durable_ratios(d_rate, f_rate, e_rate, "rate", ".1%")
    per_pair(mixed, 0, ".1%", pg is not None)
    print(f"sequential: {args.seq:,} round trips (+{WARMUP_SEQ} warm-up)")
    _, d_p50 = line("daemon", seqs["daemon"])
    _, q_p50 = line("quiet", seqs["quiet"])
    _, f_p50 = line("durable", seqs["durable"])
    _, e_p50 = line("raw echo", seqs["echo"])
    ratio = d_p50 / e_p50
    print(f"  ratio daemon/echo p50: {ratio:.2f}x (target <= 3x)  {verdict(ratio <= 3)}")
    quiet_ratio(q_p50 / e_p50, ".2f", q_p50 / d_p50, "x")
    durable_ratios(d_p50, f_p50, e_p50, "p50", ".2f", "x")
    per_pair(seqs, 1, ".2f", pg is not None, "x")
    for label, samples in (("", st), (" [bytecode cached]", st_cached)):
        if samples is None:
            continue
        init, imp = median(samples["init"]), median(samples["import"])
        bare = median(samples["pass"])
        print(
            f"spawn-to-initialize{label} (median of {args.spawns}): daemon {us(init)}; "
            f"`python -c 'import pygls.server'` {us(imp)}; `python -c pass` {us(bare)}"
        )
        print(
            f"  runs ms: daemon {', '.join(f'{x * 1e3:.0f}' for x in samples['init'])}; "
            f"import {', '.join(f'{x * 1e3:.0f}' for x in samples['import'])}"
        )
        ratio = init / imp
        print(
            f"  ratio spawn-to-initialize/import: {ratio:.2f}x (target <= 1.3x)  "
            f"{verdict(ratio <= 1.3)}   [ratio of the minimums: "
            f"{min(samples['init']) / min(samples['import']):.2f}x]"
        )
    for label, table in (("daemon", commits), ("daemon-pg", pg_commits)):
        for phase, rows in table.items():
            if rows:
                writes = rows[0][0]
                cs = [c for _, c in rows]
                print(
                    f"{label} commits, {phase}: {', '.join(map(str, cs))} per run for "
                    f"{writes:,} writes (incl. setup and warm-up) = "
                    f"{writes / median(cs):.1f} writes/commit (median)"
                )
    print(
        f"daemon notifications read and discarded: {notes:,}; "
        f"total bench time {time.perf_counter() - t_start:.0f} s"
    )


if __name__ == "__main__":
    asyncio.run(main())
