"""The daemon moves what its start-up built out of the garbage collector's reach (``tune_gc``),
and everything made after still collects.

Run in a fresh interpreter: freezing is process-wide, and pytest's own objects must not be
what is measured."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import msgspec

_PROBE = textwrap.dedent(
    """
    import gc, json, weakref
    import sidecar.server.app  # the daemon's imports: pygls, lsprotocol's types, the engine
    from sidecar.server.daemon import tune_gc

    before = len(gc.get_objects())
    frozen_before = gc.get_freeze_count()
    tune_gc()
    frozen = gc.get_freeze_count()
    left = len(gc.get_objects())

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle made after the freeze: only the collector frees it
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    print(json.dumps({"before": before, "frozen_before": frozen_before, "frozen": frozen,
                      "left": left, "cycle_collected": gone() is None}))
    """
)


def test_start_up_objects_are_frozen_and_later_cycles_still_collect() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    got = msgspec.json.decode(out.stdout)
    assert got["frozen_before"] == 0
    # Every object start-up left tracked (less its garbage) is frozen: collections no longer
    # walk them.
    assert got["frozen"] > 0.95 * got["before"] > 50_000, got
    assert got["left"] < 100, got
    assert got["cycle_collected"], "a cycle made after the freeze was not collected"
