"""Request dispatch in-process: one reply per request, sent with what its handler published,
cancellation before and during a handler, and the count of requests yet to start."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import msgspec

from sidecar.errors import SidecarError, UnknownSession
from sidecar.protocol.methods import TO_DAEMON, Ordering, RequestSpec
from sidecar.server.dispatch import Route, route
from sidecar.server.protocol import SidecarProtocol, new_protocol

from .frames import split_frames


class Params(msgspec.Struct):
    x: int = 0


class Out:
    """A write transport that records each write and wakes whoever waits for N replies."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self._want = 0
        self._waiter: asyncio.Future[None] | None = None

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        if self._waiter is not None and len(self.replies()) >= self._want:
            if not self._waiter.done():
                self._waiter.set_result(None)

    def messages(self) -> list[Any]:
        return split_frames(b"".join(self.writes))

    def replies(self) -> list[Any]:
        return [m for m in self.messages() if "id" in m and "method" not in m]

    async def wait_replies(self, n: int) -> list[Any]:
        self._want = n
        self._waiter = asyncio.get_running_loop().create_future()
        if len(self.replies()) < n:
            await asyncio.wait_for(self._waiter, 10)
        return self.replies()


def _route(method: str, fn: Any, ordering: Ordering = "read") -> Route:
    spec = RequestSpec(
        method=method, direction=TO_DAEMON, params=Params, result=None, ordering=ordering
    )
    return route(spec, fn)


def _protocol(handlers: dict[str, Any], ordering: Ordering = "read") -> tuple[SidecarProtocol, Out]:
    """A protocol serving ``handlers`` (``fn(ctx, params)``) as rows of ``ordering``."""
    served = {method: _route(method, fn, ordering) for method, fn in handlers.items()}
    proto = new_protocol(cast(Any, None), served)
    proto.initialized = True
    out = Out()
    proto.set_writer(out)
    return proto, out


def _request(rid: int, method: str, x: int = 0) -> bytes:
    body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": {"x": x}}
    return msgspec.json.encode(body)


async def test_reply_leaves_in_the_same_write_as_the_handlers_notifications() -> None:
    async def echo(ctx: Any, p: Params) -> dict[str, int]:
        await asyncio.sleep(0)  # a real suspension, as a store write would be
        proto.notify("thing/updated", {"x": p.x})
        return {"x": p.x}

    proto, out = _protocol({"t/echo": echo})
    proto.handle_frame(_request(1, "t/echo", 5))
    (reply,) = await out.wait_replies(1)
    assert reply == {"jsonrpc": "2.0", "id": 1, "result": {"x": 5}}
    assert len(out.writes) == 1
    note, answer = out.messages()
    assert note["method"] == "thing/updated" and answer["id"] == 1
    assert proto.starting.count == 0 and proto.in_flight() == 0


async def test_cancel_before_the_handler_starts_gets_one_cancelled_reply() -> None:
    started: list[int] = []

    async def slow(ctx: Any, p: Params) -> int:
        started.append(p.x)
        return p.x

    proto, out = _protocol({"t/slow": slow})
    proto.handle_frame(_request(7, "t/slow"))
    assert proto.starting.count == 1
    cancel = {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 7}}
    proto.handle_frame(msgspec.json.encode(cancel))
    (reply,) = await out.wait_replies(1)
    assert reply["id"] == 7 and reply["error"]["code"] == -32800
    assert started == [] and proto.starting.count == 0


async def test_cancel_while_the_handler_waits_gets_one_cancelled_reply() -> None:
    gate = asyncio.Event()
    entered = asyncio.Event()

    async def waits(ctx: Any, p: Params) -> int:
        entered.set()
        await gate.wait()
        return 1

    proto, out = _protocol({"t/waits": waits})
    proto.handle_frame(_request(3, "t/waits"))
    await entered.wait()
    assert proto.starting.count == 0
    proto.handle_frame(b'{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":3}}')
    (reply,) = await out.wait_replies(1)
    assert reply["id"] == 3 and reply["error"]["code"] == -32800
    gate.set()
    await asyncio.sleep(0)
    assert len(out.replies()) == 1 and proto.in_flight() == 0


