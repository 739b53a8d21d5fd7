"""Sessions: CRUD, list paging, cascading delete, and the application error codes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from sidecar_client import Client, RpcError
from wire import put_message, put_part, stored

from sidecar.protocol.codes import ErrorCode

from .builders import text_part, user_message


async def test_create_get_delete(shared: Client) -> None:
    created = await shared.create_session(title="first", directory="/work/project")
    assert created.id.startswith("ses_")
    assert created.title == "first"
    assert created.directory == "/work/project"
    assert created.time.created > 0 and created.time.updated >= created.time.created

    fetched = await shared.get_session(created.id)
    assert fetched.id == created.id and fetched.title == "first"

    await shared.delete_session(created.id)
    with pytest.raises(RpcError) as err:
        await shared.get_session(created.id)
    assert err.value.code == ErrorCode.UNKNOWN_SESSION


async def test_create_with_client_id_and_parent(shared: Client) -> None:
    parent = await shared.create_session(id="ses_e2e_parent", title="parent")
    assert parent.id == "ses_e2e_parent"
    child = await shared.create_session(title="child", parent_id=parent.id)
    assert child.parent_id == parent.id
    assert (await shared.get_session(child.id)).parent_id == parent.id


async def test_create_with_an_existing_id_is_a_conflict(shared: Client) -> None:
    await shared.create_session(id="ses_e2e_dup")
    with pytest.raises(RpcError) as err:
        await shared.create_session(id="ses_e2e_dup")
    assert err.value.code == ErrorCode.CONFLICT
    assert "ses_e2e_dup" in err.value.message


async def test_unknown_session_is_32040_naming_the_id(shared: Client) -> None:
    missing = "ses_does_not_exist"
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: shared.get_session(missing),
        lambda: shared.delete_session(missing),
        lambda: stored(shared, missing),
        lambda: shared.subscribe(missing),
        lambda: put_message(shared, user_message(missing)),
        lambda: shared.create_session(parent_id=missing),
    ]
    for call in calls:
        with pytest.raises(RpcError) as err:
            await call()
        assert err.value.code == ErrorCode.UNKNOWN_SESSION, err.value
        assert missing in err.value.message


async def test_part_update_for_unknown_message_is_32041_naming_it(shared: Client) -> None:
    session = await shared.create_session()
    with pytest.raises(RpcError) as err:
        await put_part(shared, text_part(session.id, "msg_does_not_exist", "orphan"))
    assert err.value.code == ErrorCode.UNKNOWN_MESSAGE
    assert "msg_does_not_exist" in err.value.message


async def test_message_remove_of_unknown_message_is_32041(shared: Client) -> None:
    session = await shared.create_session()
    with pytest.raises(RpcError) as err:
        await shared.remove_message(session.id, "msg_does_not_exist")
    assert err.value.code == ErrorCode.UNKNOWN_MESSAGE
    assert "msg_does_not_exist" in err.value.message


async def test_part_remove_of_unknown_part_is_32042(shared: Client) -> None:
    session = await shared.create_session()
    message = await put_message(shared, user_message(session.id))
    with pytest.raises(RpcError) as err:
        await shared.remove_part(session.id, message["id"], "prt_does_not_exist")
    assert err.value.code == ErrorCode.UNKNOWN_PART
    assert "prt_does_not_exist" in err.value.message


async def test_delete_cascades_to_messages_and_parts(shared: Client) -> None:
    session = await shared.create_session(id="ses_e2e_cascade")
    message = await put_message(shared, user_message(session.id))
    part = await put_part(shared, text_part(session.id, message["id"], "hello"))
    assert len((await stored(shared, session.id)).messages) == 1

    await shared.delete_session(session.id)
    with pytest.raises(RpcError) as err:
        await stored(shared, session.id)
    assert err.value.code == ErrorCode.UNKNOWN_SESSION
    # Re-creating the same id shows nothing of the old rows: they are gone, not hidden.
    await shared.create_session(id=session.id)
    assert (await stored(shared, session.id)).messages == []
    with pytest.raises(RpcError) as err:
        await shared.remove_part(session.id, message["id"], part["id"])
    assert err.value.code == ErrorCode.UNKNOWN_PART


async def test_list_pages_with_cursors_newest_first(client: Client) -> None:
    ids = [(await client.create_session(title=f"s{i}")).id for i in range(5)]

    everything = await client.list_sessions()
    assert [s.id for s in everything.sessions] == ids[::-1]
    assert everything.next_cursor is None

    seen: list[str] = []
    pages: list[int] = []
    cursor: str | None = None
    while True:
        page = await client.list_sessions(limit=2, cursor=cursor)
        seen += [s.id for s in page.sessions]
        pages.append(len(page.sessions))
        cursor = page.next_cursor
        if cursor is None:
            break
    assert pages == [2, 2, 1]
    assert seen == ids[::-1]

    exact = await client.list_sessions(limit=5)
    assert len(exact.sessions) == 5 and exact.next_cursor is None


async def test_list_rejects_bad_limit_and_cursor(shared: Client) -> None:
    with pytest.raises(RpcError) as err:
        await shared.list_sessions(limit=0)
    assert err.value.code == -32602 and "limit" in err.value.message
    with pytest.raises(RpcError) as err:
        await shared.list_sessions(cursor="not-a-cursor")
    assert err.value.code == -32602 and "cursor" in err.value.message
