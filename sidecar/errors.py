"""Application errors, raised by lower layers and mapped by the server to error replies.

The codes come from the one table, ``sidecar.protocol.codes`` (which imports nothing of ours).
"""

from __future__ import annotations

from sidecar.protocol.codes import (
    BUSY,
    COMPACTION_FAILED,
    CONFLICT,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    TOO_LARGE,
    UNAUTHORIZED,
    UNKNOWN_MESSAGE,
    UNKNOWN_PART,
    UNKNOWN_SESSION,
)

__all__ = [
    "BUSY",
    "COMPACTION_FAILED",
    "CONFLICT",
    "INVALID_PARAMS",
    "TOO_LARGE",
    "UNAUTHORIZED",
    "UNKNOWN_MESSAGE",
    "UNKNOWN_PART",
    "UNKNOWN_SESSION",
    "Busy",
    "CompactionFailed",
    "Conflict",
    "InvalidParams",
    "SidecarError",
    "TooLarge",
    "Unauthorized",
    "UnknownMessage",
    "UnknownPart",
    "UnknownSession",
]


class SidecarError(Exception):
    """An error the client caused or must handle; ``str(self)`` is safe to send."""

    code: int = INTERNAL_ERROR

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class UnknownSession(SidecarError):
    code = UNKNOWN_SESSION

    def __init__(self, session_id: str) -> None:
        super().__init__(f"unknown session: {session_id!r}")
        self.session_id = session_id


class UnknownMessage(SidecarError):
    code = UNKNOWN_MESSAGE

    def __init__(self, message_id: str) -> None:
        super().__init__(f"unknown message: {message_id!r}")
        self.message_id = message_id


class UnknownPart(SidecarError):
    code = UNKNOWN_PART

    def __init__(self, part_id: str) -> None:
        super().__init__(f"unknown part: {part_id!r}")


class Conflict(SidecarError):
    code = CONFLICT


class InvalidParams(SidecarError):
    """A value that passed the type check but is still the client's mistake (-32602)."""

    code = INVALID_PARAMS


class TooLarge(SidecarError):
    """A reply over ``server.maxReplyBytes``: the message says how to ask for less."""

    code = TOO_LARGE


class Busy(SidecarError):
    code = BUSY


class CompactionFailed(SidecarError):
    code = COMPACTION_FAILED


class Unauthorized(SidecarError):
    """``initialize`` without the listener's token; the connection is closed after the reply."""

    code = UNAUTHORIZED
