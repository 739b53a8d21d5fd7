"""Issue 31, item 3a: OpenCode >= 1.14's compaction tail (``tail_start_id``) is honoured.

OpenCode 1.18 keeps a recent tail verbatim after a compaction: its marker's ``compaction``
part names the first kept message as ``tail_start_id`` (snake_case, unlike the daemon's own
``tailStartID``), and the next request reads marker, summary, the tail, then what came after.
The fixture is a real OpenCode 1.18.34 run with a manual compaction whose tail starts inside
a turn (tests/fixtures/README.md). Imported (export, storage tree, ``opencode.db``) or
mirrored over the wire, the daemon's window must be what OpenCode itself sent its model.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from sidecar_client._transport import merged_env
from wire import put_message, put_part

from .conftest import Spawner

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "opencode-1.18.34"
EXPORT = json.loads((FIXTURE / "export.json").read_text())
MARKER = next(m for m in EXPORT["messages"] if any(p["type"] == "compaction" for p in m["parts"]))


def _request(name: str) -> list[dict[str, Any]]:
    """A recorded request's messages (system prompt removed), plus the reply when recorded:
    the window OpenCode would send next."""
    req = json.loads((FIXTURE / name).read_text())
    answer = [{"role": "assistant", "content": req["answer"]}] if "answer" in req else []
    messages: list[dict[str, Any]] = req["messages"]
    return [*messages, *answer]


def test_the_fixture_has_a_tail_that_starts_inside_a_turn() -> None:
    """What the tests below rely on, read from OpenCode's own storage."""
    [part] = [p for p in MARKER["parts"] if p["type"] == "compaction"]
    assert set(part) == {"type", "auto", "tail_start_id", "id", "sessionID", "messageID"}
    tail = next(m for m in EXPORT["messages"] if m["info"]["id"] == part["tail_start_id"])
    assert tail["info"]["role"] == "assistant"
    first = EXPORT["messages"].index(tail)
    assert 0 < first < EXPORT["messages"].index(MARKER)


def _storage_tree(root: Path) -> Path:
    """The export as a 1.1.x-style storage tree (``session/``, ``message/``, ``part/``)."""
    info = EXPORT["info"]
    (root / "session" / info["projectID"]).mkdir(parents=True)
    (root / "session" / info["projectID"] / f"{info['id']}.json").write_text(json.dumps(info))
    for m in EXPORT["messages"]:
        mdir = root / "message" / info["id"]
        mdir.mkdir(parents=True, exist_ok=True)
        (mdir / f"{m['info']['id']}.json").write_text(json.dumps(m["info"]))
        pdir = root / "part" / m["info"]["id"]
        pdir.mkdir(parents=True, exist_ok=True)
        for p in m["parts"]:
            (pdir / f"{p['id']}.json").write_text(json.dumps(p))
    return root


async def _import(source: Path, db: str | Path, env: dict[str, str | None]) -> dict[str, Any]:
    """``compaction-sidecar import SOURCE --db DB --json`` as a process."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "sidecar", "import", str(source), "--db", str(db), "--json"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=merged_env(env),
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    [row] = json.loads(out)
    assert isinstance(row, dict)
    return row


@pytest.mark.parametrize("kind", ["export", "storage", "sqlite"])
async def test_imported_opencode_1_18_session_is_what_opencode_sent(
    kind: str, spawner: Spawner, daemon_env: dict[str, str | None], tmp_path: Path
) -> None:
    source = {
        "export": lambda: FIXTURE / "export.json",
        "storage": lambda: _storage_tree(tmp_path / "storage"),
        "sqlite": lambda: Path(shutil.copy(FIXTURE / "opencode.db", tmp_path / "opencode.db")),
    }[kind]()
    row = await _import(source, spawner.db, daemon_env)
    assert row["sessionID"] == EXPORT["info"]["id"] and row["messages"] == 26
    client = await spawner()
    ctx = await client.request(
        "session/context", {"sessionID": row["sessionID"], "format": "openai"}
    )
    assert ctx["messages"] == _request("last-request.json")
    parts = await client.request(
        "session/context", {"sessionID": row["sessionID"], "format": "parts"}
    )
    assert parts["messages"][0]["info"]["id"] == MARKER["info"]["id"], "it starts at the marker"
    # A fork remaps the tail to its own copy of the message.
    fork = (await client.fork(row["sessionID"])).id
    ctx = await client.request("session/context", {"sessionID": fork, "format": "openai"})
    assert ctx["messages"] == _request("last-request.json")


async def test_mirrored_opencode_1_18_session_is_what_opencode_sent(spawner: Spawner) -> None:
    """Written as a plugin mirrors it (each message, then its parts), the window before the
    first step after the compaction, and after the last step, are OpenCode's requests."""
    client = await spawner()
    sid = (await client.create_session()).id
    messages = EXPORT["messages"]
    marker_at = messages.index(MARKER)
    # OpenCode's first step after the compaction answers the user message after the summary.
    first_after = next(
        i for i, m in enumerate(messages) if i > marker_at + 1 and m["info"]["role"] == "user"
    )
    for i, m in enumerate(messages):
        await put_message(client, {**m["info"], "sessionID": sid})
        for p in m["parts"]:
            await put_part(client, {**p, "sessionID": sid})
        if i == first_after:
            ctx = await client.request("session/context", {"sessionID": sid, "format": "openai"})
            assert ctx["messages"] == _request("next-request.json")
    await client.request("session/idle", {"sessionID": sid})
    ctx = await client.request("session/context", {"sessionID": sid, "format": "openai"})
    assert ctx["messages"] == _request("last-request.json")
