"""A store file changed behind the daemon's back (a damaged disk, a hand edit, a hostile file)
is not a bug of the daemon: a read that meets such a row fails with the store's own error
code (-32049), a message naming the file and the part, nothing is changed, and every other
session is served as before."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import asyncpg
import pytest
from sidecar_client import RpcError
from wire import put_message, put_part

from sidecar.store import packed, redact

from .builders import assistant_message, text_part, user_message
from .conftest import Spawner

STORE_DAMAGED = -32049

# A tool output large and repetitive enough to be stored deflated (``packed.PACK_BYTES``).
OUTPUT = "".join(f"{i:5d}\tline of a file the tool read\n" for i in range(400))
# A part's stored JSON cut short, as a damaged disk or a hand edit leaves it.
CUT = '{"id": "broken'


def _tool_part(session_id: str, message_id: str, pid: str) -> dict[str, object]:
    return {
        "id": pid,
        "sessionID": session_id,
        "messageID": message_id,
        "type": "tool",
        "callID": "call_1",
        "tool": "read",
        "state": {
            "status": "completed",
            "input": {"filePath": "a.py"},
            "output": OUTPUT,
            "title": "a.py",
            "metadata": {},
            "time": {"start": 1, "end": 2},
        },
    }


def _damage(db: Path, how: str, pid: str) -> None:
    conn = sqlite3.connect(db)
    packed.register(conn)  # the schema's triggers read a part's text through it
    try:
        if how == "compressed":
            (z,) = conn.execute("SELECT z FROM parts WHERE id = ?", (pid,)).fetchone()
            assert z is not None, "the output was stored deflated"
            conn.execute("UPDATE parts SET z = ? WHERE id = ?", (z[:8] + b"\xff" * 32, pid))
        else:  # a plain row whose JSON is cut short
            conn.execute("UPDATE parts SET data = ?, z = NULL WHERE id = ?", (CUT, pid))
        conn.commit()
    finally:
        conn.close()


@pytest.mark.parametrize("how", ["compressed", "plain"])
async def test_a_damaged_part_fails_its_read_with_the_store_error_and_nothing_else(
    daemon_env: dict[str, str | None], tmp_path: Path, how: str
) -> None:
    spawner = Spawner(daemon_env, tmp_path)
    try:
        client = await spawner()
        bad = await client.create_session(title="damaged")
        good = await client.create_session(title="fine")
        for session, pid in ((bad, "prt_bad"), (good, "prt_good")):
            user = await put_message(client, user_message(session.id, seq=0))
            reply = await put_message(client, assistant_message(session.id, user["id"]))
            await put_part(client, text_part(session.id, user["id"], "read a.py"))
            await put_part(client, _tool_part(session.id, reply["id"], pid))
        await client.close()
        _damage(spawner.db, how, "prt_bad")  # type: ignore[arg-type]

        again = await spawner()
        with pytest.raises(RpcError) as err:
            await again.context(bad.id)
        assert err.value.code == STORE_DAMAGED, err.value
        message = err.value.message
        assert str(spawner.db) in message and "damaged" in message, message
        assert "Traceback" not in message
        if how == "plain":  # a row decoded by the daemon is named; SQLite's own reads are not
            assert "prt_bad" in message, message

        window = await again.context(good.id)  # another session: served as before
        outputs = [
            p["state"]["output"] for m in window.messages for p in m["parts"] if p["type"] == "tool"
        ]
        assert outputs == [OUTPUT]
        listed = await again.list_sessions()
        assert {s.id for s in listed.sessions} >= {bad.id, good.id}
        # Nothing was changed by the failed read: the row is still the damaged one.
        with pytest.raises(RpcError) as err:
            await again.context(bad.id)
        assert err.value.code == STORE_DAMAGED
    finally:
        await spawner.cleanup()


async def _cut_short(db: str | Path, pid: str) -> None:
    """``pid``'s stored JSON cut short (``CUT``), on either backend."""
    if isinstance(db, Path):
        _damage(db, "plain", pid)
        return
    conn = await asyncpg.connect(db)
    try:  # the row as a hand edit leaves it: no trigger of the daemon's runs
        await conn.execute("SET session_replication_role = replica")
        await conn.execute("UPDATE parts SET data = $1 WHERE id = $2", CUT, pid)
    finally:
        await conn.close()


async def test_a_damaged_part_is_the_store_error_on_either_backend(spawner: Spawner) -> None:
    client = await spawner()
    session = await client.create_session(title="damaged")
    user = await put_message(client, user_message(session.id, seq=0))
    await put_part(client, text_part(session.id, user["id"], "hello", id="prt_cut"))
    await client.close()
    await _cut_short(spawner.db, "prt_cut")

    again = await spawner()
    with pytest.raises(RpcError) as err:
        await again.context(session.id)
    assert err.value.code == STORE_DAMAGED, err.value
    assert "prt_cut" in err.value.message
    assert redact(str(spawner.db)) in err.value.message  # the store, as daemon/status shows it
    assert (await again.create_session(title="still serving")).title == "still serving"
