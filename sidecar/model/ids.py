"""Daemon-made ids that sort by creation time and never wrap.

OpenCode packs ``ms * 4096 + counter`` into 48 bits, which wrapped on 2026-08-14 and made new
messages sort before old ones. Here the millisecond clock takes 13 hex digits (good for about
142,000 years) followed by a 4-digit per-millisecond counter and 8 random hex digits, and the
clock is forced monotonic so ids from one process never go backwards. Ordering in the store
still never relies on ids alone: messages order by ``(time.created, id)``.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Literal

Prefix = Literal["ses", "msg", "prt"]

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def now_ms() -> int:
    """Wall-clock milliseconds, the unit of every ``time`` field on the wire."""
    return time.time_ns() // 1_000_000


def _tick() -> tuple[int, int]:
    global _last_ms, _counter
    with _lock:
        ms = now_ms()
        if ms <= _last_ms:
            ms = _last_ms
            _counter += 1
            if _counter > 0xFFFF:  # more than 65,536 ids in one millisecond: borrow the next one
                ms += 1
                _counter = 0
        else:
            _counter = 0
        _last_ms = ms
        return ms, _counter


def new_id(prefix: Prefix) -> str:
    """A new ascending id such as ``msg_0019a3f4c2b1e0000a1b2c3d4``."""
    ms, counter = _tick()
    return f"{prefix}_{ms:013x}{counter:04x}{os.urandom(4).hex()}"
