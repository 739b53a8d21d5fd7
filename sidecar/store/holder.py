"""Who holds a lease, written so that another daemon can tell when that holder is gone.

A lease row outlives a daemon killed while holding it (``kill -9``, a crash, power loss);
waiting for it to expire blocks the session for the whole lease time. So the owner string
names its process: host name, boot id and PID namespace (together: "this machine, this boot,
this process table"), the PID and that process's start time (so a recycled PID is not taken
for the holder). A daemon that sees the same machine, boot and process table, and finds no
process with that PID and start time, knows the holder is gone and may take the lease at
once. Anything less certain (another host, no ``/proc``) keeps the lease until it expires:
a live daemon's lease must never be taken.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from pathlib import Path

SEP = "|"


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _pid_ns() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks after boot; ``/proc/PID/stat`` field 22), ``""``
    where there is no ``/proc``, None when no such process runs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None if Path("/proc/self/stat").exists() else ""
    except OSError:
        return ""
    fields = stat[stat.rfind(")") + 2 :].split()
    if fields and fields[0] in ("Z", "X"):
        return None  # exited (a zombie not yet reaped by its parent)
    return fields[19] if len(fields) > 19 else ""


def _machine() -> tuple[str, str, str]:
    return (
        socket.gethostname().replace(SEP, "_"),
        _read("/proc/sys/kernel/random/boot_id"),
        _pid_ns(),
    )


def new_owner() -> str:
    """This process's owner string (unique per daemon: it ends in a random id)."""
    host, boot, ns = _machine()
    pid = os.getpid()
    return SEP.join([host, boot, ns, str(pid), _start_time(pid) or "", uuid.uuid4().hex[:12]])


def gone(owner: str) -> bool:
    """Whether the holder named by ``owner`` provably no longer runs (never a guess)."""
    fields = owner.split(SEP)
    if len(fields) != 6:
        return False  # an older daemon's owner string: nothing to go by
    host, boot, ns, pid_text, started, _ = fields
    if not boot or not ns or (host, boot, ns) != _machine():
        return False  # another machine, boot or process table: cannot look
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    now = _start_time(pid)
    if now is None:
        return True  # no such process
    if now and started and now != started:
        return True  # the PID was recycled: the holder is gone
    if not now:
        with contextlib.suppress(PermissionError):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
    return False
