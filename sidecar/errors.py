"""Application errors with their JSON-RPC codes (documented in PROTOCOL.md).

Lower layers raise these; the server maps them to JSON-RPC error responses. Codes sit in the
JSON-RPC server-error range, away from the LSP-reserved -32001/-32002.
"""

from __future__ import annotations

UNKNOWN_SESSION = -32040
UNKNOWN_MESSAGE = -32041
UNKNOWN_PART = -32042
CONFLICT = -32043
BUSY = -32044
COMPACTION_FAILED = -32045
UNAUTHORIZED = -32046
TOO_LARGE = -32047
INVALID_PARAMS = -32602


class SidecarError(Exception):
    """An error the client caused or must handle; ``str(self)`` is safe to send."""

    code: int = -32603

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
