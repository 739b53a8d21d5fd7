"""JSON-RPC 2.0 envelopes, shared by the daemon and the Python client.

``Incoming`` decodes any message with its payload left raw, so the method (or the pending
request it answers) picks the payload's type before it is decoded; the outgoing Structs are
encoded as they are. ``params: UNSET`` leaves the key out (JSON-RPC allows that).
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

JSONRPC = "2.0"


class Incoming(msgspec.Struct):
    """Any message. ``jsonrpc`` is checked after decoding, so a wrong value still gets its
    ``id`` back; an absent ``params``/``result``/``error`` is an empty ``Raw``."""

    jsonrpc: Any = UNSET
    id: int | str | UnsetType | None = UNSET
    method: str | UnsetType = UNSET
    params: msgspec.Raw = msgspec.Raw()
    result: msgspec.Raw = msgspec.Raw()
    error: msgspec.Raw = msgspec.Raw()


class Request(msgspec.Struct):
    jsonrpc: str
    id: int | str
    method: str
    params: Any | UnsetType = UNSET


class Notification(msgspec.Struct):
    jsonrpc: str
    method: str
    params: Any | UnsetType = UNSET


class Response(msgspec.Struct):
    jsonrpc: str
    id: int | str | None
    result: Any


class ErrorBody(msgspec.Struct, omit_defaults=True):
    code: int
    message: str
    data: Any = None


class ErrorResponse(msgspec.Struct):
    jsonrpc: str
    id: int | str | None
    error: ErrorBody
