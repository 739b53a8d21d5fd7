"""The client library's own contract, against a scripted peer and against the real daemon.

The scripted peer (a unix socket server the test drives frame by frame) makes the client's
side observable: what it writes on cancellation, how it matches out-of-order replies, how it
answers requests from the daemon.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from sidecar_client import Client, ConnectionClosed, RpcError, connect

from sidecar.model.session import Session
from sidecar.protocol.framing import StreamFrames

from .builders import rpc_frame


class Peer:
    """The far end of one client connection, scripted by the test."""

    def __init__(self) -> None:
        self.accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
            asyncio.get_running_loop().create_future()
        )
        self.frames: StreamFrames
        self.writer: asyncio.StreamWriter

    async def recv(self) -> dict[str, Any]:
        body = await asyncio.wait_for(self.frames.next(), 10)
        assert body is not None, "client closed the connection"
        message: dict[str, Any] = json.loads(body)
        return message

    def send(self, message: dict[str, Any]) -> None:
        self.writer.write(rpc_frame(json.dumps({"jsonrpc": "2.0", **message}).encode()))


@pytest_asyncio.fixture(loop_scope="session")
async def peer_and_client() -> AsyncIterator[tuple[Peer, Client]]:
    where = Path(tempfile.mkdtemp(prefix="sc-peer-"))
    peer = Peer()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer.accepted.set_result((reader, writer))

    server = await asyncio.start_unix_server(accept, str(where / "peer.sock"))
    try:
        client = await connect(f"unix:{where / 'peer.sock'}", initialize=False)
        reader, peer.writer = await peer.accepted
        peer.frames = StreamFrames(reader)
        try:
            yield peer, client
        finally:
            await client.close()
            peer.writer.close()
    finally:
        server.close()
        await server.wait_closed()
        shutil.rmtree(where, ignore_errors=True)


# -- against the scripted peer -----------------------------------------------------------------


async def test_replies_are_matched_by_id_in_any_order(
    peer_and_client: tuple[Peer, Client],
) -> None:
    peer, client = peer_and_client
    tasks = [asyncio.create_task(client.request("echo", {"n": n})) for n in range(5)]
    requests = [await peer.recv() for _ in range(5)]
    assert all(isinstance(r["id"], int) for r in requests)
    assert len({r["id"] for r in requests}) == 5
    for r in reversed(requests):
        peer.send({"id": r["id"], "result": {"n": r["params"]["n"]}})
    assert [await t for t in tasks] == [{"n": n} for n in range(5)]
    assert client.in_flight == 0


async def test_request_without_params_omits_the_key(peer_and_client: tuple[Peer, Client]) -> None:
    peer, client = peer_and_client
    task = asyncio.create_task(client.request("session/list"))
    request = await peer.recv()
    assert "params" not in request and request["method"] == "session/list"
    peer.send({"id": request["id"], "result": None})
    assert await task is None


async def test_result_type_decodes_the_result(peer_and_client: tuple[Peer, Client]) -> None:
    peer, client = peer_and_client
    task = asyncio.create_task(client.get_session("ses_1"))
    request = await peer.recv()
    assert request["params"] == {"sessionID": "ses_1"}
    peer.send({"id": request["id"], "result": {"id": "ses_1", "title": "t", "parentID": "p"}})
    session = await task
    assert isinstance(session, Session) and session.parent_id == "p"


async def test_error_reply_raises_rpc_error(peer_and_client: tuple[Peer, Client]) -> None:
    peer, client = peer_and_client
    task = asyncio.create_task(client.request("session/get", {"sessionID": "x"}))
    request = await peer.recv()
    peer.send({"id": request["id"], "error": {"code": -32040, "message": "nope", "data": [1]}})
    with pytest.raises(RpcError) as err:
        await task
    assert (err.value.code, err.value.message, err.value.data) == (-32040, "nope", [1])
    assert err.value.method == "session/get" and err.value.request_id == request["id"]


async def test_junk_between_frames_is_reported_and_reading_resumes(
    peer_and_client: tuple[Peer, Client],
) -> None:
    """The client reads with the daemon's own frame parser, so it resynchronises too."""
    peer, client = peer_and_client
    peer.writer.write(b"garbage\r\n\r\n")
    status = {"sessionID": "s", "status": "idle"}
    peer.send({"method": "session/status", "params": status})
    assert await client.wait_for("session/status") == status
    assert len(client.protocol_errors) == 1
    assert "garbage" in client.protocol_errors[0]
    assert not client.closed


async def test_stream_ending_inside_a_frame_closes_with_the_reason(
    peer_and_client: tuple[Peer, Client],
) -> None:
    peer, client = peer_and_client
    task = asyncio.create_task(client.request("session/list", {}))
    await peer.recv()
    peer.writer.write(b'Content-Length: 50\r\n\r\n{"jsonrpc": "2.0"')
    peer.writer.close()
    with pytest.raises(ConnectionClosed, match="inside a 50-byte frame"):
        await task


async def test_cancelling_the_awaiting_task_sends_cancel_request(
    peer_and_client: tuple[Peer, Client],
) -> None:
    peer, client = peer_and_client
    task = asyncio.create_task(client.request("slow/thing", {}))
    request = await peer.recv()
    assert client.in_flight == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    cancel = await peer.recv()
    assert cancel == {
        "jsonrpc": "2.0",
        "method": "$/cancelRequest",
        "params": {"id": request["id"]},
    }
    assert client.in_flight == 0
    # A late reply to the cancelled request is ignored; the connection keeps working.
    peer.send({"id": request["id"], "result": "late"})
    follow = asyncio.create_task(client.request("next", {}))
    nxt = await peer.recv()
    peer.send({"id": nxt["id"], "result": "ok"})
    assert await follow == "ok"
    assert client.protocol_errors == []


