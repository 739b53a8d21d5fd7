"""Issue 19, item 1: requests pending at end of input are answered, not dropped.

``serve < requests > replies`` (stdin and stdout each a regular file or a pipe), with or
without ``shutdown`` and ``exit`` at the end, and ``cat requests | connect`` against a shared
daemon: every request read before end of input (or before ``exit``) gets its one reply, and
every acknowledged write is stored. ``bench/end_of_input.py`` runs the same matrix repeatedly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sidecar_client._transport import merged_env

from . import batch
from .conftest import SocketDaemon

GUARD = 120.0  # seconds: a hung daemon fails the test instead of blocking the suite


@pytest.mark.parametrize("stdout_kind", ["file", "pipe"])
@pytest.mark.parametrize("stdin_kind", ["file", "pipe"])
@pytest.mark.parametrize("ending", batch.ENDINGS)
def test_serve_answers_every_request_read_before_end_of_input(
    daemon_env: dict[str, str | None],
    tmp_path: Path,
    ending: str,
    stdin_kind: str,
    stdout_kind: str,
) -> None:
    db, code, err, problems = batch.serve_requests(
        tmp_path,
        ending,
        stdin_kind=stdin_kind,
        stdout_kind=stdout_kind,
        env=merged_env(daemon_env),
        timeout=GUARD,
    )
    assert code == 0, err.decode()
    assert b"Traceback" not in err, err.decode()
    assert problems == []
    assert batch.stored(db) == (batch.WRITES, batch.WRITES)


@pytest.mark.parametrize("ending", batch.ENDINGS)
async def test_connect_relays_every_reply_after_stdin_ends(
    unix_daemon: SocketDaemon,
    daemon_env: dict[str, str | None],
    tmp_path: Path,
    ending: str,
) -> None:
    session_id = f"ses_connect_{ending}"
    code, err, problems = batch.run_requests(
        batch.connect_command(unix_daemon.address.removeprefix("unix:")),
        ending,
        session_id,
        where=tmp_path,
        env=merged_env(daemon_env),
        timeout=GUARD,
    )
    assert code == 0, err.decode()
    assert problems == []
    # The shared daemon keeps serving: another client reads what the batch stored.
    reader = await unix_daemon.connect()
    messages = await reader.request("session/messages", {"sessionID": session_id})
    assert len(messages["messages"]) == batch.WRITES
    assert all(len(m["parts"]) == 1 for m in messages["messages"])


@pytest.mark.parametrize("stdin_kind", ["file", "pipe"])
def test_input_ending_inside_a_frame_is_reported_once(
    daemon_env: dict[str, str | None], tmp_path: Path, stdin_kind: str
) -> None:
    payload, _, _ = batch.requests("eof")
    cut = payload.index(b"Content-Length", 200)  # initialize and initialized, then a cut frame
    code, out, err = batch.run_batch(
        batch.serve_command(tmp_path / "s.db"),
        payload[: cut + 40],
        stdin_kind=stdin_kind,
        stdout_kind="pipe",
        where=tmp_path,
        env=merged_env(daemon_env),
        timeout=GUARD,
    )
    assert code == 0, err.decode()
    replies = batch.frames(out)
    # JSON-RPC does not order replies to different requests: the cut frame's -32700 may be
    # written while initialize is still being answered.
    (init,) = [r for r in replies if r.get("id") == 1]
    assert "result" in init
    errors = [r for r in replies if "error" in r]
    assert [(e["id"], e["error"]["code"]) for e in errors] == [(None, -32700)]
    assert "input ended inside" in errors[0]["error"]["message"]
