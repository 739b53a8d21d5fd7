"""Many daemons on one PostgreSQL database: ingest throughput of N daemons x M clients.

For each N in ``--daemons``: a fresh database on the ``--db`` server (see ``bench/_pg.py``), N
``serve --listen unix:...`` daemons on it, M clients connected to each (unix sockets), every
client pipelining ``part/update`` of ~200-byte text parts into a session of its own
(``--inflight`` in flight per client). The figure is all clients' requests over the wall time
from the first request to the last reply. Beside it, in the same run: one daemon with N*M
clients on a SQLite file (the single-machine default) and the same on PostgreSQL.

All processes share this machine's cores (the PostgreSQL server, N daemons and this client
process): read the figures as how the cost splits, not as what N machines would do.

    python bench/many.py --db postgresql://user@/postgres?host=/run/postgresql \\
        [--daemons 1,2,3] [--clients 4] [--n 3000] [--inflight 16]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _pg import Databases  # noqa: E402
from _util import pct  # noqa: E402

PY = sys.executable
TEXT = "The quick brown fox jumps over the lazy dog while the compaction sidecar stores it. " * 2


class Conn:
    """A minimal pipelining JSON-RPC client over a unix socket (Content-Length frames)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.ids = itertools.count(1)
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.task = asyncio.ensure_future(self._read())

    @classmethod
    async def open(cls, path: str) -> Conn:
        reader, writer = await asyncio.open_unix_connection(path, limit=1 << 24)
        return cls(reader, writer)

    async def _read(self) -> None:
        try:
            await self._frames()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the daemon went away (the end of a measurement)

    async def _frames(self) -> None:
        while True:
            header = await self.reader.readuntil(b"\r\n\r\n")
            length = int(header.split(b":")[1].split(b"\r\n")[0])
            msg = msgspec.json.decode(await self.reader.readexactly(length))
            fut = self.waiting.pop(msg.get("id"), None) if "id" in msg else None
            if fut is not None and not fut.done():
                if "error" in msg:
                    fut.set_exception(RuntimeError(msg["error"]))
                else:
                    fut.set_result(msg.get("result"))

    def send(self, method: str, params: Any, *, notify: bool = False) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        if not notify:
            ident = next(self.ids)
            body["id"] = ident
            self.waiting[ident] = fut
        else:
            fut.set_result(None)
        data = msgspec.json.encode(body)
        self.writer.write(b"Content-Length: %d\r\n\r\n%b" % (len(data), data))
        return fut

    async def close(self) -> None:
        self.task.cancel()
        self.writer.close()


async def start_daemon(db: str, sock: str, errfile: Path) -> asyncio.subprocess.Process:
    err = errfile.open("wb")
    proc = await asyncio.create_subprocess_exec(
        PY, "-m", "sidecar", "serve", "--db", db, "--listen", f"unix:{sock}",
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=err,
    )  # fmt: skip
    for _ in range(600):
        if Path(sock).exists():
            return proc
        if proc.returncode is not None:
            break
        await asyncio.sleep(0.05)
    raise RuntimeError(f"daemon did not start: {errfile.read_text()[-2000:]}")


async def client_load(path: str, n: int, inflight: int, k: int) -> list[float]:
    conn = await Conn.open(path)
    await conn.send("initialize", {"processId": os.getpid(), "capabilities": {}})
    conn.send("initialized", {}, notify=True)
    sid = f"ses_many_{os.getpid()}_{k}_{time.time_ns()}"
    await conn.send("session/create", {"id": sid, "title": "many"})
    mid = f"msg_{sid}"
    message = {"id": mid, "sessionID": sid, "role": "user"}
    await conn.send("message/update", {"message": message})
    lat: list[float] = []
    sem = asyncio.Semaphore(inflight)

    async def one(i: int) -> None:
        async with sem:
            t0 = time.perf_counter()
            part = {
                "id": f"prt_{k}_{i:08d}_{sid}",
                "sessionID": sid,
                "messageID": mid,
                "type": "text",
            }
            await conn.send("part/update", {"part": {**part, "text": TEXT}})
            lat.append(time.perf_counter() - t0)

    await asyncio.gather(*(one(i) for i in range(n)))
    await conn.close()
    return lat


async def measure(dbs: list[str], clients: int, n: int, inflight: int, tmp: Path) -> str:
    """``clients`` per daemon, one daemon per entry of ``dbs``; the result line."""
    procs = []
    socks = []
    try:
        for d, db in enumerate(dbs):
            sock = str(tmp / f"d{d}.sock")
            procs.append(await start_daemon(db, sock, tmp / f"d{d}.err"))
            socks.append(sock)
        t0 = time.perf_counter()
        lats = await asyncio.gather(
            *(
                client_load(sock, n, inflight, d * clients + c)
                for d, sock in enumerate(socks)
                for c in range(clients)
            )
        )
        elapsed = time.perf_counter() - t0
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.terminate()
        for proc in procs:
            await proc.wait()
        for sock in socks:
            Path(sock).unlink(missing_ok=True)
    total = n * len(lats)
    flat = [x for lat in lats for x in lat]
    return (
        f"{total / elapsed:>8,.0f} req/s  p50 {pct(flat, 50) * 1e3:6.1f} ms  "
        f"p99 {pct(flat, 99) * 1e3:6.1f} ms  ({total:,} part/update in {elapsed:.1f} s)"
    )


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", required=True, metavar="POSTGRESQL_URL", help="a PostgreSQL server")
    ap.add_argument("--daemons", default="1,2,3", help="comma-separated daemon counts")
    ap.add_argument("--clients", type=int, default=4, help="clients per daemon")
    ap.add_argument("--n", type=int, default=3000, help="part/update per client")
    ap.add_argument("--inflight", type=int, default=16, help="in flight per client")
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    counts = [int(x) for x in args.daemons.split(",")]
    dbs = Databases(args.db)
    tmp = Path(tempfile.mkdtemp(prefix="bench-many-"))
    print(
        f"many daemons: part/update of {len(TEXT)}-byte text parts, {args.n:,} per client, "
        f"{args.inflight} in flight per client; {os.cpu_count()} CPUs shared by all processes"
    )
    try:
        for run in range(args.runs):
            for daemons in counts:
                total_clients = daemons * args.clients
                url = await dbs.fresh(f"many{daemons}")
                line = await measure([url] * daemons, args.clients, args.n, args.inflight, tmp)
                print(f"  PostgreSQL {daemons} daemon(s) x {args.clients} clients: {line}")
                sqlite = str(tmp / f"run{run}-{daemons}.db")
                line = await measure([sqlite], total_clients, args.n, args.inflight, tmp)
                print(f"  SQLite     1 daemon    x {total_clients} clients: {line}")
                url = await dbs.fresh(f"one{daemons}")
                line = await measure([url], total_clients, args.n, args.inflight, tmp)
                print(f"  PostgreSQL 1 daemon    x {total_clients} clients: {line}")
    finally:
        await dbs.drop_all()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
