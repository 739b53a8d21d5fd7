"""Where the daemon's CPU goes, by kind of work (``serve --cpu-split FILE``).

The CPU a benchmark sees is the process's; to say what it was spent on, each kind of work
is charged the CPU of the thread that did it while it ran (``time.thread_time_ns``): frames
read, decoded and dispatched, and the writes committed (``ingest``); the history index's
batches (``index``); SQLite reads, on the loop or a reader's thread (``reads``); replies and
notifications encoded and written (``encode``). A section begun inside another charges its
own time, not the outer one's (``begin`` returns the kind to go back to). What no section
covers (window assembly, automatic work, asyncio itself) is the process's CPU less the rest:
``other``.

Off unless asked for: a thread CPU clock read costs ~0.4 us, a few per request. Off, the
functions marked ``charged`` are left as they are (a wrapper that only tests the switch was
~5% of a pipelined ``part/update``'s CPU), so the split is started before the modules that use
it are imported: ``serve`` does, and ``start`` refuses to begin after them.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

import msgspec

log = logging.getLogger("sidecar.cpu")
P = ParamSpec("P")
R = TypeVar("R")

KINDS = ("ingest", "index", "reads", "encode")


class _Thread(threading.local):
    def __init__(self) -> None:
        self.kind: str | None = None
        self.mark = 0
        self.ns = dict.fromkeys(KINDS, 0)
        self.joined = False


class CpuSplit:
    """The per-kind CPU of this process since ``start``; a thread's counters are its own."""

    def __init__(self) -> None:
        self.on = False
        self._file: Path | None = None
        self._local = _Thread()
        self._threads: list[dict[str, int]] = []
        self._lock = threading.Lock()
        self._lines = 0
        #: Functions marked ``charged`` while the split was off: never charged.
        self.bare: list[str] = []

    def start(self, file: Path) -> None:
        """Measure from now on, and append the totals to ``file`` at each ``report``."""
        if self.bare:
            raise RuntimeError(f"the CPU split starts after {self.bare[0]} was defined uncharged")
        self._file = file
        self.on = True

    def begin(self, kind: str | None) -> str | None:
        """Charge the time since the last switch on this thread to its current kind, then make
        ``kind`` current (None: none); the kind before, to go back to with ``begin``."""
        local = self._local
        now = time.thread_time_ns()
        before = local.kind
        if before is not None:
            local.ns[before] += now - local.mark
        elif not local.joined:  # first time on this thread: its counters join the totals
            local.joined = True
            with self._lock:
                self._threads.append(local.ns)
        local.kind, local.mark = kind, now
        return before

    def totals(self) -> dict[str, float]:
        """Milliseconds per kind so far, ``other`` and the process's ``total``."""
        with self._lock:
            ns = {k: sum(c[k] for c in self._threads) for k in KINDS}
        total = time.process_time_ns()
        out = {k: v / 1e6 for k, v in ns.items()}
        out["other"] = max(0, total - sum(ns.values())) / 1e6
        out["total"] = total / 1e6
        return out

    def report(self) -> None:
        """Append the totals as one JSON line (``n``: the lines written before it)."""
        if self._file is None:
            return
        line = {"n": self._lines, **{k: round(v, 3) for k, v in self.totals().items()}}
        self._lines += 1
        try:
            with self._file.open("ab") as f:
                f.write(msgspec.json.encode(line) + b"\n")
        except OSError as exc:  # a diagnostic: the request it follows is served all the same
            log.warning("--cpu-split %s: cannot write: %s", self._file, exc.strerror or exc)


#: The process's one split (a daemon is one process).
SPLIT = CpuSplit()


def charge(kind: str, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """``fn(*args, **kwargs)``, what it spends (its thread's CPU) charged to ``kind``."""
    if not SPLIT.on:
        return fn(*args, **kwargs)
    before = SPLIT.begin(kind)
    try:
        return fn(*args, **kwargs)
    finally:
        SPLIT.begin(before)


def charged(kind: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Charge what the decorated function spends (its thread's CPU) to ``kind``, when the
    split is on as it is defined; else the function is returned as it is."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        if not SPLIT.on:
            SPLIT.bare.append(fn.__qualname__)
            return fn

        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            return charge(kind, fn, *args, **kwargs)

        return run

    return wrap
