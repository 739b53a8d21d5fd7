"""The error-code table: every code a reply can carry, with what it means.

JSON-RPC's own codes, LSP's two, and the application codes (-32040..-32048, away from the
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


class ErrorSpec(msgspec.Struct, frozen=True, kw_only=True):
    code: ErrorCode
    meaning: str


ERRORS: tuple[ErrorSpec, ...] = (
    ErrorSpec(code=ErrorCode.PARSE_ERROR, meaning="unparseable frame or invalid JSON"),
    ErrorSpec(
        code=ErrorCode.INVALID_REQUEST,
        meaning="not a JSON-RPC request, a frame over the size limit, or a request after shutdown",
    ),
    ErrorSpec(code=ErrorCode.METHOD_NOT_FOUND, meaning="unknown method"),
    ErrorSpec(code=ErrorCode.INVALID_PARAMS, meaning="params fail validation; names the field"),
    ErrorSpec(code=ErrorCode.INTERNAL_ERROR, meaning="a bug in the daemon, never the client's"),
    ErrorSpec(code=ErrorCode.REQUEST_CANCELLED, meaning="request cancelled ($/cancelRequest)"),
    ErrorSpec(code=ErrorCode.SERVER_NOT_INITIALIZED, meaning="request before initialize"),
    ErrorSpec(code=ErrorCode.UNKNOWN_SESSION, meaning="unknown session"),
    ErrorSpec(code=ErrorCode.UNKNOWN_MESSAGE, meaning="unknown message"),
    ErrorSpec(code=ErrorCode.UNKNOWN_PART, meaning="unknown part, or a part not in the message"),
    ErrorSpec(code=ErrorCode.CONFLICT, meaning="conflict: the id exists or belongs elsewhere"),
    ErrorSpec(code=ErrorCode.BUSY, meaning="busy: the session is compacting"),
    ErrorSpec(code=ErrorCode.COMPACTION_FAILED, meaning="compaction failed"),
    ErrorSpec(code=ErrorCode.UNAUTHORIZED, meaning="initialize on TCP without the authToken"),
    ErrorSpec(code=ErrorCode.TOO_LARGE, meaning="a reply over server.maxReplyBytes; page instead"),
    ErrorSpec(
        code=ErrorCode.UNAVAILABLE,
        meaning="the database cannot be reached now; nothing was stored, retry later",
    ),
)
