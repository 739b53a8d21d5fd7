"""Notifications between clients of one shared daemon (unix socket).

Absence is proven without sleeping: notifications to one connection are written in publish
order, so once a later notification (a "barrier") has arrived, an earlier one that was due
would have arrived before it.
"""

from __future__ import annotations

from typing import Any

from sidecar_client import Client
from wire import put_message, put_part

from .builders import text_part, user_message
from .conftest import SocketDaemon


def about(message_id: str) -> Any:
    return lambda params: params["message"]["id"] == message_id


async def barrier(writer: Client, reader: Client) -> None:
    """Make ``reader`` receive one more notification, sent after everything before it."""
    session = await writer.create_session(title="barrier")
    await reader.subscribe(session.id)
    message = await put_message(writer, user_message(session.id, barrier=True))
    await reader.wait_for("message/updated", about(message["id"]))


async def test_subscriber_receives_updates_and_removals(unix_daemon: SocketDaemon) -> None:
    writer = await unix_daemon.connect()
    watcher = await unix_daemon.connect()
    session = await writer.create_session(title="watched")
    await watcher.subscribe(session.id)

    message = await put_message(writer, user_message(session.id, note="hello"))
    got = await watcher.wait_for("message/updated", about(message["id"]))
    assert got["message"] == message  # as stored, unknown field included

    part = await put_part(writer, text_part(session.id, message["id"], "streamed"))
    got = await watcher.wait_for("part/updated")
    assert got["part"] == part

    await writer.remove_part(session.id, message["id"], part["id"])
    got = await watcher.wait_for("part/removed")
    assert got == {"sessionID": session.id, "messageID": message["id"], "partID": part["id"]}

    await writer.remove_message(session.id, message["id"])
    got = await watcher.wait_for("message/removed")
    assert got == {"sessionID": session.id, "messageID": message["id"]}


async def test_writer_is_subscribed_to_sessions_it_writes_to(unix_daemon: SocketDaemon) -> None:
    owner = await unix_daemon.connect()
    writer = await unix_daemon.connect()
    session = await owner.create_session()  # created by another client

    message = await put_message(writer, user_message(session.id))
    # The notification is published before the reply is sent: it is already here.
    assert [n["message"]["id"] for n in writer.notifications("message/updated")] == [message["id"]]
    part = await put_part(writer, text_part(session.id, message["id"], "x"))
    assert (await writer.wait_for("part/updated"))["part"]["id"] == part["id"]
    # The creator is subscribed too.
    assert (await owner.wait_for("message/updated", about(message["id"])))["message"] == message


async def test_writers_see_each_others_writes(unix_daemon: SocketDaemon) -> None:
    a = await unix_daemon.connect()
    b = await unix_daemon.connect()
    session = await a.create_session()
    from_a = await put_message(a, user_message(session.id))
    from_b = await put_message(b, user_message(session.id))
    assert (await a.wait_for("message/updated", about(from_b["id"])))["message"] == from_b
    # b subscribed by writing, after a's write: it sees only its own.
    await barrier(a, b)
    assert [n["message"]["id"] for n in b.notifications("message/updated")][:1] == [from_b["id"]]
    assert not any(n["message"]["id"] == from_a["id"] for n in b.notifications("message/updated"))


async def test_unsubscribe_stops_notifications(unix_daemon: SocketDaemon) -> None:
    writer = await unix_daemon.connect()
    watcher = await unix_daemon.connect()
    session = await writer.create_session()
    await watcher.subscribe(session.id)
    first = await put_message(writer, user_message(session.id))
    await watcher.wait_for("message/updated", about(first["id"]))

    await watcher.unsubscribe(session.id)
    second = await put_message(writer, user_message(session.id))
    await put_part(writer, text_part(session.id, second["id"], "unseen"))
    await barrier(writer, watcher)

    seen = [n["message"]["id"] for n in watcher.notifications("message/updated")]
    assert first["id"] in seen and second["id"] not in seen
    assert watcher.notifications("part/updated") == []


async def test_wildcard_subscription_sees_every_session(unix_daemon: SocketDaemon) -> None:
    writer = await unix_daemon.connect()
    watcher = await unix_daemon.connect()
    await watcher.subscribe("*")
    one = await writer.create_session()
    two = await writer.create_session()
    m1 = await put_message(writer, user_message(one.id))
    m2 = await put_message(writer, user_message(two.id))
    assert (await watcher.wait_for("message/updated", about(m1["id"])))["message"] == m1
    assert (await watcher.wait_for("message/updated", about(m2["id"])))["message"] == m2


async def test_wait_for_returns_each_notification_once(unix_daemon: SocketDaemon) -> None:
    client = await unix_daemon.connect()
    session = await client.create_session()
    ids = [(await put_message(client, user_message(session.id)))["id"] for _ in range(3)]
    # All three arrived before the first wait_for; they are handed out in order, once each.
    got = [(await client.wait_for("message/updated"))["message"]["id"] for _ in range(3)]
    assert got == ids
    assert len(client.notifications("message/updated")) == 3


async def test_a_writer_that_declared_echo_false_hears_no_echo_of_its_own_writes(
    unix_daemon: SocketDaemon,
) -> None:
    """``capabilities.echo: false``: the writer's own ``message/update`` and ``part/update``
    come back as replies only; every other subscriber still hears them, and the writer still
    hears what others write and what the daemon itself changes."""
    quiet = await unix_daemon.connect(capabilities={"echo": False})
    other = await unix_daemon.connect()
    session = await quiet.create_session(title="quiet writer")
    await other.subscribe(session.id)

    message = await put_message(quiet, user_message(session.id))
    part = await put_part(quiet, text_part(session.id, message["id"], "mine"))
    assert (await other.wait_for("message/updated", about(message["id"])))["message"] == message
    assert (await other.wait_for("part/updated"))["part"] == part

    # Another client's write reaches the quiet writer (it is subscribed by writing).
    theirs = await put_message(other, user_message(session.id, by="other"))
    assert (await quiet.wait_for("message/updated", about(theirs["id"])))["message"] == theirs
    # In publish order, so nothing of its own came before it.
    assert [n["message"]["id"] for n in quiet.notifications("message/updated")] == [theirs["id"]]
    assert quiet.notifications("part/updated") == []

    # The daemon's own changes are not echoes: a removal the quiet writer asked for is heard.
    await quiet.remove_part(session.id, message["id"], part["id"])
    got = await quiet.wait_for("part/removed")
    assert got == {"sessionID": session.id, "messageID": message["id"], "partID": part["id"]}


async def test_echo_is_per_connection(unix_daemon: SocketDaemon) -> None:
    """A second connection of the same daemon that did not declare it still hears its own."""
    await unix_daemon.connect(capabilities={"echo": False})
    loud = await unix_daemon.connect()
    session = await loud.create_session()
    message = await put_message(loud, user_message(session.id))
    assert [n["message"]["id"] for n in loud.notifications("message/updated")] == [message["id"]]
