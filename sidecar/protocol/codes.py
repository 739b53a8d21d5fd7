"""The error-code table: every code a reply can carry, with what it means.

JSON-RPC's own codes, LSP's two, and the application codes (-32040..-32049, away from the
LSP-reserved -32001/-32002). ``sidecar.errors`` raises with these, the server replies with
them, the clients compare against them, and PROTOCOL.md's table is checked against ``ERRORS``.
"""

from __future__ import annotations

from enum import IntEnum

import msgspec


class ErrorCode(IntEnum):
    """An ``IntEnum`` so that a code is an ``int`` on the wire and in comparisons."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    SERVER_NOT_INITIALIZED = -32002
    REQUEST_CANCELLED = -32800
    UNKNOWN_SESSION = -32040
    UNKNOWN_MESSAGE = -32041
    UNKNOWN_PART = -32042
    CONFLICT = -32043
    BUSY = -32044
    COMPACTION_FAILED = -32045
    UNAUTHORIZED = -32046
    TOO_LARGE = -32047
    UNAVAILABLE = -32048
    STORE_DAMAGED = -32049


class ErrorSpec(msgspec.Struct, frozen=True, kw_only=True):
    code: ErrorCode
    meaning: str


#: What each code means, in the order PROTOCOL.md and the schema list them.
_MEANINGS: dict[ErrorCode, str] = {
    ErrorCode.PARSE_ERROR: "unparseable frame or invalid JSON",
    ErrorCode.INVALID_REQUEST: (
        "not a JSON-RPC request, a frame over the size limit, or a request after shutdown"
    ),
    ErrorCode.METHOD_NOT_FOUND: "unknown method",
    ErrorCode.INVALID_PARAMS: "params fail validation; names the field",
    ErrorCode.INTERNAL_ERROR: "a bug in the daemon, never the client's",
    ErrorCode.REQUEST_CANCELLED: "request cancelled ($/cancelRequest)",
    ErrorCode.SERVER_NOT_INITIALIZED: "request before initialize",
    ErrorCode.UNKNOWN_SESSION: "unknown session",
    ErrorCode.UNKNOWN_MESSAGE: "unknown message",
    ErrorCode.UNKNOWN_PART: "unknown part, or a part not in the message",
    ErrorCode.CONFLICT: "conflict: the id exists or belongs elsewhere",
    ErrorCode.BUSY: "busy: the session is compacting",
    ErrorCode.COMPACTION_FAILED: "compaction failed",
    ErrorCode.UNAUTHORIZED: "initialize on TCP without the authToken",
    ErrorCode.TOO_LARGE: "a reply over server.maxReplyBytes; page instead",
    ErrorCode.UNAVAILABLE: "the database cannot be reached now; nothing was stored, retry later",
    ErrorCode.STORE_DAMAGED: (
        "the store holds a row the daemon cannot read (a damaged or altered database); "
        "nothing was changed"
    ),
}
ERRORS: tuple[ErrorSpec, ...] = tuple(
    ErrorSpec(code=code, meaning=meaning) for code, meaning in _MEANINGS.items()
)
