"""The Python client's ``ContextWindow`` against a scripted reader: a delta is applied to the
window its ``since`` named, even when another refresh landed while it was in flight."""

from __future__ import annotations

import asyncio
from typing import Any

from sidecar_client import ContextWindow
from sidecar_client._types import ContextResult


class Scripted:
    """``context`` replies released by the test, in the order it chooses."""

    def __init__(self) -> None:
        self.asked: list[tuple[str | None, asyncio.Future[ContextResult]]] = []

    async def context(self, _sid: str, _fmt: str, **options: Any) -> ContextResult:
        future: asyncio.Future[ContextResult] = asyncio.get_running_loop().create_future()
        self.asked.append((options.get("since"), future))
        return await future


def reply(messages: list[str], revision: str, start: int | None = None) -> ContextResult:
    delta = None if start is None else True
    return ContextResult(
        format="parts",
        messages=list(messages),
        estimated_tokens=0,
        revision=revision,
        delta=delta,
        start=start,
    )


async def until_asked(reader: Scripted, n: int) -> None:
    while len(reader.asked) < n:
        await asyncio.sleep(0)


async def test_refreshes_in_flight_together_each_apply_their_delta_to_their_own_base() -> None:
    reader = Scripted()
    window = ContextWindow(reader, "ses_x", "parts")  # type: ignore[arg-type]
    first = asyncio.ensure_future(window.refresh())
    await until_asked(reader, 1)
    reader.asked[0][1].set_result(reply(["a", "b"], "r1"))
    await first
    # Both from r1: the first served changed "b"; the second, served later, appended "c" to
    # r1's window. Each delta is relative to r1's window, whichever reply lands last.
    one = asyncio.ensure_future(window.refresh())
    two = asyncio.ensure_future(window.refresh())
    await until_asked(reader, 3)
    assert [since for since, _ in reader.asked[1:]] == ["r1", "r1"]
    reader.asked[1][1].set_result(reply(["b2"], "r2", 1))
    assert (await one).messages == ["a", "b2"]
    reader.asked[2][1].set_result(reply(["c"], "r3", 2))
    assert (await two).messages == ["a", "b", "c"]
    assert window.messages == ["a", "b", "c"]
    assert window.revision == "r3"
