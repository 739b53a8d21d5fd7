"""Atomic replies (DESIGN §4): whatever fails inside a group commit fails only its own op, and
an op that failed left nothing stored, on every commit path (inline, solo, off the loop, any
size). Failures are injected into random batches: a value SQLite cannot bind
(``OverflowError``, not an SQLite error), an unknown session (foreign key), and a message id
owned by another session (the integrity trigger).
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from pathlib import Path

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.errors import Conflict, UnknownSession
from sidecar.model.messages import MessageTime, UserMessage
from sidecar.model.session import Session, SessionTime
from sidecar.store import Store, message_error, message_row
from sidecar.store.commit import INLINE_MAX_ROWS

_UPSERT = (
    "INSERT INTO messages (id, session_id, created, role, parent_id, summary_ok, data) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
    "created = excluded.created, data = excluded.data, session_id = excluded.session_id"
)

FAULTS = ("none", "overflow", "unknown-session", "conflict")

# One op: how many rows it writes, and which fault (if any) its last row carries.
op_strategy = st.tuples(
    st.sampled_from([1, 1, 1, 3, INLINE_MAX_ROWS + 5]),
    st.sampled_from(FAULTS),
)


def _op_rows(index: int, rows: int, fault: str) -> tuple[list[tuple[object, ...]], UserMessage]:
    out = []
    last = UserMessage(id="", session_id="s", time=MessageTime(created=1))
    for r in range(rows):
        mid = f"op{index:03d}-{r:04d}"
        sid, created = "s", 1 + r
        if r == rows - 1:
            if fault == "overflow":
                created = 2**70  # no SQLite error: Python refuses to bind it
            elif fault == "unknown-session":
                sid = "nobody"
            elif fault == "conflict":
                mid = "owned"  # stored in session "other" below
        last = UserMessage(id=mid, session_id=sid, time=MessageTime(created=created))
        out.append(message_row(last, msgspec.json.encode(last)))
    return out, last


async def _run(path: Path, ops: list[tuple[int, str]], inline: bool) -> None:
    store = await Store.open(path, synchronous="NORMAL" if inline else "FULL")
    try:
        for sid in ("s", "other"):
            await store.put_session(Session(id=sid, title="", time=SessionTime(created=1)))
        owned = UserMessage(id="owned", session_id="other", time=MessageTime(created=1))
        await store.put_message(owned, msgspec.json.encode(owned))
        writer = store.backend._commit
        jobs = []
        for index, (rows, fault) in enumerate(ops):
            statements, last = _op_rows(index, rows, fault)
            jobs.append(writer.submit([(_UPSERT, statements)], on_integrity=message_error(last)))
        outcomes = await asyncio.gather(*jobs, return_exceptions=True)
    finally:
        await store.close()
    with sqlite3.connect(path) as db:
        stored = {r[0] for r in db.execute("SELECT id FROM messages WHERE session_id = 's'")}
        owner = db.execute("SELECT session_id FROM messages WHERE id = 'owned'").fetchone()
    assert owner == ("other",)  # a conflicting write never moved the message
    for index, ((rows, fault), outcome) in enumerate(zip(ops, outcomes, strict=True)):
        mine = {f"op{index:03d}-{r:04d}" for r in range(rows)}
        if fault == "none":
            assert outcome == [rows], (index, outcome)
            assert mine <= stored
        else:
            expected = {
                "overflow": OverflowError,
                "unknown-session": UnknownSession,
                "conflict": Conflict,
            }[fault]
            assert isinstance(outcome, expected), (index, fault, outcome)
            assert not mine & stored, (index, fault)  # an error reply: nothing of it stored


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=st.lists(op_strategy, min_size=1, max_size=12), inline=st.booleans())
def test_replies_agree_with_what_is_stored_whatever_fails_in_the_batch(
    ops: list[tuple[int, str]], inline: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_run(Path(tmp) / "s.db", ops, inline))


async def test_a_bad_value_in_an_off_loop_batch_leaves_nothing_for_the_next_commit(
    tmp_path: Path,
) -> None:
    """The reported fault: an ``OverflowError`` inside a large batch left its transaction open,
    and the next commit stored the rows whose requests had been answered with an error."""
    await _run(
        tmp_path / "s.db",
        [(INLINE_MAX_ROWS + 5, "none"), (1, "overflow"), (INLINE_MAX_ROWS + 5, "none")],
        inline=True,
    )
    await _run(tmp_path / "t.db", [(INLINE_MAX_ROWS + 5, "overflow"), (2, "none")], inline=True)