async def test_handler_errors_are_replied_once_with_their_code() -> None:
    async def fails(ctx: Any, p: Params) -> int:
        raise SidecarError("unknown session: 'ses_x'", -32040)

    proto, out = _protocol({"t/fails": fails})
    proto.handle_frame(_request(4, "t/fails"))
    (reply,) = await out.wait_replies(1)
    assert reply["error"] == {"code": -32040, "message": "unknown session: 'ses_x'"}


async def test_frames_of_one_read_are_all_counted_as_starting_before_any_runs() -> None:
    seen: list[int] = []

    async def record(ctx: Any, p: Params) -> int:
        seen.append(proto.starting.count)
        return p.x

    proto, out = _protocol({"t/rec": record})
    for i in range(3):
        proto.handle_frame(_request(i, "t/rec", i))
    await out.wait_replies(3)
    # Each handler sees how many requests behind it have yet to take their first step.
    assert seen == [2, 1, 0]


def _deferred_protocol(fn: Any) -> tuple[SidecarProtocol, Out]:
    """A protocol whose ``t/def`` method is an ingest row served by ``fn``."""
    return _protocol({"t/def": fn}, "ingest")


async def test_deferred_request_is_answered_when_its_callback_fires() -> None:
    pending: list[Any] = []

    def later(conn: Any, p: Params, done: Any) -> None:
        pending.append((p.x, done))

    proto, out = _deferred_protocol(later)
    proto.handle_frame(_request(1, "t/def", 4))
    proto.handle_frame(_request(2, "t/def", 5))
    assert out.writes == [] and proto.in_flight() == 0  # no task per request
    # A cancel for a deferred request is not an error; its normal answer still comes.
    proto.handle_frame(b'{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}')
    (x1, done1), (_, done2) = pending
    done2(None, UnknownSession("ses_gone"))
    done1({"x": x1 * 10}, None)
    first, second = await out.wait_replies(2)
    assert first == {
        "jsonrpc": "2.0",
        "id": 2,
        "error": {"code": -32040, "message": "unknown session: 'ses_gone'"},
    }
    assert second == {"jsonrpc": "2.0", "id": 1, "result": {"x": 40}}


async def test_deferred_handler_that_raises_is_answered_once() -> None:
    def bad(conn: Any, p: Params, done: Any) -> None:
        raise msgspec.ValidationError("Expected `str`, got `int` - at `$.part.text`")

    proto, out = _deferred_protocol(bad)
    proto.handle_frame(_request(9, "t/def"))
    (reply,) = await out.wait_replies(1)
    assert reply["id"] == 9 and reply["error"]["code"] == -32602
    assert "$.part.text" in reply["error"]["message"]


async def test_a_raw_exception_given_to_the_deferred_reply_is_an_internal_error() -> None:
    """An ingest handler's ``done`` takes any exception: one that is not the client's
    mistake is a bug, answered -32603 by type only."""

    def handler(ctx: Any, p: Params, done: Any) -> None:
        done(None, RuntimeError("secret detail"))

    proto, out = _deferred_protocol(handler)
    proto.handle_frame(_request(3, "t/def"))
    (reply,) = await out.wait_replies(1)
    assert reply["id"] == 3 and reply["error"]["code"] == -32603
    assert "RuntimeError" in reply["error"]["message"]
    assert "secret" not in reply["error"]["message"]


def test_every_connection_reads_the_one_mapping_built_from_the_table() -> None:
    """No per-connection registry: each protocol reads ``routes()`` itself."""
    from sidecar.server.dispatch import routes

    first, second = new_protocol(cast(Any, None)), new_protocol(cast(Any, None))
    assert first.routes is routes() and second.routes is routes()
