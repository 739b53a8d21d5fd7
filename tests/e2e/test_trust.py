"""Issue 9 "trust the store": one e2e test (or more) per finding, over the real daemon.

Each test names its finding (``f1`` … ``f11``). They assert the required behaviour of
DESIGN §4 "Guarantees" and §7, as the issue states it: writes from one connection take effect
in the order sent; a bad write is rejected before it joins a batch and an error reply means
nothing of it was stored; ids are never silently re-homed; input nested past
``server.maxDepth`` is refused at decode time and stored deep data never breaks a read;
framing resynchronises; client mistakes are never -32603; no client can disable the daemon;
a stalled reader is cut off at ``server.maxOutgoingBytes``; reads are paged and capped at
``server.maxReplyBytes`` (-32047).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from client_writer import CLIENT_WRITER, HeldWriter
from pgcluster import execute
from sidecar_client import Call, Client, ConnectionClosed, RpcError
from wire import put_message, put_part, stored

from sidecar.model.ids import new_id

from .builders import assistant_message, rpc_frame, text_part, user_message
from .conftest import SocketDaemon, Spawner

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
UNKNOWN_MESSAGE = -32041
CONFLICT = -32043
REPLY_TOO_LARGE = -32047

CLIENT_MISTAKE = {PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS}


#: A reply the daemon owes is late after this long (the default 30 s would make each
#: missing reply on today's code cost half a minute).
REPLY_TIMEOUT = 10.0


#: The limits of the ``limited`` daemon (its --config file).
LIMITS = {"server": {"maxDepth": 16, "maxReplyBytes": 64 * 1024}}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def limited(
    daemon_env: dict[str, str | None], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Client]:
    """One stdio daemon started with ``LIMITS``, shared by the module's tests that send only
    well-framed requests (so a failure cannot spill into the next test); its stderr is
    checked for tracebacks."""
    where = tmp_path_factory.mktemp("limited")
    (where / "workspace.json").write_text(json.dumps(LIMITS))
    s = Spawner(daemon_env, where)
    try:
        yield await s(extra_args=["--config", str(where / "workspace.json")])
    finally:
        await s.cleanup()


@pytest.fixture(autouse=True)
def short_timeouts(request: pytest.FixtureRequest) -> None:
    for name in ("shared", "client", "limited"):
        if name in request.fixturenames:
            request.getfixturevalue(name).default_timeout = REPLY_TIMEOUT


# -- helpers ---------------------------------------------------------------------------------


def request_frame(request_id: int, method: str, params: Any) -> bytes:
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return rpc_frame(json.dumps(body).encode())


def raw_request(request_id: int, method: str, params_json: str) -> bytes:
    """A request body around params given as JSON text (too deep for ``json.dumps``)."""
    head = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method})
    return (head[:-1] + ',"params":' + params_json + "}").encode()


def nested(depth: int, leaf: Any = 1) -> Any:
    """``{"a": {"a": ... leaf}}`` with ``depth`` objects."""
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def nested_json(depth: int) -> str:
    """The JSON text of ``nested(depth)``, built without recursion (json.dumps would hit
    Python's recursion limit for the deepest cases)."""
    return '{"a":' * depth + "1" + "}" * depth


async def outcome(call: Call[Any]) -> Any:
    """The call's result, or its ``RpcError`` (as a value, so lists of outcomes compare)."""
    try:
        return await call
    except RpcError as exc:
        return exc


async def stored_ids(client: Client, session_id: str) -> list[tuple[str, list[str]]]:
    page = await stored(client, session_id)
    assert page.next_cursor is None
    return [(m.info["id"], [p["id"] for p in m.parts]) for m in page.messages]


async def context_ids(client: Client, session_id: str) -> list[tuple[str, list[str]]]:
    ctx = await client.context(session_id, "parts")
    return [(m["info"]["id"], [p["id"] for p in m["parts"]]) for m in ctx.messages]


async def assert_views_agree(client: Client, session_id: str) -> list[tuple[str, list[str]]]:
    """``session/messages`` and ``session/context`` show the same messages and parts."""
    stored = await stored_ids(client, session_id)
    assert await context_ids(client, session_id) == stored
    return stored


async def message_with_id(client: Client, session_id: str, **fields: Any) -> str:
    message_id = new_id("msg")
    await put_message(client, user_message(session_id, id=message_id, **fields))
    return message_id


async def exactly_one_reply(client: Client, call: Call[Any]) -> RpcError | Any:
    """The one answer to a raw frame sent under ``call.id``: a reply to that id, an
    ``id: null`` error, or a reply to a string id (the daemon's reading of an id that is not
    valid UTF-8; our own requests use integer ids). Round trips, not sleeps, give it time;
    two more after the first answer show there was no second."""
    seen: list[dict[str, Any]] = []
    dispatch = client._dispatch

    def spy(body: bytes) -> None:
        try:
            msg = json.loads(body)
        except ValueError:
            msg = None
        if isinstance(msg, dict) and ("result" in msg or "error" in msg):
            rid = msg.get("id")
            if rid == call.id or rid is None or isinstance(rid, str):
                seen.append(msg)
        dispatch(body)

    client.__dict__["_dispatch"] = spy
    try:
        async with asyncio.timeout(REPLY_TIMEOUT):
            while not seen:
                await client.request("session/list", {"limit": 1})
        await client.request("session/list", {"limit": 1})
        await client.request("session/list", {"limit": 1})
    except TimeoutError:
        raise AssertionError("the frame got no reply at all") from None
    finally:
        del client.__dict__["_dispatch"]
        call.cancel()
    assert len(seen) == 1, f"{len(seen)} replies to one frame: {seen}"
    msg = seen[0]
    if "result" in msg:
        return msg["result"]
    error = msg["error"]
    return RpcError(error["code"], error.get("message", ""), request_id=msg.get("id"))


def assert_client_mistake(err: Any, field: str | None = None) -> RpcError:
    assert isinstance(err, RpcError), f"expected an error reply, got {err!r}"
    assert err.code != INTERNAL_ERROR, f"client mistake answered -32603: {err.message}"
    assert err.code in CLIENT_MISTAKE, err
    if field is not None and err.code == INVALID_PARAMS:
        assert field in err.message, err.message
    return err


def assert_no_traceback(client: Client) -> None:
    log = client.stderr()
    assert "Traceback" not in log, log[-3000:]


# -- f1: writes of one connection take effect in the order sent ------------------------------


async def test_f1_part_pipelined_after_its_message_succeeds(shared: Client) -> None:
    session = await shared.create_session()
    for round_ in range(5):
        message_id = new_id("msg")
        first: Call[Any] = shared.call(
            "message/update", {"message": user_message(session.id, id=message_id)}
        )
        second: Call[Any] = shared.call(
            "part/update", {"part": text_part(session.id, message_id, f"round {round_}")}
        )
        message = await outcome(first)
        part = await outcome(second)
        assert not isinstance(message, RpcError), message
        assert not isinstance(part, RpcError), f"part overtook its message: {part}"
        assert part["messageID"] == message_id
    stored = await assert_views_agree(shared, session.id)
    assert len(stored) == 5 and all(len(parts) == 1 for _, parts in stored)


async def test_f1_requests_pipelined_behind_initialize_wait_for_it(spawner: Spawner) -> None:
    """A stdin holding ``initialize`` and the requests after it (a script, a file): they wait
    for ``initialize`` instead of getting -32002; a failed ``initialize`` leaves them -32002."""
    client = await spawner(initialize=False)
    first, second, third = (client.reserve_call() for _ in range(3))
    client.send_raw(
        request_frame(first.id, "initialize", {"processId": None, "capabilities": {}})
        + request_frame(second.id, "session/create", {"title": "behind initialize"})
        + request_frame(third.id, "session/list", {})
    )
    assert "capabilities" in await first
    assert (await second)["title"] == "behind initialize"
    assert [s["title"] for s in (await third)["sessions"]] == ["behind initialize"]
    other = await spawner(initialize=False)
    bad, behind = other.reserve_call(), other.reserve_call()
    other.send_raw(
        request_frame(bad.id, "initialize", {"initializationOptions": {"server": {}}})
        + request_frame(behind.id, "session/list", {})
    )
    assert isinstance(await outcome(bad), RpcError)
    refused = await outcome(behind)
    assert isinstance(refused, RpcError) and refused.code == -32002


async def test_f1_message_pipelined_after_session_create_succeeds(shared: Client) -> None:
    for _ in range(5):
        session_id = new_id("ses")
        message_id = new_id("msg")
        calls: list[Call[Any]] = [
            shared.call("session/create", {"id": session_id}),
            shared.call("message/update", {"message": user_message(session_id, id=message_id)}),
            shared.call("part/update", {"part": text_part(session_id, message_id, "hi")}),
        ]
        results = [await outcome(c) for c in calls]
        assert not any(isinstance(r, RpcError) for r in results), results
        assert [m for m, _ in await stored_ids(shared, session_id)] == [message_id]


async def test_f1_removes_pipelined_after_writes_take_effect_in_order(shared: Client) -> None:
    session = await shared.create_session()
    message_id = await message_with_id(shared, session.id)
    # part/update then part/remove of that part: the remove must see the part.
    part_id = new_id("prt")
    calls: list[Call[Any]] = [
        shared.call("part/update", {"part": text_part(session.id, message_id, "x", id=part_id)}),
        shared.call(
            "part/remove", {"sessionID": session.id, "messageID": message_id, "partID": part_id}
        ),
    ]
    results = [await outcome(c) for c in calls]
    assert not any(isinstance(r, RpcError) for r in results), results
    assert await stored_ids(shared, session.id) == [(message_id, [])]

    # part/update then message/remove: the message goes, with the part written before it.
    calls = [
        shared.call("part/update", {"part": text_part(session.id, message_id, "y")}),
        shared.call("message/remove", {"sessionID": session.id, "messageID": message_id}),
    ]
    results = [await outcome(c) for c in calls]
    assert not any(isinstance(r, RpcError) for r in results), results
    assert await assert_views_agree(shared, session.id) == []

    # message/update, part/update, message/update (a replace) in one go: all in order.
    message_id = new_id("msg")
    calls = [
        shared.call("message/update", {"message": user_message(session.id, id=message_id)}),
        shared.call("part/update", {"part": text_part(session.id, message_id, "z")}),
        shared.call("message/update", {"message": user_message(session.id, id=message_id, seq=2)}),
    ]
    results = [await outcome(c) for c in calls]
    assert not any(isinstance(r, RpcError) for r in results), results
    page = await stored(shared, session.id)
    assert [m.info.get("seq") for m in page.messages] == [2]
    assert [p["text"] for p in page.messages[0].parts] == ["z"]


# -- f2: a bad write is rejected alone, and an error means nothing was stored ----------------

BAD_CREATED = [2**63, 2**63 + 1, 2**64, 10**30, -1, 1.5, 1e300]


@pytest.mark.parametrize("created", BAD_CREATED, ids=str)
async def test_f2_out_of_range_created_is_32602_and_batch_mates_succeed(
    shared: Client, created: object
) -> None:
    # One read: valid parts, the bad message in the middle, more valid parts.
    results = await _one_bad_message_among_parts(shared, 20, 10, created)
    assert not any(isinstance(r, RpcError) for r in results), [
        r for r in results if isinstance(r, RpcError)
    ]


async def _one_bad_message_among_parts(
    shared: Client, count: int, bad_index: int, created: object
) -> list[Any]:
    """Sends ``count`` writes in one read, all parts but a message with time.created ``created``
    at ``bad_index``; checks that the bad one alone is -32602 and that both views hold exactly
    the good parts. Returns the other writes' outcomes."""
    session = await shared.create_session()
    anchor = await message_with_id(shared, session.id)
    calls: list[Call[Any]] = []
    frames: list[bytes] = []
    bad_id = new_id("msg")
    for i in range(count):
        call: Call[Any] = shared.reserve_call()
        calls.append(call)
        if i == bad_index:
            bad = user_message(session.id, id=bad_id, time={"created": created})
            frames.append(request_frame(call.id, "message/update", {"message": bad}))
        else:
            part = text_part(session.id, anchor, f"p{i}", id=new_id("prt"))
            frames.append(request_frame(call.id, "part/update", {"part": part}))
    shared.send_raw(b"".join(frames))
    results = [await outcome(c) for c in calls]
    err = results.pop(bad_index)
    assert isinstance(err, RpcError) and err.code == INVALID_PARAMS, err
    assert "$.message.time.created" in err.message
    good = [r for r in results if not isinstance(r, RpcError)]
    stored = await assert_views_agree(shared, session.id)
    assert stored == [(anchor, sorted(r["id"] for r in good))]
    assert bad_id not in {m for m, _ in stored}
    return results


async def test_f2_bad_write_in_a_large_off_loop_batch_fails_alone(shared: Client) -> None:
    """More than 256 rows in one read takes the off-loop commit path."""
    results = await _one_bad_message_among_parts(shared, 600, 300, 2**63)
    failed = [r for r in results if isinstance(r, RpcError)]
    assert failed == [], f"{len(failed)} good writes failed, e.g. {failed[:1]}"


async def test_f2_bad_write_does_not_fail_another_connections_writes(
    daemon_env: dict[str, str | None], tmp_path: Path
) -> None:
    async with unix_daemon_with(daemon_env) as daemon:
        good, evil = await daemon.connect(), await daemon.connect()
        session = await good.create_session()
        anchor = await message_with_id(good, session.id)
        for _ in range(3):
            good_calls: list[Call[Any]] = [
                good.call("part/update", {"part": text_part(session.id, anchor, f"g{i}")})
                for i in range(300)
            ]
            bad = user_message(session.id, id=new_id("msg"), time={"created": 2**63})
            bad_call: Call[Any] = evil.call("message/update", {"message": bad})
            assert_client_mistake(await outcome(bad_call), "$.message.time.created")
            results = [await outcome(c) for c in good_calls]
            failed = [r for r in results if isinstance(r, RpcError)]
            assert failed == [], f"{len(failed)} writes of another client failed: {failed[:1]}"
        stored = await assert_views_agree(good, session.id)
        assert len(stored) == 1 and len(stored[0][1]) == 900


# -- f3: ids are never silently re-homed -----------------------------------------------------


async def test_f3_message_id_of_another_session_is_a_conflict(shared: Client) -> None:
    first, second = await shared.create_session(), await shared.create_session()
    message_id = await message_with_id(shared, first.id, mark="original")
    with pytest.raises(RpcError) as err:
        await put_message(shared, user_message(second.id, id=message_id, mark="stolen"))
    assert err.value.code == CONFLICT and message_id in err.value.message
    await shared.request("session/list", {"limit": 1})  # notifications precede this reply
    stolen = [
        n for n in shared.notifications("message/updated") if n["message"].get("mark") == "stolen"
    ]
    assert stolen == []
    page = await stored(shared, first.id)
    assert [(m.info["id"], m.info["mark"]) for m in page.messages] == [(message_id, "original")]
    assert await stored_ids(shared, second.id) == []


async def _steal_a_part(shared: Client, owner: tuple[str, str], other: tuple[str, str]) -> str:
    """Writes a part to ``owner`` (session, message), then the same part id to ``other``:
    checks that the second write is a conflict naming the id, and returns the id."""
    part_id = new_id("prt")
    await put_part(shared, text_part(*owner, "original", id=part_id))
    with pytest.raises(RpcError) as err:
        await put_part(shared, text_part(*other, "stolen", id=part_id))
    assert err.value.code == CONFLICT and part_id in err.value.message
    return part_id


async def test_f3_part_id_of_another_message_is_a_conflict(shared: Client) -> None:
    session = await shared.create_session()
    owner = await message_with_id(shared, session.id)
    other = await message_with_id(shared, session.id)
    await _steal_a_part(shared, (session.id, owner), (session.id, other))
    await shared.request("session/list", {"limit": 1})
    assert [
        n for n in shared.notifications("part/updated") if n["part"].get("text") == "stolen"
    ] == []
    page = await stored(shared, session.id)
    assert [(m.info["id"], [p["text"] for p in m.parts]) for m in page.messages] == [
        (owner, ["original"]),
        (other, []),
    ]


async def test_f3_part_id_of_another_sessions_message_is_a_conflict(shared: Client) -> None:
    first, second = await shared.create_session(), await shared.create_session()
    owner = await message_with_id(shared, first.id)
    other = await message_with_id(shared, second.id)
    part_id = await _steal_a_part(shared, (first.id, owner), (second.id, other))
    assert await assert_views_agree(shared, first.id) == [(owner, [part_id])]
    assert await assert_views_agree(shared, second.id) == [(other, [])]


async def test_f3_part_session_differing_from_its_message_is_refused(shared: Client) -> None:
    home, elsewhere = await shared.create_session(), await shared.create_session()
    message_id = await message_with_id(shared, home.id)
    with pytest.raises(RpcError) as err:
        await put_part(shared, text_part(elsewhere.id, message_id, "misfiled"))
    assert err.value.code in {INVALID_PARAMS, CONFLICT}, err.value
    if err.value.code == INVALID_PARAMS:
        assert "$.part.sessionID" in err.value.message
    assert await assert_views_agree(shared, home.id) == [(message_id, [])]
    assert await assert_views_agree(shared, elsewhere.id) == []


# -- f4: over-deep input is refused; stored deep data never breaks a read --------------------


def deep_part_frame(request_id: int, session_id: str, message_id: str, depth: int) -> bytes:
    head = {"sessionID": session_id, "messageID": message_id, "type": "text", "text": "deep"}
    part = json.dumps(head)[:-1] + ',"metadata":' + nested_json(depth) + "}"
    return rpc_frame(raw_request(request_id, "part/update", '{"part":' + part + "}"))


async def test_f4_part_metadata_nested_past_the_limit_is_32602(client: Client) -> None:
    session = await client.create_session()
    message_id = await message_with_id(client, session.id)
    for depth in (980, 70, 5000):
        call: Call[Any] = client.reserve_call()
        client.send_raw(deep_part_frame(call.id, session.id, message_id, depth))
        err = await outcome(call)
        assert isinstance(err, RpcError) and err.code == INVALID_PARAMS, (depth, err)
        assert "$.part.metadata" in err.message
        assert await assert_views_agree(client, session.id) == [(message_id, [])]
        pruned = await outcome(client.call("session/prune", {"sessionID": session.id}))
        assert not isinstance(pruned, RpcError), pruned


async def test_f4_part_nested_within_the_default_limit_is_stored(shared: Client) -> None:
    session = await shared.create_session()
    message_id = await message_with_id(shared, session.id)
    part = await put_part(shared, text_part(session.id, message_id, "fine", metadata=nested(40)))
    page = await stored(shared, session.id)
    assert page.messages[0].parts == [part]
    assert page.messages[0].parts[0]["metadata"] == nested(40)


async def test_f4_depth_limit_is_config_server_max_depth(limited: Client) -> None:
    client = limited
    assert (await client.request("config/get"))["server"]["maxDepth"] == 16
    session = await client.create_session()
    message_id = await message_with_id(client, session.id)
    await put_part(client, text_part(session.id, message_id, "ok", metadata=nested(3)))
    with pytest.raises(RpcError) as err:
        await put_part(client, text_part(session.id, message_id, "no", metadata=nested(30)))
    assert err.value.code == INVALID_PARAMS and "$.part.metadata" in err.value.message
    page = await stored(client, session.id)
    assert [p["text"] for p in page.messages[0].parts] == ["ok"]


async def test_f4_read_paths_survive_deep_data_already_stored(spawner: Spawner) -> None:
    client = await spawner()
    session = await client.create_session()
    message_id = await message_with_id(client, session.id)
    part = await put_part(client, text_part(session.id, message_id, "soon deep"))
    assert await client.close() == 0
    # An older daemon (or another tool) left a deep row behind.
    deep = part | {"metadata": "__DEEP__"}
    text = json.dumps(deep).replace('"__DEEP__"', nested_json(980))
    assert (
        await execute(spawner.db, "UPDATE parts SET data = ? WHERE id = ?", (text, part["id"])) == 1
    )
    client = await spawner()
    for method in ("session/context", "session/prune", "session/overflow", "session/compact"):
        try:
            result = await outcome(client.call(method, {"sessionID": session.id}))
        except ConnectionClosed:
            raise AssertionError(
                f"{method}: the client could not decode the reply (nested too deep?)"
            ) from None
        if isinstance(result, RpcError):
            assert result.code != INTERNAL_ERROR, f"{method}: {result.message}"
    assert_no_traceback(client)


# -- f5: framing resynchronises; every frame gets exactly one reply --------------------------


JUNK = [b"\r\n", b"\n", b"\r\n\r\n", b"junk", b"junk\r\n", b"\x00\xff\xfe", b"}{ not a header "]


async def test_f5_junk_between_frames_then_next_frames_are_answered(client: Client) -> None:
    """One daemon for every kind of junk: each must leave the connection usable."""
    session = await client.create_session(title="resync")
    for junk in JUNK:
        calls: list[Call[Any]] = [client.reserve_call() for _ in range(3)]
        frames = [request_frame(c.id, "session/get", {"sessionID": session.id}) for c in calls]
        client.send_raw(frames[0] + junk + frames[1] + frames[2])
        first = await outcome(calls[0])
        assert not isinstance(first, RpcError), first
        # The junk may cost at most the frame it is glued to; the one after is answered.
        last = await outcome(calls[2])
        assert not isinstance(last, RpcError), f"desynchronised by {junk!r}: {last}"
        assert last["title"] == "resync"
        calls[1].cancel()
        assert (await client.get_session(session.id)).title == "resync", junk


async def test_f5_a_response_frame_with_a_request_id_does_not_duplicate_its_reply(
    client: Client,
) -> None:
    """Issue 32 item 5: a request then at once a *response* frame under the same id got two
    replies (-32603 "internal error reading a frame", then the result) and a RuntimeError in
    the log. A response to nothing the daemon asked is ignored with a log line."""
    session = await client.create_session(title="one reply")
    for result in (b'"result":null', b'"error":{"code":1,"message":"x"}', b'"result":{"a":1}'):
        call: Call[Any] = client.reserve_call()
        response = b'{"jsonrpc":"2.0","id":%d,%s}' % (call.id, result)
        client.send_raw(
            request_frame(call.id, "session/get", {"sessionID": session.id}) + rpc_frame(response)
        )
        answer = await exactly_one_reply(client, call)
        assert not isinstance(answer, RpcError), answer
        assert answer["title"] == "one reply"
    # A response to an id nobody used is ignored too; the connection goes on.
    client.send_raw(rpc_frame(b'{"jsonrpc":"2.0","id":"nobody","result":1}'))
    assert (await client.get_session(session.id)).title == "one reply"
    log = client.stderr()
    assert "RuntimeError" not in log and "internal error" not in log, log[-3000:]
    assert_no_traceback(client)


BAD_UTF8_ENVELOPES = [
    b'{"jsonrpc":"2.0","id":%d,"method":"session/l\xffist","params":{}}',
    b'{"jsonrpc":"2.0","id":%d,"method":"\xc3\x28","params":{}}',
    b'{"jsonrpc":"2.0","id":"\xff%d","method":"session/list","params":{}}',
    b'{"jsonrpc":"2.0","method":"session/list","id":"\xed\xa0\x80%d"}',
]


async def test_f5_invalid_utf8_in_method_or_id_gets_exactly_one_reply(client: Client) -> None:
    for body in BAD_UTF8_ENVELOPES:
        call: Call[Any] = client.reserve_call()
        client.send_frame(body % call.id)
        answer = await exactly_one_reply(client, call)
        assert isinstance(answer, RpcError), (body, answer)
        assert answer.code in {PARSE_ERROR, INVALID_REQUEST}, (body, answer)


async def test_f5_params_nested_past_the_limit_get_one_reply_with_the_id(client: Client) -> None:
    for depth in (5000, 100):
        call: Call[Any] = client.reserve_call()
        client.send_frame(raw_request(call.id, "session/list", '{"x":' + nested_json(depth) + "}"))
        answer = await exactly_one_reply(client, call)
        assert isinstance(answer, RpcError), (depth, answer)
        assert answer.request_id == call.id, "the id of a deep request is recoverable"
        assert answer.code in CLIENT_MISTAKE


# -- f6: client mistakes are never -32603, and leave no traceback ----------------------------

HUGE = [2**63, 2**63 + 1, 2**64, 10**30]


async def test_f6_huge_limits_are_32602_naming_limit(limited: Client) -> None:
    client = limited
    session = await client.create_session()
    for limit in HUGE:
        for method, params in (
            ("session/list", {"limit": limit}),
            ("session/messages", {"sessionID": session.id, "limit": limit}),
        ):
            err = await outcome(client.call(method, params))
            assert isinstance(err, RpcError), f"{method} limit={limit}: {err!r}"
            assert err.code == INVALID_PARAMS and "$.limit" in err.message, (method, limit, err)
    assert_no_traceback(client)


MALFORMED_CURSORS = [
    "9223372036854775808:msg_x",
    "-9223372036854775809:msg_x",
    "99999999999999999999999999:msg_x",
    "²:msg_x",
    "1:",
    ":msg_x",
    "nonsense",
    "",
    "\x00",
]


async def test_f6_malformed_cursors_are_32602_naming_cursor(limited: Client) -> None:
    client = limited
    session = await client.create_session()
    await message_with_id(client, session.id)
    for cursor in MALFORMED_CURSORS:
        for method, params in (
            ("session/list", {"limit": 1, "cursor": cursor}),
            ("session/messages", {"sessionID": session.id, "limit": 1, "cursor": cursor}),
        ):
            result = await outcome(client.call(method, params))
            if cursor == "" and not isinstance(result, RpcError):
                continue  # an empty cursor may mean "from the start"
            assert isinstance(result, RpcError), f"{method} cursor={cursor!r}: {result!r}"
            assert result.code == INVALID_PARAMS and "cursor" in result.message, (
                method,
                cursor,
                result,
            )
    assert_no_traceback(client)


async def test_f6_huge_created_is_32602_without_traceback(limited: Client) -> None:
    client = limited
    session = await client.create_session()
    for created in HUGE:
        with pytest.raises(RpcError) as err:
            await put_message(client, user_message(session.id, time={"created": created}))
        assert err.value.code == INVALID_PARAMS
        assert "$.message.time.created" in err.value.message
    assert await stored_ids(client, session.id) == []
    assert_no_traceback(client)


@pytest.mark.parametrize(
    "text", [b"bad \xff byte", b"\xc3\x28", b"\xed\xa0\x80 surrogate", b"cut \xe2\x82"], ids=repr
)
async def test_f6_invalid_utf8_in_part_text_is_a_client_error(limited: Client, text: bytes) -> None:
    client = limited
    session = await client.create_session()
    message_id = await message_with_id(client, session.id)
    call: Call[Any] = client.reserve_call()
    part = b'{"sessionID":"%s","messageID":"%s","type":"text","text":"%s"}' % (
        session.id.encode(),
        message_id.encode(),
        text,
    )
    body = b'{"jsonrpc":"2.0","id":%d,"method":"part/update","params":{"part":%s}}' % (
        call.id,
        part,
    )
    client.send_frame(body)
    answer = await exactly_one_reply(client, call)
    assert_client_mistake(answer, "$.part.text")
    assert await assert_views_agree(client, session.id) == [(message_id, [])]
    assert_no_traceback(client)


# -- f8: no client can disable the daemon ----------------------------------------------------


async def test_f8_config_update_of_max_frame_bytes_is_refused(
    daemon_env: dict[str, str | None],
) -> None:
    async with unix_daemon_with(daemon_env) as daemon:
        attacker, bystander = await daemon.connect(), await daemon.connect()
        before = (await bystander.get_config()).server.max_frame_bytes
        with pytest.raises(RpcError) as err:
            await attacker.update_config({"server": {"maxFrameBytes": 16}})
        assert err.value.code == INVALID_PARAMS and "$.config.server" in err.value.message
        for c in (attacker, bystander):
            session = await c.create_session(title="still served")
            assert (await c.get_session(session.id)).title == "still served"
            assert (await c.get_config()).server.max_frame_bytes == before
        late = await daemon.connect()
        assert (await late.create_session()).id


# -- f9: a stalled reader is disconnected; memory stays flat ---------------------------------


def vm_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def read_until_eof(
    reader: asyncio.StreamReader, enough: int, replies: int = 0
) -> tuple[list[Any], bool]:
    """Whole frames until EOF (then ``True``) or until ``enough`` notifications and
    ``replies`` replies came."""
    frames: list[Any] = []
    notes = 0
    while notes < enough or len(frames) - notes < replies:
        try:
            async with asyncio.timeout(REPLY_TIMEOUT):  # a daemon that sends nothing more
                header = await reader.readuntil(b"\r\n\r\n")
                length = int(header.split(b":", 1)[1].strip())
                frames.append(json.loads(await reader.readexactly(length)))
        except (asyncio.IncompleteReadError, ConnectionError):
            return frames, True  # a frame cut by the disconnect is dropped
        except TimeoutError:
            raise AssertionError(
                f"neither EOF nor all notifications: {notes} of {enough} after "
                f"{[f.get('method', f.get('id')) for f in frames[:5]]}"
            ) from None
        notes += frames[-1].get("method") == "part/updated"
    return frames, False


async def test_f9_stalled_subscriber_is_disconnected_and_memory_stays_flat(
    daemon_env: dict[str, str | None],
) -> None:
    """Each write replaces the same few parts, so the store stays small and only the
    stalled client's outgoing queue could grow (96 MiB of notifications)."""
    config = {"server": {"maxOutgoingBytes": 4 << 20}}
    async with unix_daemon_with(daemon_env, config) as daemon:
        path = daemon.address.removeprefix("unix:")
        reader, writer = await asyncio.open_unix_connection(path, limit=1 << 16)
        for request_id, method, params in (
            (1, "initialize", {"processId": None, "capabilities": {}}),
            (2, "session/subscribe", {"sessionID": "*"}),
        ):
            writer.write(request_frame(request_id, method, params))
            frames, _ = await read_until_eof(reader, 0, replies=1)
            assert frames[0]["id"] == request_id and "result" in frames[0], frames
        # From here on the stalled client reads nothing until the writes are done.
        producer = await daemon.connect()
        producer.default_timeout = REPLY_TIMEOUT
        session = await producer.create_session()
        anchor = await message_with_id(producer, session.id)
        part_ids = [new_id("prt") for _ in range(8)]
        text = "x" * (16 * 1024)
        for pid in part_ids:  # warm up: the parts exist, the caches are filled
            await put_part(producer, text_part(session.id, anchor, text, id=pid))
        rss_before = vm_rss_bytes(daemon.process.pid)
        total = 0
        for round_ in range(150):  # 40 writes in flight at most: the writer reads its replies
            calls: list[Call[Any]] = [
                producer.call(
                    "part/update",
                    {"part": text_part(session.id, anchor, text, id=pid, seq=round_)},
                )
                for _ in range(5)
                for pid in part_ids
            ]
            results = [await outcome(c) for c in calls]
            assert not any(isinstance(r, RpcError) for r in results), "a writer's request failed"
            total += len(calls)
        growth = vm_rss_bytes(daemon.process.pid) - rss_before
        # The stalled client was cut off: it gets what had been sent, then EOF.
        frames, eof = await read_until_eof(reader, total + len(part_ids))
        writer.close()
        assert eof, (
            f"the stalled reader was never disconnected ({len(frames)} frames); "
            f"daemon RSS grew by {growth >> 20} MiB"
        )
        assert growth < 64 << 20, f"daemon RSS grew by {growth >> 20} MiB over {total} writes"
        page = await stored(producer, session.id)
        assert [p["seq"] for p in page.messages[0].parts] == [149] * len(part_ids)


# -- f10: two daemons on one database --------------------------------------------------------


async def test_f10_write_through_one_daemon_is_in_the_others_context(spawner: Spawner) -> None:
    a = await spawner()
    b = await spawner()  # the same database file
    session = await a.create_session()
    first = await message_with_id(a, session.id)
    await put_part(a, text_part(session.id, first, "one"))
    assert await context_ids(b, session.id) == await stored_ids(a, session.id)  # B is warm
    second = await message_with_id(a, session.id)
    await put_part(a, text_part(session.id, second, "two"))
    await put_part(a, text_part(session.id, first, "one more"))
    assert await context_ids(b, session.id) == await stored_ids(a, session.id), "B is stale"
    # And the other way round.
    await message_with_id(b, session.id)
    assert await context_ids(a, session.id) == await stored_ids(b, session.id), "A is stale"


async def test_f10_two_daemons_never_compact_one_session_twice(spawner: Spawner) -> None:
    a = await spawner(**CLIENT_WRITER)
    b = await spawner(**CLIENT_WRITER)
    a_summary = HeldWriter("summary by A")

    async def b_summary(params: Any) -> dict[str, Any]:
        return {"text": "summary by B"}

    a.on_request("summarizer/complete", a_summary)
    b.on_request("summarizer/complete", b_summary)
    session = await a.create_session()
    user = await message_with_id(a, session.id)
    await put_part(a, text_part(session.id, user, "Refactor src/app.py"))
    # History a summary can shrink (the first request itself is kept whole in it).
    answer = await put_message(a, assistant_message(session.id, user, finish="stop"))
    await put_part(a, text_part(session.id, answer["id"], "Refactored src/app.py " * 400))
    await b.context(session.id)  # B has the session cached too

    in_a: Call[Any] = a.call("session/compact", {"sessionID": session.id})
    await asyncio.wait_for(a_summary.asked.wait(), 20)
    in_b = await outcome(b.call("session/compact", {"sessionID": session.id}))
    a_summary.release.set()
    done_a = await outcome(in_a)
    assert not isinstance(done_a, RpcError), done_a
    if isinstance(in_b, RpcError):
        assert in_b.code == -32044, in_b  # busy: compacting elsewhere
    summaries = [
        m.info["id"] for m in (await stored(a, session.id)).messages if m.info.get("summary")
    ]
    assert summaries == [done_a["summaryMessageID"]], "the session was compacted twice"
    await a.close()
    await b.close()


# -- f11: huge reads are paged and capped ----------------------------------------------------


async def test_f11_one_message_with_many_parts_is_paged_by_part_limit(shared: Client) -> None:
    session = await shared.create_session()
    first = await message_with_id(shared, session.id)
    calls: list[Call[Any]] = [
        shared.call("part/update", {"part": text_part(session.id, first, f"p{i}")})
        for i in range(50)
    ]
    parts = [await c for c in calls]
    second = await message_with_id(shared, session.id)
    tail = await put_part(shared, text_part(session.id, second, "tail"))
    full = [p["id"] for p in sorted(parts, key=lambda p: p["id"])] + [tail["id"]]

    seen: list[tuple[str, str]] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"sessionID": session.id, "limit": 10, "partLimit": 7}
        if cursor is not None:
            params["cursor"] = cursor
        page = await shared.request("session/messages", params)
        pages += 1
        assert sum(len(m["parts"]) for m in page["messages"]) <= 7
        seen += [(m["info"]["id"], p["id"]) for m in page["messages"] for p in m["parts"]]
        cursor = page.get("nextCursor")
        if cursor is None:
            break
        assert pages < 50, "paging does not advance"
    assert [p for _, p in seen] == full
    assert {m for m, _ in seen} == {first, second}


