"""Typed asyncio client for the compaction-sidecar daemon.

``client = await spawn("sessions.db")`` starts a private daemon on stdio;
``client = await connect("unix:/run/user/1000/sidecar.sock")`` joins a shared one. Both return
an initialized ``Client``; see README.md.
"""

from sidecar.protocol.codes import ErrorCode
from sidecar_client._client import (
    Call,
    Client,
    ConnectionClosed,
    ContextWindow,
    RpcError,
    connect,
    spawn,
)
from sidecar_client._types import MessagesPage, StoredMessage

__all__ = [
    "Call",
    "Client",
    "ConnectionClosed",
    "ContextWindow",
    "ErrorCode",
    "MessagesPage",
    "RpcError",
    "StoredMessage",
    "connect",
    "spawn",
]
