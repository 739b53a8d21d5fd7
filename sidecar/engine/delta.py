"""Incremental windows: ``session/context`` with ``since`` (PROTOCOL.md).

Every reply gets a ``revision``: a token for the rendered messages it served, remembered here
(a bounded LRU of references to the rendered messages, which the renderer's memos already
share). A later request with ``since`` compares the current rendering with the one served
then, message by message (the same objects for unchanged messages, so mostly by identity):
when only what the old window's newest stored message rendered to changed, and more was
appended, the reply carries the messages from the first difference on (``delta: true``,
``start``: how many of its messages the client keeps). Anything else — an unknown or evicted
revision, another session or format, a compaction, a prune, an edit or removal before the
end — gets the full window (``delta: false``). Correct by construction: the client's kept
prefix is compared with what it was served, never assumed.
"""

from __future__ import annotations

import itertools
import os
from collections import OrderedDict
from typing import Any, NamedTuple

from sidecar.model.buffers import Elements
from sidecar.model.rpc import ContextResult

MAX_REVISIONS = 64
# And at most about this much of rendered windows held (estimated as 4 bytes a token; the
# renderer's memos share most of it): memory stays bounded whatever the windows' sizes.
MAX_REVISION_BYTES = 64 << 20
# Sessions whose write count is kept (``generation``).
MAX_WRITE_COUNTS = 4096


class _Served(NamedTuple):
    session_id: str
    format: str
    messages: list[Any]
    tail_from: int  # where the rendering of the window's newest stored message begins
    size: int  # estimated bytes held


class Revisions:
    """Windows served, by revision token. One per ``Engine``: its tokens carry a random
    prefix, so a revision from another engine, daemon or run is simply unknown."""

    def __init__(self, limit: int = MAX_REVISIONS, max_bytes: int = MAX_REVISION_BYTES) -> None:
        self._served: OrderedDict[str, _Served] = OrderedDict()
        self._limit = limit
        self._max_bytes = max_bytes
        self._bytes = 0
        self._prefix = os.urandom(4).hex()
        self._count = itertools.count(1)
        self._writes: dict[str, int] = {}

    def wrote(self, session_id: str) -> None:
        """The write door's step: the session changed. Served revisions need no dropping
        (``since`` compares what it served with the current rendering); the count says how
        many writes the session has had here, which ``generation`` reports."""
        writes = self._writes
        writes[session_id] = writes.pop(session_id, 0) + 1
        if len(writes) > MAX_WRITE_COUNTS:  # bounded: the least recently written forgotten
            del writes[next(iter(writes))]

    def generation(self, session_id: str) -> int:
        """How many writes went through the write door for the session."""
        return self._writes.get(session_id, 0)

    def serve(self, session_id: str, result: ContextResult, since: str | None) -> ContextResult:
        """``result`` with its ``revision`` set and, for ``since``, cut to a delta if it can."""
        messages = result.messages
        token = f"{self._prefix}.{next(self._count)}"
        # A window rendered as it was read (``streamed``) is not held: no delta from or to it.
        streamed = bool(messages) and isinstance(messages[0], Elements)
        if streamed:
            served = _Served(session_id, result.format, [], 1, 1024)
        else:
            size = 4 * result.estimated_tokens + 1024
            served = _Served(session_id, result.format, messages, _tail_from(result), size)
        self._served[token] = served
        self._bytes += served.size
        while len(self._served) > 1 and (
            len(self._served) > self._limit or self._bytes > self._max_bytes
        ):
            self._bytes -= self._served.popitem(last=False)[1].size
        result.revision = token
        if since is None:
            return result
        old = self._served.get(since)
        result.delta = False
        if streamed or old is None or old.session_id != session_id or old.format != result.format:
            return result
        start = _common_prefix(old.messages, messages)
        if start < old.tail_from:
            return result  # changed before the end
        result.delta = True
        result.start = start
        result.messages = messages[start:]
        return result


def _tail_from(result: ContextResult) -> int:
    """Where the rendering of the window's newest stored message begins (about: the policy
    of when a delta is worth it, not its correctness). Parts: one entry a message; chat
    formats: from the last assistant message (its tool results follow it)."""
    messages = result.messages
    last = len(messages) - 1
    if result.format == "parts":
        return max(last, 0)
    for i in range(last, -1, -1):
        if isinstance(messages[i], dict) and messages[i].get("role") == "assistant":
            return i
    return max(last, 0)


def _common_prefix(old: list[Any], new: list[Any]) -> int:
    n = min(len(old), len(new))
    i = 0
    while i < n and (old[i] is new[i] or old[i] == new[i]):
        i += 1
    return i