async def test_f11_replies_stay_under_max_reply_bytes(limited: Client) -> None:
    """Asked for the whole history (no ``limit``/``partLimit``) that does not fit one reply,
    ``session/messages`` is -32047 saying how to page; paged, every page stays under the cap
    (pages end by bytes too) and the pages give every part; a read that cannot be paged (the
    context window) over the cap is -32047 saying how to ask for less; never -32603."""
    client = limited
    cap = LIMITS["server"]["maxReplyBytes"]
    session = await client.create_session()
    message_id = await message_with_id(client, session.id)
    calls: list[Call[Any]] = [
        client.call("part/update", {"part": text_part(session.id, message_id, "y" * 4096)})
        for _ in range(50)
    ]
    full = sorted([(await c)["id"] for c in calls])
    with pytest.raises(RpcError) as err:
        await client.request("session/messages", {"sessionID": session.id})
    assert err.value.code == REPLY_TOO_LARGE, err.value
    assert "partLimit" in err.value.message and "cursor" in err.value.message
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(50):
        params: dict[str, Any] = {"sessionID": session.id, "partLimit": 40}
        if cursor is not None:
            params["cursor"] = cursor
        page = await client.request("session/messages", params)
        assert len(json.dumps(page)) <= cap, "a session/messages reply over maxReplyBytes"
        seen += [p["id"] for m in page["messages"] for p in m["parts"]]
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    assert seen == full
    with pytest.raises(RpcError) as err:
        await client.request("session/context", {"sessionID": session.id})
    assert err.value.code == REPLY_TOO_LARGE, err.value
    assert "session/messages" in err.value.message or "compact" in err.value.message
    assert_no_traceback(client)


