"""``Revisions`` (``session/context`` ``since``) keeps a bounded number of bytes and windows."""

from __future__ import annotations

from sidecar.engine.delta import Revisions
from sidecar.model.rpc import ContextResult


def result(messages: list[object], tokens: int) -> ContextResult:
    return ContextResult(format="openai", messages=messages, estimated_tokens=tokens)


def test_old_revisions_are_forgotten_past_the_count_and_the_bytes() -> None:
    revisions = Revisions(limit=3, max_bytes=10_000)
    tokens = [revisions.serve("s", result([{"role": "user"}], 10), None).revision for _ in range(5)]
    assert len(revisions._served) == 3 and tokens[-1] in revisions._served
    big = revisions.serve("s", result([{"role": "user"}], 5_000), None)  # ~20 KB alone
    assert list(revisions._served) == [big.revision]  # the newest is always kept
    forgotten = revisions.serve("s", result([{"role": "user"}], 10), tokens[0])
    assert forgotten.delta is False


def test_a_delta_carries_what_follows_the_kept_prefix() -> None:
    revisions = Revisions()
    a, b = {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}
    first = revisions.serve("s", result([a, b], 10), None)
    c = {"role": "user", "content": "c"}
    second = revisions.serve("s", result([a, b, c], 12), first.revision)
    assert second.delta is True and second.start == 2 and second.messages == [c]
    # The newest assistant message changed (and more followed): still a delta, from it on.
    b2 = {"role": "assistant", "content": "b, then more"}
    third = revisions.serve("s", result([a, b2, c], 12), first.revision)
    assert third.delta is True and third.start == 1 and third.messages == [b2, c]
    changed = revisions.serve(
        "s", result([{"role": "user", "content": "A"}, b, c], 12), second.revision
    )
    assert changed.delta is False and len(changed.messages) == 3
