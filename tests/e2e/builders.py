"""Small builders for wire payloads (plain dicts, wire names)."""

from __future__ import annotations

from typing import Any


def user_message(session_id: str, **fields: Any) -> dict[str, Any]:
    return {"sessionID": session_id, "role": "user", **fields}


def assistant_message(session_id: str, parent_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "sessionID": session_id,
        "role": "assistant",
        "parentID": parent_id,
        "providerID": "test",
        "modelID": "test-model",
        **fields,
    }


def text_part(session_id: str, message_id: str, text: str, **fields: Any) -> dict[str, Any]:
    return {
        "sessionID": session_id,
        "messageID": message_id,
        "type": "text",
        "text": text,
        **fields,
    }


def rpc_frame(body: bytes, extra_headers: bytes = b"") -> bytes:
    """A frame around ``body``; ``extra_headers`` are complete header lines (CRLF-ended)."""
    return b"Content-Length: %d\r\n%b\r\n%b" % (len(body), extra_headers, body)
