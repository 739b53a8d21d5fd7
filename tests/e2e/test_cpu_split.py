"""``serve --cpu-split FILE``: the daemon's CPU by kind of work, one JSON line per
``session/idle`` and one at exit (issue 34: the split ``bench/opencode_side.py`` prints).

The figures are the daemon's own thread CPU, so the test asserts what must hold of any
run, never an amount: every kind is there, counted up from zero and never down, the work a
request did shows in its kind, and the kinds never add up to more than the process spent.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

from sidecar_client import HistorySearchResult
from wire import put_message, put_part

from sidecar.model.cpu import KINDS

from .builders import text_part, user_message
from .conftest import Spawner


def _lines(file: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in file.read_text().splitlines()]


async def test_the_cpu_split_counts_each_kind_of_work(spawner: Spawner, tmp_path: Path) -> None:
    file = tmp_path / "cpu.jsonl"
    config = tmp_path / "config.json"  # the indexer waits for the search, however slow the run
    config.write_text(json.dumps({"history": {"indexDelayMs": 3_600_000}}))
    client = await spawner(extra_args=["--config", str(config), "--cpu-split", str(file)])
    session = await client.create_session(title="split")
    user = await put_message(client, user_message(session.id, seq=0))
    for i in range(5):
        await put_part(client, text_part(session.id, user["id"], f"word{i} quokka"))
    await client.context(session.id)
    await client.idle(session.id)
    found = await client.request(
        "history/search",
        {"sessionID": session.id, "query": "quokka", "includeRecall": True},
        HistorySearchResult,
    )  # indexes what was written first: a batch of the indexer
    assert len(found.hits) == 5
    await client.idle(session.id)
    assert await client.close() == 0

    lines = _lines(file)
    assert [line["n"] for line in lines] == [0, 1, 2]  # two idles, then the exit
    for line in lines:
        assert set(line) == {"n", *KINDS, "other", "total"}
        assert line["total"] >= sum(line[k] for k in (*KINDS, "other")) - 0.01
    for before, after in itertools.pairwise(lines):
        assert all(after[k] >= before[k] for k in (*KINDS, "other", "total"))
    first, second = lines[0], lines[1]
    assert first["ingest"] > 0 and first["encode"] > 0  # frames read, replies written
    if isinstance(spawner.db, Path):  # SQLite's work is the daemon's own CPU
        assert first["index"] == 0 and second["index"] > 0  # the search's batch
        assert first["reads"] > 0


def test_the_cpu_split_leaves_the_log_where_it_was(tmp_path: Path) -> None:
    """``--cpu-split`` beside ``--log-level`` (no ``--log-file``): the log still goes to
    stderr at that level (the split's setup once took the place of stderr's)."""
    body = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}'
    frame = b"Content-Length: %d\r\n\r\n" % len(body) + body
    proc = subprocess.run(
        [sys.executable, "-m", "sidecar", "serve", "--db", str(tmp_path / "s.db"),
         "--log-level", "DEBUG", "--cpu-split", str(tmp_path / "cpu.jsonl")],
        input=frame, capture_output=True, timeout=60, check=True,
    )  # fmt: skip
    assert b" DEBUG " in proc.stderr
    assert len(_lines(tmp_path / "cpu.jsonl")) == 1  # the line at exit