async def test_cancel_by_request_id(peer_and_client: tuple[Peer, Client]) -> None:
    peer, client = peer_and_client
    call = client.call("slow/thing", {})
    await peer.recv()
    client.cancel(call.id)
    assert (await peer.recv())["params"] == {"id": call.id}
    with pytest.raises(asyncio.CancelledError):
        await call


async def test_request_timeout_cancels_it(peer_and_client: tuple[Peer, Client]) -> None:
    peer, client = peer_and_client
    call = client.call("slow/thing", {}, timeout=0.01)
    request = await peer.recv()
    with pytest.raises(TimeoutError):
        await call
    assert (await peer.recv()) == {
        "jsonrpc": "2.0",
        "method": "$/cancelRequest",
        "params": {"id": request["id"]},
    }


async def test_daemon_requests_are_answered_by_handlers(
    peer_and_client: tuple[Peer, Client],
) -> None:
    peer, client = peer_and_client

    async def ok(params: Any) -> Any:
        return {"context": [params["sessionID"]]}

    async def refuses(params: Any) -> Any:
        raise RpcError(-32044, "busy", {"retry": True})

    async def breaks(params: Any) -> Any:
        raise ValueError("boom")

    client.on_request("compaction/compacting", ok)
    client.on_request("summarizer/complete", refuses)
    client.on_request("broken", breaks)

    peer.send({"id": "a", "method": "compaction/compacting", "params": {"sessionID": "s1"}})
    assert await peer.recv() == {"jsonrpc": "2.0", "id": "a", "result": {"context": ["s1"]}}

    peer.send({"id": 7, "method": "summarizer/complete", "params": {}})
    reply = await peer.recv()
    assert reply["id"] == 7
    assert reply["error"] == {"code": -32044, "message": "busy", "data": {"retry": True}}

    peer.send({"id": "b", "method": "broken", "params": {}})
    reply = await peer.recv()
    assert reply["error"]["code"] == -32603 and "boom" in reply["error"]["message"]

    peer.send({"id": "c", "method": "nobody/handles", "params": {}})
    reply = await peer.recv()
    assert reply["error"]["code"] == -32601

    assert [m for m, _ in client.requests_received] == [
        "compaction/compacting",
        "summarizer/complete",
        "broken",
        "nobody/handles",
    ]


async def test_wait_for_sees_earlier_and_later_notifications_once(
    peer_and_client: tuple[Peer, Client],
) -> None:
    peer, client = peer_and_client
    peer.send({"method": "part/updated", "params": {"n": 1}})
    peer.send({"method": "part/updated", "params": {"n": 2}})
    # Let both arrive before anyone waits: a reply sent after them is a barrier.
    task = asyncio.create_task(client.request("barrier"))
    peer.send({"id": (await peer.recv())["id"], "result": None})
    await task

    assert await client.wait_for("part/updated", lambda p: p["n"] == 2) == {"n": 2}
    assert await client.wait_for("part/updated") == {"n": 1}
    later = asyncio.create_task(client.wait_for("part/updated", lambda p: p["n"] > 2))
    peer.send({"method": "part/updated", "params": {"n": 3}})
    assert await later == {"n": 3}
    assert client.notifications("part/updated") == [{"n": 1}, {"n": 2}, {"n": 3}]
    with pytest.raises(TimeoutError):
        await client.wait_for("part/updated", timeout=0.01)  # all three consumed


async def test_wait_for_error_gets_id_null_errors(peer_and_client: tuple[Peer, Client]) -> None:
    peer, client = peer_and_client
    peer.send({"id": None, "error": {"code": -32700, "message": "bad header"}})
    err = await client.wait_for_error(lambda e: e.code == -32700)
    assert err.message == "bad header" and err.request_id is None
    assert client.unsolicited_errors() == [err]


async def test_peer_going_away_fails_waiters_and_requests(
    peer_and_client: tuple[Peer, Client],
) -> None:
    peer, client = peer_and_client
    waiting = asyncio.create_task(client.wait_for("never/sent"))
    pending = asyncio.create_task(client.request("never/answered"))
    await peer.recv()
    peer.writer.close()
    with pytest.raises(ConnectionClosed):
        await pending
    with pytest.raises(ConnectionClosed):
        await waiting
    assert client.closed
    with pytest.raises(ConnectionClosed):
        await client.request("after/close")


# -- against the real daemon -------------------------------------------------------------------


async def test_many_concurrent_requests_to_the_daemon(shared: Client) -> None:
    sessions = await asyncio.gather(*(shared.create_session(title=f"c{i}") for i in range(50)))
    fetched = await asyncio.gather(*(shared.get_session(s.id) for s in sessions))
    assert [f.title for f in fetched] == [f"c{i}" for i in range(50)]
    assert shared.in_flight == 0


async def test_daemon_survives_cancel_requests(shared: Client) -> None:
    shared.notify("$/cancelRequest", {"id": 123456})  # for nothing in flight
    task = asyncio.create_task(shared.list_sessions())
    task.cancel()  # cancelled before or after sending: either way the daemon stays healthy
    with pytest.raises(asyncio.CancelledError):
        await task
    assert shared.in_flight == 0
    assert isinstance((await shared.list_sessions()).sessions, list)
