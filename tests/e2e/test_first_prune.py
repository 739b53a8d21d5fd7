"""Issue 19, item 3: the first prune of a long unpruned session keeps its client connected.

A long history written without a finished turn (as an import of a long session gives) is
pruned at once when the next turn finishes. The notification of a pruned part must not
carry the output it cleared, and that one prune must not send its subscribers a burst that
grows with the outputs: here the daemon's ``server.maxOutgoingBytes`` is 256 KiB while the
pruned outputs total 2 MB. ``bench/first_prune.py`` runs a 100k-message session.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sidecar_client import Client
from wire import stored

from .conftest import Spawner

TURNS = 500
OUTPUT = "o" * 4000  # 1,000 tokens each: all but the newest ~40 are pruned
LIMITS = {"server": {"maxOutgoingBytes": 256 * 1024}}


def _messages(sid: str, turn: int, finish: str | None) -> list[tuple[str, dict[str, Any]]]:
    created = 1_700_000_000_000 + 10 * turn
    user, assistant = f"msg_u{turn:06d}", f"msg_a{turn:06d}"
    model = {"providerID": "test", "modelID": "test-model"}
    out: list[tuple[str, dict[str, Any]]] = [
        (
            "message/update",
            {
                "message": {
                    "id": user,
                    "sessionID": sid,
                    "role": "user",
                    "time": {"created": created},
                    "model": model,
                }
            },
        ),
        (
            "message/update",
            {
                "message": {
                    "id": assistant,
                    "sessionID": sid,
                    "role": "assistant",
                    "parentID": user,
                    "time": {"created": created + 1},
                    **model,
                }
            },
        ),
        (
            "part/update",
            {
                "part": {
                    "id": f"prt_t{turn:06d}",
                    "sessionID": sid,
                    "messageID": assistant,
                    "type": "tool",
                    "callID": f"call-{turn}",
                    "tool": "bash",
                    "state": {
                        "status": "completed",
                        "input": {"command": "ls"},
                        "output": OUTPUT,
                        "title": "ls",
                        "metadata": {},
                        "time": {"start": created, "end": created + 1},
                    },
                }
            },
        ),
    ]
    if finish is not None:
        done = {
            "id": assistant,
            "sessionID": sid,
            "role": "assistant",
            "parentID": user,
            "time": {"created": created + 1, "completed": created + 2},
            "finish": finish,
            **model,
        }
        out.append(("message/update", {"message": done}))
    return out


async def _write_history(client: Client, sid: str) -> None:
    # 20 turns in flight: their own part/updated echoes (86 KB) stay within the lowered
    # maxOutgoingBytes however the store batches its commits.
    for first in range(0, TURNS, 20):
        calls = [
            client.call(method, params)
            for turn in range(first, min(first + 20, TURNS))
            for method, params in _messages(sid, turn, None)
        ]
        for call in calls:
            await call


async def test_first_prune_of_a_long_session_keeps_its_client_connected(
    spawner: Spawner, tmp_path: Path
) -> None:
    config = tmp_path / "limits.json"
    config.write_text(json.dumps(LIMITS))
    client = await spawner(extra_args=["--config", str(config)])
    sid = (await client.create_session()).id
    await _write_history(client, sid)
    # The next turn finishes: its prune marks nearly the whole history at once.
    for method, params in _messages(sid, TURNS, "stop"):
        await client.request(method, params)
    await client.request("session/idle", {"sessionID": sid})
    pruned = client.notifications("session/pruned")
    ids = [i for event in pruned for i in event["partIDs"]]
    assert len(ids) > TURNS - 60 and len(set(ids)) == len(ids)
    assert sum(e["tokensSaved"] for e in pruned) == 1000 * len(ids)
    stamps = {e["compacted"] for e in pruned}
    assert len(stamps) == 1 and isinstance(stamps.pop(), int)
    # No notification carries an output the prune cleared: the parts' own part/updated
    # came from their writes, none from the prune.
    marked = [
        n["part"]["id"]
        for n in client.notifications("part/updated")
        if n["part"].get("state", {}).get("time", {}).get("compacted")
    ]
    assert marked == []
    # Still connected and served; the outputs are stored, marked compacted.
    page = await stored(client, sid, limit=2)  # the oldest turn
    (tool,) = [p for m in page.messages for p in m.parts if p["type"] == "tool"]
    assert tool["id"] in ids
    assert tool["state"]["output"] == OUTPUT and tool["state"]["time"]["compacted"]
