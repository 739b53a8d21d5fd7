"""Issue 36 item 3: one before/after pair per compaction, with one meaning, everywhere.

The demo's event lines and closing list, ``inspect`` (text and JSON), ``report`` and the
daemon's stored records (``session/compactions``, which ``session/compacted`` carries) all show
the same two figures: the window just before the compaction and right after it, measured as
``session/context`` measures it. ``inspect`` computes the same pair from the history alone when
no record exists (an imported session).
"""

from __future__ import annotations

import re
from pathlib import Path

from daemon_env import run_cli

from sidecar.tools.inspect import inspect
from sidecar.tools.readdb import list_sessions, load_diagnostics, load_history, open_ro

GUARD = 180


def _run(args: list[str], tmp_path: Path) -> str:
    done = run_cli(args, tmp_path, timeout=GUARD)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _pairs(pattern: str, text: str) -> list[tuple[int, int]]:
    return [
        (int(a.replace(",", "")), int(b.replace(",", ""))) for a, b in re.findall(pattern, text)
    ]


def test_demo_inspect_report_and_the_stored_events_show_one_pair(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    demo = _run(["demo", "--db", str(db)], tmp_path)
    events = _pairs(r"COMPACTED #\d+[^:]*: ([\d,]+) -> ([\d,]+) tok", demo)
    closing = _pairs(r"#\d+ after turn \d+ \(\w+\): ([\d,]+) -> ([\d,]+) tokens", demo)
    assert len(events) >= 2, demo
    assert closing == events
    conn = open_ro(db)
    [session] = list_sessions(conn)
    history = load_history(conn, session)
    records = load_diagnostics(conn, session)
    stored = [
        (r.tokens_before, r.tokens_after) for r in sorted(records.values(), key=lambda r: r.time)
    ]
    assert stored == events
    # inspect: the recorded pair, and the same pair computed from the history alone.
    assert [
        (c.before, c.after) for c in inspect(session, history, diagnostics=records).compactions
    ] == events
    assert [(c.before, c.after) for c in inspect(session, history).compactions] == events
    text = _run(["inspect", session.id, "--db", str(db)], tmp_path)
    assert _pairs(r"compaction C\d+ \(\w+\): ([\d,]+) -> ([\d,]+) tokens", text) == events
    assert "recorded:" not in text  # no second pair
    page_file = tmp_path / "r.html"
    _run(["report", session.id, "--db", str(db), "-o", str(page_file)], tmp_path)
    page = page_file.read_text()
    assert (
        _pairs(r"<td class='l'>(?:auto|manual)</td><td>([\d,]+)</td><td>([\d,]+)</td>", page)
        == events
    )
    assert "recorded before" not in page
