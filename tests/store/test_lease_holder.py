"""A lease's holder is taken for gone only when that is certain (issue 19, item 6).

Real processes: a child that runs, then is killed and reaped. A lease held by a gone process
on this machine is taken over at once, on each backend; one held by a running process, by an
owner on another machine, or by an owner string of an older daemon is not.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sidecar.store import Store, holder


def owner_of(pid: int) -> str:
    """The owner string the process ``pid`` would have written (same machine)."""
    mine = holder.new_owner().split(holder.SEP)
    started = holder._start_time(pid) or ""
    return holder.SEP.join([*mine[:3], str(pid), started, "0123456789ab"])


def test_a_running_process_is_not_gone_and_a_reaped_one_is() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        owner = owner_of(child.pid)
        assert not holder.gone(owner)
    finally:
        child.kill()
        child.wait()
    assert holder.gone(owner)


def test_what_cannot_be_checked_is_never_taken_for_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = owner_of(child.pid).split(holder.SEP)
    assert holder.gone(holder.SEP.join(dead))
    assert not holder.gone(holder.SEP.join(["another-host", *dead[1:]]))
    assert not holder.gone(holder.SEP.join([dead[0], "another-boot", *dead[2:]]))
    assert not holder.gone(f"{child.pid}-0123456789ab")  # an older daemon's owner string
    assert not holder.gone(holder.new_owner())  # this process
    # This PID, but an earlier process (a daemon restarted as the same PID, say PID 1 in a
    # container): its start time gives it away.
    mine = holder.new_owner().split(holder.SEP)
    mine[4] = str(int(mine[4]) - 1)
    assert holder.gone(holder.SEP.join(mine))


def test_a_recycled_pid_is_not_the_holder() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        owner = owner_of(child.pid).split(holder.SEP)
        owner[4] = str(int(owner[4]) - 1)  # its PID, but a process started at another time
        assert holder.gone(holder.SEP.join(owner))
    finally:
        child.kill()
        child.wait()


async def test_a_gone_holders_lease_is_taken_over_and_a_live_ones_is_not(
    db: str | Path,
) -> None:
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store = await Store.open(db)
    try:
        assert await store.acquire_lease("compact:live", owner_of(live.pid), 60_000)
        assert await store.acquire_lease("compact:dead", owner_of(dead.pid), 60_000)
        me = holder.new_owner()
        assert not await store.acquire_lease("compact:live", me, 60_000)
        assert await store.acquire_lease("compact:dead", me, 60_000)
        assert await store.acquire_lease("compact:dead", me, 60_000)  # now ours: renewed
    finally:
        await store.close()
        live.kill()
        live.wait()
