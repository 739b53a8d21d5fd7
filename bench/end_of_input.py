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


def _serve(db: Path) -> list[str]:
    return [sys.executable, "-m", "sidecar", "serve", "--db", str(db)]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("OPENCODE_DISABLE_AUTOCOMPACT", "OPENCODE_DISABLE_PRUNE", "SIDECAR_LOG"):
        env.pop(key, None)
    return env


def serve_runs(repeat: int) -> tuple[int, int, list[str]]:
    good = total = 0
    notes: list[str] = []
    cases = itertools.product(batch.ENDINGS, ("file", "pipe"), ("file", "pipe"), range(repeat))
    for ending, stdin_kind, stdout_kind, n in cases:
        with tempfile.TemporaryDirectory(prefix="eoi-") as tmp:
            where = Path(tmp)
            payload, ids, refused = batch.requests(ending)
            db = where / "s.db"
            code, out, err = batch.run_batch(
                [sys.executable, "-m", "sidecar", "serve", "--db", str(db)],
                payload,
                stdin_kind=stdin_kind,
                stdout_kind=stdout_kind,
                where=where,
                env=_env(),
            )
            problems = batch.check(out, ids, refused)
            if code != 0:
                problems.append(f"exit status {code}")
            if b"Traceback" in err:
                problems.append("a traceback")
            if batch.stored(db) != (batch.WRITES, batch.WRITES):
                problems.append(f"stored {batch.stored(db)}")
        total += 1
        if problems:
            notes.append(f"serve {ending} stdin={stdin_kind} stdout={stdout_kind} #{n}: {problems}")
        else:
            good += 1
    return good, total, notes


def connect_runs(repeat: int) -> tuple[int, int, list[str]]:
    good = total = 0
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="eoi-") as tmp:
        where = Path(tmp)
        sock = where / "s.sock"
        daemon = subprocess.Popen(
            [*_serve(where / "s.db"), "--listen", f"unix:{sock}"],
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
                payload, ids, refused = batch.requests(ending, sid)
                code, out, err = batch.run_batch(
                    [sys.executable, "-m", "sidecar", "connect", "--socket", str(sock)],
                    payload,
                    stdin_kind="pipe",
                    stdout_kind="pipe",
                    where=where,
                    env=_env(),
                )
                problems = batch.check(out, ids, refused)
                if code != 0:
                    problems.append(f"exit status {code}: {err[-300:]!r}")
                total += 1
                if problems:
                    notes.append(f"connect {ending} #{n}: {problems}")
                else:
                    good += 1
        finally:
            daemon.terminate()
            daemon.wait()
        for ending, n in itertools.product(batch.ENDINGS, range(repeat)):
            if batch.stored(where / "s.db", f"ses_{ending}_{n}") != (batch.WRITES, batch.WRITES):
                notes.append(f"connect {ending} #{n}: not all writes stored")
                good -= 1
    return good, total, notes


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