# -- unix-socket daemons with a config file --------------------------------------------------


@contextlib.asynccontextmanager
async def unix_daemon_with(
    env: dict[str, str | None], config: dict[str, Any] | None = None
) -> AsyncIterator[SocketDaemon]:
    """A private ``serve --listen unix:`` daemon, optionally with a ``--config`` file."""
    where = Path(tempfile.mkdtemp(prefix="sc-t-"))  # a socket path must stay short
    address = f"unix:{where / 's.sock'}"
    args = ["--db", str(where / "sessions.db"), "--listen", address]
    if config is not None:
        (where / "config.json").write_text(json.dumps(config))
        args += ["--config", str(where / "config.json")]
    full_env = {k: v for k, v in os.environ.items() if k not in env}
    full_env.update({k: v for k, v in env.items() if v is not None})
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sidecar",
        "serve",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=full_env,
    )
    daemon = SocketDaemon(address, proc)
    try:
        assert proc.stderr is not None
        async with asyncio.timeout(20):
            while b"listening on" not in (line := await proc.stderr.readline()):
                if not line:
                    raise RuntimeError("daemon ended: " + "".join(daemon.stderr_lines))
                daemon.stderr_lines.append(line.decode(errors="replace"))
        daemon._drain = asyncio.create_task(daemon._drain_stderr())
        yield daemon
    finally:
        await daemon.stop()
        shutil.rmtree(where, ignore_errors=True)
