"""Claude Code, pi and transcript imports, format detection, and failures that write nothing."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sidecar.cli import main
from sidecar.engine.filter import filter_compacted
from sidecar.engine.render import to_anthropic
from sidecar.errors import Conflict
from sidecar.model.messages import UserMessage, WithParts
from sidecar.model.parts import CompactionPart, FilePart, ToolCompleted, ToolError, ToolPart
from sidecar.store import Store, packed
from sidecar.tools.importers.common import ImportFailure
from sidecar.tools.importers.detect import detect, read
from sidecar.tools.readdb import find_session, load_history, open_ro
from tests.tools.conftest import FIXTURES

CLAUDE = FIXTURES / "claude-code" / "session.jsonl"
PI = FIXTURES / "pi" / "session.jsonl"
TRANSCRIPT = FIXTURES / "transcript" / "openhands-vue-todo-gui.jsonl"


def _history(db: Path, sid: str) -> list[WithParts]:
    conn = open_ro(db)
    try:
        return load_history(conn, find_session(conn, sid))
    finally:
        conn.close()


def _import(capsys: pytest.CaptureFixture[str], db: Path, path: Path) -> dict[str, Any]:
    assert main(["import", str(path), "--db", str(db), "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert isinstance(row, dict)
    return row


@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        (CLAUDE, "claude-code"),
        (PI, "pi"),
        (TRANSCRIPT, "transcript"),
        (FIXTURES / "opencode-1.1.53" / "export.json", "opencode"),
        (FIXTURES / "opencode-1.1.53" / "storage", "opencode"),
        (FIXTURES / "opencode-1.2.27" / "opencode.db", "opencode"),
        (FIXTURES / "opencode-1.2.27", "opencode"),
    ],
)
def test_detect(path: Path, fmt: str) -> None:
    assert detect(path) == fmt


def test_claude_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.db"
    row = _import(capsys, db, CLAUDE)
    sid = "ses_7f3c1a2e-5b9d-4c11-9e0a-2d4b6f8a1c3e"
    assert row == {"sessionID": sid, "source": "claude-code", "messages": 8}
    history = _history(db, sid)
    # the two lines of response msg_01AAA are one message; the sidechain line is left out
    texts = json.dumps([msgspec.to_builtins(m) for m in history])
    assert "subagent work" not in texts
    first = history[1]
    assert [type(p).__name__ for p in first.parts] == ["TextPart", "ToolPart"]
    tools = [p for m in history for p in m.parts if isinstance(p, ToolPart)]
    assert [type(t.state) for t in tools] == [ToolError, ToolCompleted]
    assert "month must be in 1..12" in tools[0].state.error  # type: ignore[union-attr]
    window = to_anthropic(filter_compacted(history))
    assert window[0] == {
        "role": "user",
        "content": [{"type": "text", "text": "What did we do so far?"}],
    }
    assert "swapped day and month" in window[1]["content"][0]["text"]
    assert window[2]["content"][0]["text"] == "Thanks. Add a test for leap days too."
    assert window[2]["content"][1]["type"] == "image"
    marker = next(p for m in history for p in m.parts if isinstance(p, CompactionPart))
    assert marker.auto is False  # compactMetadata.trigger == "manual"
    conn = open_ro(db)
    session = find_session(conn, sid)
    conn.close()
    assert session.title == "Fix the failing date parser test"
    assert session.directory == "/home/dev/proj"


def test_pi_keeps_its_compaction_tail_and_current_branch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.db"
    row = _import(capsys, db, PI)
    sid = row["sessionID"]
    history = _history(db, sid)
    assert "abandoned question" not in json.dumps([msgspec.to_builtins(m) for m in history])
    files = [p for m in history for p in m.parts if isinstance(p, FilePart)]
    assert [(f.mime, f.url) for f in files] == [("image/png", "data:image/png;base64,iVBORw0KGgo=")]
    window = to_anthropic(filter_compacted(history))
    # pi's own context: summary, the kept messages from firstKeptEntryId, then what followed
    assert window[0]["content"][0]["text"] == "What did we do so far?"
    assert window[1]["content"][0]["text"].startswith("## Goal")
    assert window[2]["content"][0]["text"] == "Now explain util.ts"
    assert window[4]["content"][0]["text"] == "$ git status --short\n M src/util.ts\n"
    assert window[-1]["content"][0]["is_error"] is True
    tools = [p for m in history for p in m.parts if isinstance(p, ToolPart)]
    assert [type(t.state) for t in tools] == [ToolCompleted, ToolCompleted, ToolError]
    conn = open_ro(db)
    assert find_session(conn, sid).title == "Explore src/"
    conn.close()


def test_transcript(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.db"
    row = _import(capsys, db, TRANSCRIPT)
    assert row["source"] == "transcript" and row["messages"] == 6
    history = _history(db, row["sessionID"])
    roles = ["user" if isinstance(m.info, UserMessage) else "assistant" for m in history]
    assert roles == ["user"] + ["assistant"] * 5  # as in the file
    assert sum(isinstance(p, ToolPart) for m in history for p in m.parts) == 4
    assert [m.info.time.created for m in history] == sorted(m.info.time.created for m in history)


def test_several_files_and_text_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.db"
    assert main(["import", str(CLAUDE), str(PI), "--db", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "claude-code" in lines[0] and "pi" in lines[1]


def test_a_bad_line_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file broken at its last line: an error naming file and line, and no half session."""
    db = tmp_path / "s.db"
    _import(capsys, db, TRANSCRIPT)  # the database exists and holds one session
    lines = PI.read_text().splitlines()
    lines.append(
        json.dumps(
            {
                "type": "message",
                "id": "z1",
                "parentId": lines and "a000000f",
                "message": {"role": "toolResult", "toolCallId": "nope"},
            }
        )
    )
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    assert main(["import", str(CLAUDE), str(bad), "--db", str(db)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:{len(lines)}: toolResult: field 'toolCallId'" in err
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (1,)
    bad.write_text(PI.read_text() + "{not json\n")
    assert main(["import", str(bad), "--db", str(db)]) == 1
    assert f"{bad}:{len(PI.read_text().splitlines()) + 1}: not JSON" in capsys.readouterr().err


def test_missing_field_is_named(tmp_path: Path) -> None:
    rec = json.loads(CLAUDE.read_text().splitlines()[1])
    del rec["uuid"]
    bad = tmp_path / "c.jsonl"
    bad.write_text(json.dumps(rec) + "\n")
    with pytest.raises(ImportFailure, match=r"c.jsonl:1: field 'uuid': missing"):
        read(bad, "claude-code")


def test_unknown_format(tmp_path: Path) -> None:
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"hello": 1}\n')
    with pytest.raises(ImportFailure, match="unknown format"):
        detect(odd)


def test_an_id_of_another_session_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.db"
    _import(capsys, db, CLAUDE)
    moved = CLAUDE.read_text().replace(
        "7f3c1a2e-5b9d-4c11-9e0a-2d4b6f8a1c3e", "00000000-0000-0000-0000-000000000000"
    )
    other = tmp_path / "other.jsonl"
    other.write_text(moved)
    assert main(["import", str(PI), str(other), "--db", str(db), "--json"]) == 1
    out, err = capsys.readouterr()
    assert "is already stored in session" in err
    # one import is one transaction (issue 19 item 5): the good pi file before the refused
    # one is not stored either, and nothing is listed
    assert out == ""
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (1,)


def test_put_session_with_is_one_transaction(tmp_path: Path) -> None:
    """A session whose part breaks a constraint stores nothing at all, not even the session."""
    imp = read(PI)[0]
    part, raw = imp.parts[0]
    orphan = msgspec.structs.replace(part, id="prt_orphan", message_id="msg_missing")

    async def go() -> int:
        store = await Store.open(tmp_path / "s.db")
        try:
            with pytest.raises(Conflict, match="not stored"):
                await store.put_session_with(imp.session, imp.messages, [*imp.parts, (orphan, raw)])
            return len((await store.list_sessions())[0])
        finally:
            await store.close()

    assert asyncio.run(go()) == 0


def test_claude_code_subagent_log_is_a_child_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """claude-code-viewer's real ``agent-*.jsonl``: every record is a sidechain."""
    db = tmp_path / "s.db"
    row = _import(capsys, db, FIXTURES / "claude-code" / "agent-test-hash-123.jsonl")
    parent = "ses_5c0375b4-57a5-4f26-b12d-d022ee4e51b7"
    assert row["sessionID"] == f"{parent}_agent-test-hash-123" and row["messages"] == 2
    conn = open_ro(db)
    assert find_session(conn, row["sessionID"]).parent_id == parent
    conn.close()


def test_pi_version_1_compaction_index(tmp_path: Path) -> None:
    """Version 1 files have no entry ids; ``firstKeptEntryIndex`` counts the header as 0."""
    lines = [
        {"type": "session", "id": "v1", "timestamp": "2025-11-20T23:33:50.805Z", "cwd": "/w"},
        {"type": "message", "timestamp": "2025-11-20T23:34:00Z",
         "message": {"role": "user", "content": [{"type": "text", "text": "old"}]}},
        {"type": "message", "timestamp": "2025-11-20T23:34:01Z",
         "message": {"role": "user", "content": [{"type": "text", "text": "kept"}]}},
        {"type": "compaction", "timestamp": "2025-11-20T23:35:00Z", "summary": "S",
         "firstKeptEntryIndex": 2, "tokensBefore": 100},
        {"type": "message", "timestamp": "2025-11-20T23:36:00Z",
         "message": {"role": "user", "content": "new"}},
    ]  # fmt: skip
    path = tmp_path / "v1.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    imp = read(path)[0]
    history = [
        WithParts(info=m, parts=[p for p, _ in imp.parts if p.message_id == m.id])
        for m, _ in sorted(imp.messages, key=lambda x: (x[0].time.created, x[0].id))
    ]
    window = to_anthropic(filter_compacted(history))
    texts = [block["text"] for m in window for block in m["content"]]
    assert texts == ["What did we do so far?", "S", "kept", "new"]


def test_progress_bar_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import pty

    from sidecar.tools.cli import _progress

    assert _progress(10_000) is None  # pytest's stderr is not a terminal
    import fcntl
    import select
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    seen = b""
    with os.fdopen(follower, "w") as tty:
        monkeypatch.setattr("sys.stderr", tty)
        assert _progress(10) is None, "short imports draw nothing"
        bar = _progress(10_000)
        assert bar is not None
        bar.update(5_000)
        bar.close()
        tty.flush()
        # The kernel hands pty output to the reader asynchronously: wait for data (an event,
        # bounded), not for time.
        while b"5000/10000" not in seen and select.select([leader], [], [], 10)[0]:
            seen += os.read(leader, 4096)
    os.close(leader)
    assert b"5000/10000" in seen, seen


def test_a_folder_of_session_logs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Claude Code project folder: every ``*.jsonl`` in it, each detected on its own."""
    db = tmp_path / "s.db"
    assert main(["import", str(FIXTURES / "claude-code"), "--db", str(db), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["messages"] for r in rows) == [2, 8]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ImportFailure, match="without OpenCode storage"):
        read(empty)


def test_imported_history_is_searchable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``import`` indexes as it writes: every text and tool part it stored is found."""
    db = tmp_path / "s.db"
    row = _import(capsys, db, TRANSCRIPT)
    history = _history(db, row["sessionID"])
    tool = next(p for m in history for p in m.parts if isinstance(p, ToolPart))
    needle = next(w for w in json.dumps(tool.state.input).split('"') if len(w) > 8)

    async def search() -> list[Any]:
        store = await Store.open(db)
        try:
            found = await store.search_history(row["sessionID"], needle, 20, include_recall=True)
            return list(found.hits)
        finally:
            await store.close()

    hits = asyncio.run(search())
    assert tool.id in [h[2] for h in hits]
    conn = sqlite3.connect(db)
    packed.register(conn)  # the index's content is a view that reads compressed parts
    indexed = conn.execute("SELECT count(*) FROM history_fts").fetchone()[0]
    stored = conn.execute(
        "SELECT count(*) FROM parts WHERE type IN ('text', 'reasoning', 'tool')"
    ).fetchone()[0]
    conn.close()
    assert indexed == stored > 0
