"""Batch runs: every request answered at end of input (issue 19, item 1).

Runs ``serve < requests > replies`` for the 3 request files (the requests alone; ending in
``shutdown``; ending in ``shutdown``, a refused request and ``exit``) x stdin a regular
file or a pipe x stdout a regular file or a pipe, ``--repeat`` times each (3: 36 runs), and
``cat requests | compaction-sidecar connect`` against one shared daemon on a unix socket
for each request file ``--repeat`` times. A run is good when every request got exactly one
reply (the one after ``shutdown`` -32600), the read saw every write, and the database holds
every acknowledged write.

    python bench/end_of_input.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e import batch


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("OPENCODE_DISABLE_AUTOCOMPACT", "OPENCODE_DISABLE_PRUNE", "SIDECAR_LOG"):
        env.pop(key, None)
    return env


class Tally:
    """What went wrong in each run, by the run's label: a run is good when nothing did."""

    def __init__(self) -> None:
        self.runs: dict[str, list[str]] = {}

    def add(self, label: str, problems: list[str]) -> None:
        self.runs.setdefault(label, []).extend(problems)

    def summary(self) -> tuple[int, int, list[str]]:
        """(good runs, runs, a note for each run that was not good)."""
        notes = [f"{label}: {problems}" for label, problems in self.runs.items() if problems]
        return len(self.runs) - len(notes), len(self.runs), notes


def serve_runs(repeat: int) -> tuple[int, int, list[str]]:
    tally = Tally()
    cases = itertools.product(batch.ENDINGS, ("file", "pipe"), ("file", "pipe"), range(repeat))
    for ending, stdin_kind, stdout_kind, n in cases:
        with tempfile.TemporaryDirectory(prefix="eoi-") as tmp:
            db, code, err, problems = batch.serve_requests(
                Path(tmp), ending, stdin_kind=stdin_kind, stdout_kind=stdout_kind, env=_env()
            )
            if code != 0:
                problems.append(f"exit status {code}")
            if b"Traceback" in err:
                problems.append("a traceback")
            if batch.stored(db) != (batch.WRITES, batch.WRITES):
                problems.append(f"stored {batch.stored(db)}")
        tally.add(f"serve {ending} stdin={stdin_kind} stdout={stdout_kind} #{n}", problems)
    return tally.summary()


def connect_runs(repeat: int) -> tuple[int, int, list[str]]:
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="eoi-") as tmp:
        where = Path(tmp)
        sock = where / "s.sock"
        daemon = subprocess.Popen(
            [*batch.serve_command(where / "s.db"), "--listen", f"unix:{sock}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=_env(),
        )
        try:
            assert daemon.stderr is not None
            while b"listening on" not in (line := daemon.stderr.readline()):
                if not line:
                    raise SystemExit("the daemon did not start")
            for ending, n in itertools.product(batch.ENDINGS, range(repeat)):
                sid = f"ses_{ending}_{n}"
                code, err, problems = batch.run_requests(
                    batch.connect_command(sock), ending, sid, where=where, env=_env()
                )
                if code != 0:
                    problems.append(f"exit status {code}: {err[-300:]!r}")
                tally.add(f"connect {ending} #{n}", problems)
        finally:
            daemon.terminate()
            daemon.wait()
        for ending, n in itertools.product(batch.ENDINGS, range(repeat)):
            if batch.stored(where / "s.db", f"ses_{ending}_{n}") != (batch.WRITES, batch.WRITES):
                tally.add(f"connect {ending} #{n}", ["not all writes stored"])
    return tally.summary()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    good, total, notes = serve_runs(args.repeat)
    print(f"serve batch runs answering every request and storing every write: {good} of {total}")
    c_good, c_total, c_notes = connect_runs(args.repeat)
    print(f"cat requests | connect runs, same checks: {c_good} of {c_total}")
    for note in notes + c_notes:
        print("  " + note)


if __name__ == "__main__":
    main()
