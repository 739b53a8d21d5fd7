"""Application errors, raised by lower layers and mapped by the server to error replies.

The codes come from the one table, ``sidecar.protocol.codes`` (which imports nothing of ours).
"""

from __future__ import annotations

from sidecar.protocol.codes import ErrorCode

__all__ = [
    "Busy",
    "CompactionFailed",
    "Conflict",
    "ErrorCode",
    "InvalidParams",
    "SidecarError",
    "StoreDamaged",
    "TooLarge",
    "Unauthorized",
    "Unavailable",
    "UnknownMessage",
    "UnknownPart",
    "UnknownSession",
]


class SidecarError(Exception):
    """An error the client caused or must handle; ``str(self)`` is safe to send."""

    code: int = ErrorCode.INTERNAL_ERROR

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class UnknownSession(SidecarError):
    code = ErrorCode.UNKNOWN_SESSION

    def __init__(self, session_id: str) -> None:
        super().__init__(f"unknown session: {session_id!r}")
        self.session_id = session_id


class UnknownMessage(SidecarError):
    code = ErrorCode.UNKNOWN_MESSAGE

    def __init__(self, message_id: str) -> None:
        super().__init__(f"unknown message: {message_id!r}")
        self.message_id = message_id


class UnknownPart(SidecarError):
    code = ErrorCode.UNKNOWN_PART

    def __init__(self, part_id: str) -> None:
        super().__init__(f"unknown part: {part_id!r}")


class Conflict(SidecarError):
    """What the request would create exists already (a session id taken)."""

    code = ErrorCode.CONFLICT


class InvalidParams(SidecarError):
    """A value that passed the type check but is still the client's mistake (-32602)."""

    code = ErrorCode.INVALID_PARAMS


class TooLarge(SidecarError):
    """A reply over ``server.maxReplyBytes``: the message says how to ask for less."""

    code = ErrorCode.TOO_LARGE


class Busy(SidecarError):
    """The session is compacting (here or in another daemon): retry once it finished."""

    code = ErrorCode.BUSY


class CompactionFailed(SidecarError):
    """The summary could not be written; the compaction removed what it appended."""

    code = ErrorCode.COMPACTION_FAILED


class Unauthorized(SidecarError):
    """``initialize`` without the listener's token; the connection is closed after the reply."""

    code = ErrorCode.UNAUTHORIZED


class Unavailable(SidecarError):
    """The database (a PostgreSQL server) cannot be reached: nothing was stored."""

    code = ErrorCode.UNAVAILABLE


class StoreDamaged(SidecarError):
    """A stored row the daemon cannot read: the file was damaged or changed behind its back.
    Not a bug of the daemon (-32603) but of the data; the request changed nothing. The store
    raises it with what it met; the server adds which store (``at``)."""

    code = ErrorCode.STORE_DAMAGED

    def __init__(self, what: str, store: str | None = None) -> None:
        where = "the store" if store is None else f"the store {store}"
        super().__init__(
            f"{where} is damaged or was changed outside the daemon: {what}; nothing was changed"
        )
        self.what = what

    def at(self, store: str) -> StoreDamaged:
        """The same error, naming ``store`` (a file, or a URL without its password)."""
        return StoreDamaged(self.what, store)
