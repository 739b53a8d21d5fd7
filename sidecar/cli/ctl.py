"""``compaction-sidecar status`` and ``stop``: ask the background daemon over its socket."""

from __future__ import annotations

import asyncio
import json
import os
import select
import sys
import time
from pathlib import Path
from typing import Any

from sidecar.shared_daemon import sockets

TIMEOUT = 30.0


class NotRunning(Exception):
    pass


class Refused(Exception):
    """Another user's socket or daemon, or one that cannot be reached: never talked to."""


async def _ask(sock: Path, method: str) -> tuple[dict[str, Any], Any]:
    """``daemon/status`` then ``method`` on one connection; (status, the reply)."""
    from sidecar_client import ConnectionClosed, connect

    try:
        # Ours only: the socket, its directory and the daemon's uid (SO_PEERCRED) are checked.
        probe = sockets.connect(sock)
    except (sockets.NotOurs, OSError) as exc:  # another user's, or unreachable
        raise Refused(str(exc)) from None
    if probe is None:
        raise NotRunning(f"no daemon is listening on {sock}")
    probe.close()
    try:
        client = await connect(f"unix:{sock}")
    except (ConnectionClosed, OSError) as exc:  # it stopped between the probe and now
        raise NotRunning(f"no daemon is listening on {sock} ({exc})") from None
    try:
        status = await client.request("daemon/status", {}, timeout=TIMEOUT)
        reply = status if method == "daemon/status" else await client.request(method, {})
        if method == "daemon/stop":
            await client.wait_exit(TIMEOUT)  # the daemon closes every connection as it stops
    finally:
        await client.close()
    return dict(status), reply


def status(sock: Path, *, as_json: bool) -> int:
    try:
        info, _ = asyncio.run(_ask(sock, "daemon/status"))
    except (NotRunning, Refused) as exc:
        if as_json and isinstance(exc, NotRunning):
            print(json.dumps({"running": False, "socket": str(sock)}))
        print(f"compaction-sidecar: {exc}", file=sys.stderr)
        return 1
    if as_json:
        print(json.dumps({"running": True, **info}, indent=2))
        return 0
    idle = info.get("idleExit")
    rows = [
        ("socket", info.get("socket") or info.get("listen")),
        ("db", info["db"]),
        ("clients", f"{info['clients']} (this one included)"),
        ("sessions", f"{info['sessions']:,}"),
        ("uptime", _duration(float(info["uptime"]))),
        ("idle exit", f"after {idle:g}s with no client" if idle is not None else "never"),
    ]
    print(f"compaction-sidecar {info['version']} running, pid {info['pid']}")
    for name, value in rows:
        print(f"  {name:<10} {value}")
    return 0


def stop(sock: Path) -> int:
    try:
        info, _ = asyncio.run(_ask(sock, "daemon/stop"))
    except (NotRunning, Refused) as exc:
        print(f"compaction-sidecar: {exc}", file=sys.stderr)
        return 1
    pid = int(info["pid"])
    if not wait_pid(pid, TIMEOUT):
        print(f"compaction-sidecar: pid {pid} is still running after {TIMEOUT:g}s", file=sys.stderr)
        return 1
    print(f"stopped compaction-sidecar (pid {pid})")
    return 0


def wait_pid(pid: int, timeout: float) -> bool:
    """Wait for a process that is not our child to end; whether it did within ``timeout``."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    except (AttributeError, OSError):  # not Linux: look now and then
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            time.sleep(0.05)
        return False
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


def _duration(seconds: float) -> str:
    s = int(seconds)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h {m:02d}m {s:02d}s" if h else f"{m}m {s:02d}s" if m else f"{seconds:.1f}s"
