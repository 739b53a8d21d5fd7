"""Unauthenticated TCP connections (issue 19, item 4), against a real daemon on 127.0.0.1
with its default limits.

1. 16 connections that never authenticate, each sending a 60 MB partial frame (a
   ``Content-Length`` header and 60 MB of its body): the daemon's RSS before, at its peak
   while they send, and after they are closed.
2. 50 idle connections that never send ``initialize``: how many the daemon closed, and
   when (``server.authTimeout``, default 10 s).

    python bench/unauthenticated.py [--connections 16] [--mb 60] [--idle 50]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TOKEN = "bench-unauthenticated-token-0123456789"
SERVE = [sys.executable, "-m", "sidecar", "serve"]


def rss_mb(pid: int, key: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def send_partial(port: int, mb: int, results: list[str]) -> None:
    chunk = b"x" * (1 << 20)
    with socket.create_connection(("127.0.0.1", port)) as s:
        sent = 0
        try:
            s.sendall(b"Content-Length: %d\r\n\r\n" % ((mb + 1) << 20))
            for _ in range(mb):
                s.sendall(chunk)
                sent += 1
            s.shutdown(socket.SHUT_WR)
            while s.recv(1 << 16):
                pass
            results.append(f"sent all {sent} MB, then closed by the daemon")
        except OSError as exc:
            results.append(f"closed by the daemon after {sent} MB ({type(exc).__name__})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--mb", type=int, default=60)
    parser.add_argument("--idle", type=int, default=50)
    args = parser.parse_args()
    where = Path(tempfile.mkdtemp(prefix="ua-"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "COMPACTION_SIDECAR_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [*SERVE, "--db", str(where / "s.db"), "--listen", f"tcp://127.0.0.1:{port}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stderr is not None
    while b"listening on" not in proc.stderr.readline():
        pass
    log: list[bytes] = []
    stderr = proc.stderr
    threading.Thread(target=lambda: log.extend(iter(stderr.readline, b"")), daemon=True).start()
    try:
        base = rss_mb(proc.pid)
        results: list[str] = []
        threads = [
            threading.Thread(target=send_partial, args=(port, args.mb, results))
            for _ in range(args.connections)
        ]
        peak = base
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            peak = max(peak, rss_mb(proc.pid))
            time.sleep(0.01)
        after = rss_mb(proc.pid)
        print(
            f"{args.connections} unauthenticated connections x {args.mb} MB partial frames: "
            f"daemon RSS {base:.1f} MB before, peak {peak:.1f} MB (+{peak - base:.1f} MB), "
            f"{after:.1f} MB after they closed ({after - base:+.1f} MB)"
        )
        for line in sorted(set(results)):
            print(f"  {results.count(line)} x {line}")
        start = time.monotonic()
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(args.idle)]
        closed_at: list[float] = []
        for s in idle:
            s.settimeout(120)
            try:
                data = s.recv(1)
            except OSError:
                data = b""
            if data == b"":
                closed_at.append(time.monotonic() - start)
            s.close()
        print(
            f"{args.idle} idle unauthenticated connections: {len(closed_at)} closed by the "
            f"daemon, the last after {max(closed_at, default=0):.1f} s; daemon RSS "
            f"{rss_mb(proc.pid):.1f} MB"
        )
    finally:
        proc.terminate()
        proc.wait()
    refused = [line for line in log if b"authTimeout" in line]
    print(f"daemon log: {len(refused)} 'did not authenticate' lines")


if __name__ == "__main__":
    main()
