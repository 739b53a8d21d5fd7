"""Zero-wait compaction (issue 25): the user-visible wait per overflow, with and without
``compaction.prepare``, in one run.

The scenario (tests/e2e_compaction/zerowait.py): a real daemon over stdio, an OpenAI-compatible
writer on 127.0.0.1 that takes ``--delay`` seconds per summary, a 32k-token session that
overflows ``--overflows`` times. The wait is the time from sending the overflowing
``message/update`` (with ``finish``) to the reply of the ``session/context`` pipelined behind it.
Also: the summary tokens spent on prepared summaries that were discarded, as a share of all.

    python bench/zerowait.py [--overflows 5] [--delay 2.0]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.* from the repo

from _util import median

from tests.e2e_compaction.zerowait import Run, drive


def _waits(run: Run) -> list[float]:
    return [o.wait_s for o in run.overflows]


async def main(overflows: int, delay: float) -> None:
    with tempfile.TemporaryDirectory(prefix="zerowait-") as where:
        tmp = Path(where)
        off = await drive(tmp, prepare=None, overflows=overflows, delay=delay)
        on = await drive(tmp, prepare=0.7, overflows=overflows, delay=delay)
    print(f"writer latency {delay:.1f} s, 32k window, {overflows} overflows per run")
    for name, run in (("without prepare", off), ("prepare 0.7", on)):
        waits = _waits(run)
        prepared = sum(1 for o in run.overflows if o.event.get("prepared"))
        print(
            f"{name:>16}: wait p50 {median(waits) * 1000:8.1f} ms  max {max(waits) * 1000:8.1f} ms"
            f"  ({max(waits) / delay:6.1%} of writer latency at worst)  prepared {prepared}/"
            f"{len(waits)}  windows fit: {run.windows_fit}"
        )
    ratio_p50 = median(_waits(off)) / median(_waits(on))
    ratio_max = max(_waits(off)) / max(_waits(on))
    print(f"ratio (without / with): p50 {ratio_p50:.0f}x  max {ratio_max:.0f}x  (target >= 20x)")
    total = on.status["summaryTokens"]
    wasted = on.status["preparedDiscardedTokens"]
    share = wasted / total if total else 0.0
    print(f"summary tokens with prepare: {total}, discarded preparations: {wasted} ({share:.1%})")
    waited = [o.event.get("waitedMs") for o in on.overflows]
    print(f"waitedMs reported by session/compacted with prepare: {waited}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--overflows", type=int, default=5)
    ap.add_argument("--delay", type=float, default=2.0)
    args = ap.parse_args()
    asyncio.run(main(args.overflows, args.delay))
