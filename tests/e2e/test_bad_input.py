"""Every kind of bad input gets the right JSON-RPC error, and the daemon keeps serving.

Errors the daemon cannot attribute to a request (framing, unparsable JSON) come back with
``id: null``; the client collects those for ``wait_for_error``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable

import pytest
from sidecar_client import Client, RpcError
from wire import put_message, put_part, stored

from .builders import rpc_frame, user_message
from .conftest import Spawner

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602


def error_with(code: int, text: str = "") -> object:
    return lambda e: e.code == code and text in e.message


async def rejected(call: Awaitable[object], code: int, needle: str) -> None:
    """``call`` fails with ``code`` and a message naming ``needle``."""
    with pytest.raises(RpcError) as err:
        await call
    assert err.value.code == code
    assert needle in err.value.message


async def still_serving(client: Client) -> None:
    """The next ordinary request after the bad input is answered normally."""
    session = await client.create_session(title="after bad input")
    assert (await client.get_session(session.id)).title == "after bad input"


async def test_header_without_content_length_is_32700_and_serving_continues(
    shared: Client,
) -> None:
    shared.send_raw(b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n")
    err = await shared.wait_for_error(error_with(PARSE_ERROR, "Content-Length"))
    assert err.request_id is None
    await still_serving(shared)


@pytest.mark.parametrize("value", [b"abc", b"-5", b"12.5", b""])
async def test_non_numeric_content_length_is_32700_and_serving_continues(
    shared: Client, value: bytes
) -> None:
    shared.send_raw(b"Content-Length: " + value + b"\r\n\r\n")
    err = await shared.wait_for_error(error_with(PARSE_ERROR, "Content-Length"))
    assert err.request_id is None
    await still_serving(shared)


@pytest.mark.parametrize(
    ("raw", "code", "needle"),
    [
        (b"this is not a header\r\n\r\n", PARSE_ERROR, "malformed header"),
        (
            rpc_frame(b'{"jsonrpc": "2.0", "id": null, "method": "session/list"}'),
            INVALID_REQUEST,
            "id",
        ),
    ],
    ids=["header line without colon is 32700", "request with null id is 32600"],
)
async def test_bad_input_without_a_usable_id_gets_its_error(
    shared: Client, raw: bytes, code: int, needle: str
) -> None:
    shared.send_raw(raw)
    await shared.wait_for_error(error_with(code, needle))
    await still_serving(shared)


async def test_invalid_json_body_is_32700(shared: Client) -> None:
    shared.send_frame(b'{"jsonrpc": "2.0", "id": 99, "method": "session/list", ')
    err = await shared.wait_for_error(error_with(PARSE_ERROR, "invalid JSON"))
    assert err.request_id is None
    shared.send_frame(b"\xff\xfe not utf-8")
    await shared.wait_for_error(error_with(PARSE_ERROR))
    await still_serving(shared)


@pytest.mark.parametrize(
    "body",
    [b"[]", b'[{"jsonrpc": "2.0", "id": 1, "method": "x"}]', b"5", b'"text"', b"null", b"true"],
)
async def test_non_object_body_is_32600(shared: Client, body: bytes) -> None:
    shared.send_frame(body)
    err = await shared.wait_for_error(error_with(INVALID_REQUEST))
    assert err.request_id is None
    await still_serving(shared)


@pytest.mark.parametrize("version", ["1.0", None])
async def test_wrong_or_missing_jsonrpc_version_is_32600_for_that_id(
    shared: Client, version: object
) -> None:
    call = shared.reserve_call()
    request: dict[str, object] = {"id": call.id, "method": "session/list", "params": {}}
    if version is not None:
        request["jsonrpc"] = version
    shared.send_frame(json.dumps(request).encode())
    with pytest.raises(RpcError) as err:
        await call
    assert err.value.code == INVALID_REQUEST
    assert err.value.request_id == call.id
    assert "jsonrpc" in err.value.message
    await still_serving(shared)


async def test_unknown_method_is_32601(shared: Client) -> None:
    await rejected(
        shared.request("session/doesNotExist", {}), METHOD_NOT_FOUND, "session/doesNotExist"
    )
    await still_serving(shared)


async def test_unknown_notification_is_ignored_silently(shared: Client) -> None:
    errors_before = len(shared.unsolicited_errors())
    shared.notify("nobody/listens", {"x": 1})
    await still_serving(shared)  # replies are in order: any error would have come first
    assert len(shared.unsolicited_errors()) == errors_before


async def test_missing_params_key_is_fine_when_all_params_are_optional(shared: Client) -> None:
    result = await shared.request("session/list")  # no "params" key at all
    assert isinstance(result["sessions"], list)
    assert isinstance(await shared.request("config/get"), dict)


async def test_missing_params_key_names_the_required_field(shared: Client) -> None:
    await rejected(shared.request("session/get"), INVALID_PARAMS, "sessionID")
    await rejected(
        shared.request("part/remove", {"sessionID": "s", "messageID": "m"}),
        INVALID_PARAMS,
        "partID",
    )


async def test_wrong_type_names_the_path(shared: Client) -> None:
    await rejected(shared.request("session/get", {"sessionID": 5}), INVALID_PARAMS, "$.sessionID")

    session = await shared.create_session()
    await rejected(
        put_message(shared, user_message(session.id, role=5)), INVALID_PARAMS, "$.message.role"
    )

    await rejected(
        put_message(shared, user_message(session.id, role="robot")),
        INVALID_PARAMS,
        "$.message.role",
    )

    await rejected(
        put_message(shared, user_message(session.id, time={"created": "yesterday"})),
        INVALID_PARAMS,
        "$.message.time.created",
    )

    await rejected(
        put_part(
            shared,
            {
                "sessionID": session.id,
                "messageID": "msg_x",
                "type": "tool",
                "callID": "c1",
                "tool": "bash",
                "state": {"status": "exploded", "input": {}},
            },
        ),
        INVALID_PARAMS,
        "$.part.state.status",
    )

    await rejected(shared.request("session/list", {"limit": "ten"}), INVALID_PARAMS, "$.limit")
    # Nothing invalid was stored.
    assert (await stored(shared, session.id)).messages == []


async def test_config_update_wrong_type_names_the_path(shared: Client) -> None:
    before = await shared.get_config()
    await rejected(
        shared.update_config({"compaction": {"auto": "yes please"}}),
        INVALID_PARAMS,
        "$.config.compaction.auto",
    )
    assert await shared.get_config() == before  # a rejected update changes nothing


async def test_frames_split_and_coalesced_are_parsed(shared: Client) -> None:
    session = await shared.create_session()
    calls = [shared.reserve_call() for _ in range(3)]
    frames = b"".join(
        rpc_frame(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": call.id,
                    "method": "message/update",
                    "params": {"message": user_message(session.id, seq=i)},
                }
            ).encode(),
            extra_headers=b"content-type: application/vscode-jsonrpc; charset=utf-8\r\n",
        )
        for i, call in enumerate(calls)
    )
    for i in range(0, len(frames), 7):  # odd-sized chunks across header/body boundaries
        shared.send_raw(frames[i : i + 7])
    replies = [await call for call in calls]
    assert [r["seq"] for r in replies] == [0, 1, 2]
    page = await stored(shared, session.id)
    assert [m.info["seq"] for m in page.messages] == [0, 1, 2]


async def test_frame_over_the_size_cap_is_rejected_and_serving_continues(
    spawner: Spawner,
) -> None:
    client = await spawner.configured({"server": {"maxFrameBytes": 4096}})
    assert (await client.get_config()).server.max_frame_bytes == 4096

    session = await client.create_session()
    big = user_message(session.id, blob="x" * 8000)
    call = client.call("message/update", {"message": big})
    err = await client.wait_for_error(error_with(INVALID_REQUEST, "exceeds the limit"))
    assert "4096" in err.message and "maxFrameBytes" in err.message
    assert err.request_id is None
    call.cancel()  # its frame was dropped unread: no reply will come

    # The body was skipped, not parsed as a header; the next request is served normally.
    small = await put_message(client, user_message(session.id, blob="y" * 100))
    page = await stored(client, session.id)
    assert [m.info["id"] for m in page.messages] == [small["id"]]
    # A frame just under the cap is accepted.
    fits = user_message(session.id, blob="z" * 3800)
    assert (await put_message(client, fits))["blob"] == fits["blob"]


@pytest.mark.parametrize(
    ("method", "params", "path"),
    [
        ("session/create", {"id": "ses_a\u0000b"}, "$.id"),
        (
            "part/update",
            {
                "part": {
                    "sessionID": "s",
                    "messageID": "m",
                    "type": "text",
                    "text": "",
                    "id": "\u0000",
                }
            },
            "$.part.id",
        ),
        ("session/get", {"sessionID": "ses_\u0000"}, "$.sessionID"),
        (
            "message/update",
            {"message": {"sessionID": "ses_x", "role": "user", "id": "m\u0000"}},
            "$.message.id",
        ),
    ],
)
async def test_a_nul_character_in_an_id_is_32602_on_every_backend(
    shared: Client, method: str, params: dict[str, object], path: str
) -> None:
    """PostgreSQL cannot hold U+0000 in text; an id with one is the client's mistake (named),
    never -32603, and nothing is stored."""
    with pytest.raises(RpcError) as err:
        await shared.request(method, params)
    assert err.value.code == INVALID_PARAMS, err.value
    assert path in err.value.message
    assert (await shared.request("session/list", {}))["sessions"] is not None


async def test_a_nul_character_in_a_cursor_is_32602(shared: Client) -> None:
    session = await shared.create_session()
    with pytest.raises(RpcError) as err:
        await shared.request("session/messages", {"sessionID": session.id, "cursor": "1:m\u0000"})
    assert err.value.code == INVALID_PARAMS and "cursor" in err.value.message, err.value
