"""``sessions`` / ``inspect`` on a session the daemon really compacted and pruned."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import msgspec
import pytest

from sidecar.cli import main
from sidecar.model.inspect import Inspection, SessionSummary
from sidecar.model.messages import AssistantMessage
from sidecar.tools.inspect import inspect
from sidecar.tools.readdb import find_session, load_history, open_ro
from tests.tools.conftest import daemon


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _inspection(db: Path, sid: str, context: int | None = 4_000) -> Inspection:
    conn = open_ro(db)
    try:
        session = find_session(conn, sid)
        return inspect(session, load_history(conn, session), context=context)
    finally:
        conn.close()


async def test_last_figure_is_the_daemons_session_context(
    compacted: tuple[Path, str], tmp_path: Path
) -> None:
    db, sid = compacted
    ins = _inspection(db, sid)
    client = await daemon(db, tmp_path)
    try:
        ctx = await client.context(sid, "openai")
    finally:
        await client.close()
    assert ins.session.estimated_tokens == ctx.estimated_tokens


@pytest.mark.parametrize("fixture", ["compacted", "collapsed"])
def test_each_turn_is_the_window_the_daemon_served(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    """The replay runner stored each call's ``session/context`` estimate as its
    ``tokens.input``: inspect must rebuild every one of them from the history alone, across
    prunes and (standard or collapse) compactions."""
    db, sid = request.getfixturevalue(fixture)
    ins = _inspection(db, sid)
    conn = open_ro(db)
    history = load_history(conn, find_session(conn, sid))
    conn.close()
    infos = {m.info.id: m.info for m in history}
    # Every id here is the daemon's, and those ascend in write order. Known daemon fault
    # (reported to the lead): the compactor stamps its marker/summary/continue up to a few
    # ms ahead of the clock, and a frontend message written right after gets ``now``, so it
    # is stored *before* the continue message it followed. From such an inversion on, the
    # stored history is not the one the frontend saw, so only the turns before it compare.
    ids = [m.info.id for m in history]
    later_min = [*ids[1:], "~"]  # "~" sorts after every id
    for i in range(len(ids) - 2, -1, -1):
        later_min[i] = min(ids[i + 1], later_min[i + 1])
    # the first message stored before one written earlier than itself
    stop = next((i for i, mid in enumerate(ids) if mid > later_min[i]), len(ids))
    checked = [t for t in ins.turns if ids.index(t.message_id) < stop]
    assert len(checked) >= 10 and any(p.turn < len(checked) for p in ins.prunes)
    sent = [infos[t.message_id].tokens.input for t in checked]  # type: ignore[union-attr]
    assert [t.context_tokens for t in checked] == sent
    assert ins.compactions and ins.prunes


def test_turns_compactions_and_prunes(compacted: tuple[Path, str]) -> None:
    db, sid = compacted
    ins = _inspection(db, sid)
    conn = open_ro(db)
    history = load_history(conn, find_session(conn, sid))
    conn.close()
    calls = [m for m in history if isinstance(m.info, AssistantMessage) and not m.info.summary]
    assert [t.message_id for t in ins.turns] == [m.info.id for m in calls]
    assert ins.window == 4_000
    assert ins.compactions and ins.prunes
    for c in ins.compactions:
        assert c.after < c.before, "a compaction shrinks the window"
        assert c.summary
    for p in ins.prunes:
        assert p.part_ids and p.tokens_saved > 0
    assert ins.latest_summary == ins.compactions[-1].summary
    assert ins.session.compactions == len(ins.compactions)


def test_a_pruned_output_counts_in_full_before_its_prune(compacted: tuple[Path, str]) -> None:
    """The turn right before a prune must be larger than it would be with the output cleared:
    the history is replayed as it was, not as it is now."""
    db, sid = compacted
    ins = _inspection(db, sid)
    prune = ins.prunes[0]
    before = [t for t in ins.turns if t.time <= prune.time]
    assert before
    conn = open_ro(db)
    session = find_session(conn, sid)
    history = load_history(conn, session)
    conn.close()
    from sidecar.engine.filter import filter_compacted
    from sidecar.engine.tokens import estimate_messages

    last = before[-1]
    idx = next(i for i, m in enumerate(history) if m.info.id == last.message_id)
    now = estimate_messages(filter_compacted(history[:idx]))
    assert last.context_tokens > now


def test_cli_json_and_text(compacted: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    db, sid = compacted
    before = _digest(db)
    assert main(["sessions", "--db", str(db), "--json"]) == 0
    rows = msgspec.json.decode(capsys.readouterr().out, type=list[SessionSummary])
    assert [r.id for r in rows] == [sid]
    assert rows[0].compactions >= 1 and rows[0].messages > 0
    assert main(["inspect", sid[:12], "--db", str(db), "--json", "--context", "4000"]) == 0
    ins = msgspec.json.decode(capsys.readouterr().out, type=Inspection)
    assert ins.compactions and ins.turns
    raw = json.loads(msgspec.json.encode(ins))
    assert {"turns", "compactions", "prunes", "latestSummary", "window"} <= raw.keys()
    assert main(["inspect", sid, "--db", str(db), "--context", "4000"]) == 0
    text = capsys.readouterr().out
    assert "compaction C1" in text and "prune:" in text and "latest summary:" in text
    assert main(["sessions", "--db", str(db)]) == 0
    assert sid in capsys.readouterr().out
    assert _digest(db) == before, "the look-at commands never write"


def test_database_opened_read_only(compacted: tuple[Path, str]) -> None:
    conn = open_ro(compacted[0])
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            conn.run(conn.store.backend.query("DELETE FROM sessions"))
    finally:
        conn.close()


def test_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.db"
    assert (
        main(["sessions", "--db", str(missing)]) == 2
    )  # an unusable --db is a usage error, as for serve (issue 20)
    assert f"{missing}: no such database" in capsys.readouterr().err
    junk = tmp_path / "junk.db"
    junk.write_text("not sqlite")
    assert main(["inspect", "x", "--db", str(junk)]) == 2
    assert "not a compaction-sidecar database" in capsys.readouterr().err


def test_unknown_session(compacted: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "ses_nothing", "--db", str(compacted[0])]) == 1
    assert "no session 'ses_nothing'" in capsys.readouterr().err


def test_a_session_by_title(compacted: tuple[Path, str]) -> None:
    conn = open_ro(compacted[0])
    try:
        assert find_session(conn, "tools-fixture").id == compacted[1]
        assert find_session(conn, "tools-fix").id == compacted[1]
    finally:
        conn.close()


@pytest.mark.parametrize("fixture", ["compacted", "collapsed"])
def test_sessions_reads_only_the_window_and_agrees_with_the_history(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    from sidecar.engine.tokens import estimate_messages
    from sidecar.tools.inspect import summarize
    from sidecar.tools.readdb import overview

    db, sid = request.getfixturevalue(fixture)
    conn = open_ro(db)
    try:
        session = find_session(conn, sid)
        full = summarize(session, load_history(conn, session))
        o = overview(conn, session)
    finally:
        conn.close()
    assert len(o.window) < full.messages, "only the window is read"
    assert estimate_messages(o.window) == full.estimated_tokens
    assert (o.messages, o.compactions, o.last_activity) == (
        full.messages,
        full.compactions,
        full.last_activity,
    )


def test_another_schema_version_is_a_usage_error(
    compacted: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A database the read-only open cannot read as it is (it never migrates) is named, with
    what to do, as an unusable ``--db``: exit status 2, one line."""
    old = tmp_path / "old.db"
    with sqlite3.connect(compacted[0]) as src, sqlite3.connect(old) as dst:
        src.backup(dst)
    with sqlite3.connect(old) as conn:
        conn.execute("UPDATE schema_version SET version = 1")
    before = _digest(old)
    assert main(["sessions", "--db", str(old)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "schema v1 is older than this version's" in err
    assert "compaction-sidecar serve" in err
    assert _digest(old) == before, "not migrated"


@pytest.mark.parametrize("at", ["first-summary", "last-summary"])
def test_sessions_window_of_a_reverted_session_is_the_engines(
    compacted: tuple[Path, str], tmp_path: Path, at: str
) -> None:
    """With a revert point the window ``sessions`` sizes is the one the engine serves: the
    history up to the revert point, filtered from the newest compaction before it."""
    from sidecar.engine.filter import filter_compacted
    from sidecar.engine.tokens import estimate_messages
    from sidecar.tools.readdb import overview

    db = tmp_path / "reverted.db"
    with sqlite3.connect(compacted[0]) as src, sqlite3.connect(db) as dst:
        src.backup(dst)
    with sqlite3.connect(db) as conn:
        summaries = [
            mid
            for (mid,) in conn.execute(
                "SELECT id FROM messages WHERE summary_ok = 1 ORDER BY created, id"
            )
        ]
        assert len(summaries) >= 2, "the fixture compacts more than once"
        target = summaries[0] if at == "first-summary" else summaries[-1]
        conn.execute(
            "UPDATE sessions SET data = json_set(data, '$.revert', json_object('messageID', ?))",
            (target,),
        )
    conn2 = open_ro(db)
    try:
        session = find_session(conn2, compacted[1])
        assert session.revert is not None and session.revert.message_id == target
        history = load_history(conn2, session)
        o = overview(conn2, session)
    finally:
        conn2.close()
    assert all(m.info.id != target for m in history), "the revert point is cut"
    assert [m.info.id for m in o.window] == [m.info.id for m in filter_compacted(history)]
    assert estimate_messages(o.window) == estimate_messages(filter_compacted(history))


def test_each_compaction_shows_its_recorded_diagnostics_and_what_it_replaced(
    compacted: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24 item 7: the daemon's stored diagnostics, per compaction, beside the window the
    summary replaced (the inspection's own ``before`` is that window's size)."""
    db, sid = compacted
    assert main(["inspect", sid, "--json", "--db", str(db)]) == 0
    ins = msgspec.json.decode(capsys.readouterr().out, type=Inspection)
    assert ins.compactions
    for c in ins.compactions:
        d = c.diagnostics
        assert d is not None and d.writer == "extractive" and d.auto
        assert d.messages_summarized == len(c.replaced_ids) > 0
        # One pair (issue 36): the inspection shows what the daemon recorded.
        assert (c.before, c.after) == (d.tokens_before, d.tokens_after)
        assert c.after < c.before
        assert [r.id for r in c.replaced] == c.replaced_ids
    assert main(["inspect", sid, "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert "recorded: " not in text and "by extractive" in text
    assert text.count("messages summarized") == len(ins.compactions)
    out = db.parent / "diag-report.html"
    assert main(["report", sid, "--db", str(db), "-o", str(out)]) == 0
    html = out.read_text()
    assert "messages replaced" in html and ins.compactions[0].replaced_ids[0] in html
    assert html.count("<td class='l'>extractive</td>") == len(ins.compactions)
