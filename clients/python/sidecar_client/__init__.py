"""Typed asyncio client for the compaction-sidecar daemon.

``client = await spawn("sessions.db")`` starts a private daemon on stdio;
``client = await connect_shared()`` joins the shared background daemon (starting it when none
runs, as ``compaction-sidecar connect`` does); ``connect("unix:/path")`` or
``connect("tcp://127.0.0.1:PORT", auth_token=...)`` joins a daemon at an address. Each returns
an initialized ``Client``; see README.md.

Messages and parts are the daemon's own msgspec Structs (``sidecar.model``), re-exported here:
Python code uses their snake_case attributes, and the wire's camelCase names appear only on the
wire.
"""

from sidecar.model.daemon import DaemonStatus
from sidecar.model.messages import (
    AssistantMessage,
    Message,
    MessageError,
    MessageTime,
    ModelRef,
    UserMessage,
    WithParts,
)
from sidecar.model.parts import (
    AgentPart,
    CompactionPart,
    FilePart,
    Part,
    PartTime,
    PatchPart,
    ReasoningPart,
    RetryPart,
    SnapshotPart,
    StepFinishPart,
    StepStartPart,
    SubtaskPart,
    TextPart,
    ToolCompleted,
    ToolError,
    ToolPart,
    ToolPending,
    ToolRunning,
    ToolState,
    ToolTime,
)
from sidecar.model.rpc import (
    BreakdownCategory,
    BreakdownItem,
    BreakdownResult,
    CompactedEvent,
    CompactionRecord,
    CompactResult,
    ContextResult,
    HistoryExpandResult,
    HistoryHit,
    HistorySearchResult,
    OverflowResult,
    Pin,
    PruneResult,
    SessionList,
)
from sidecar.model.session import Session
from sidecar.model.tokens import CacheTokens, ModelLimit, Tokens
from sidecar.protocol.codes import ErrorCode
from sidecar.shared_daemon.paths import default_socket_path
from sidecar_client._client import Call, Client
from sidecar_client._connect import connect, connect_shared, spawn
from sidecar_client._inbox import ConnectionClosed, RpcError
from sidecar_client._types import MessagesPage
from sidecar_client._window import ContextWindow

__all__ = [
    "AgentPart",
    "AssistantMessage",
    "BreakdownCategory",
    "BreakdownItem",
    "BreakdownResult",
    "CacheTokens",
    "Call",
    "Client",
    "CompactResult",
    "CompactedEvent",
    "CompactionPart",
    "CompactionRecord",
    "ConnectionClosed",
    "ContextResult",
    "ContextWindow",
    "DaemonStatus",
    "ErrorCode",
    "FilePart",
    "HistoryExpandResult",
    "HistoryHit",
    "HistorySearchResult",
    "Message",
    "MessageError",
    "MessageTime",
    "MessagesPage",
    "ModelLimit",
    "ModelRef",
    "OverflowResult",
    "Part",
    "PartTime",
    "PatchPart",
    "Pin",
    "PruneResult",
    "ReasoningPart",
    "RetryPart",
    "RpcError",
    "Session",
    "SessionList",
    "SnapshotPart",
    "StepFinishPart",
    "StepStartPart",
    "SubtaskPart",
    "TextPart",
    "Tokens",
    "ToolCompleted",
    "ToolError",
    "ToolPart",
    "ToolPending",
    "ToolRunning",
    "ToolState",
    "ToolTime",
    "UserMessage",
    "WithParts",
    "connect",
    "connect_shared",
    "default_socket_path",
    "spawn",
]
