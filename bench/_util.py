"""Small timing helpers shared by the benchmarks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any


def pct(samples: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank."""
    ordered = sorted(samples)
    idx = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[idx]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def frame(msg_id: int, method: str, params: Any) -> bytes:
    """A request in the daemon's ``Content-Length`` framing."""
    body = json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
    return b"Content-Length: %d\r\n\r\n%b" % (len(body), body.encode())


def rss_mb(pid: int, key: str = "VmRSS") -> float:
    """``/proc/PID/status``'s ``key`` (VmRSS, VmHWM) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextlib.asynccontextmanager
async def unix_daemon(prefix: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, Path]]:
    """A daemon serving a fresh temp dir's ``s.db`` on its ``s.sock``, once it listens; stopped
    on exit, whatever the benchmark raised."""
    where = Path(tempfile.mkdtemp(prefix=prefix))
    sock = where / "s.sock"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sidecar", "serve", "--db", str(where / "s.db"),
        "--listen", f"unix:{sock}",
        stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        while b"listening on" not in await proc.stderr.readline():
            pass
        yield proc, sock
    finally:
        proc.terminate()
        await proc.wait()
