"""User and assistant messages, a tagged union on ``role``, and the ``{info, parts}`` pair."""

from __future__ import annotations

from typing import Any

import msgspec

from sidecar.model.base import Base, Count
from sidecar.model.parts import Part
from sidecar.model.tokens import Tokens


class MessageTime(Base, kw_only=True):
    created: Count = 0
    completed: Count | None = None


class ModelRef(Base, kw_only=True):
    provider_id: str
    model_id: str


class MessageError(Base, kw_only=True):
    """OpenCode's ``NamedError`` shape: ``{name, data}``."""

    name: str
    data: dict[str, Any] | None = None


class MessageBase(Base, tag_field="role", kw_only=True, weakref=True):
    # Weakly referenceable, as parts are (``engine/memo.py``).
    id: str = ""
    session_id: str
    time: MessageTime = msgspec.field(default_factory=MessageTime)


class UserMessage(MessageBase, tag="user", kw_only=True):
    agent: str | None = None
    model: ModelRef | None = None
    system: str | None = None
    tools: dict[str, bool] | None = None
    summary: dict[str, Any] | None = None  # session title/diff summary, not compaction
    variant: str | None = None


class AssistantMessage(MessageBase, tag="assistant", kw_only=True):
    parent_id: str = ""
    provider_id: str = ""
    model_id: str = ""
    mode: str | None = None
    agent: str | None = None
    path: dict[str, str] | None = None
    summary: bool | None = None
    cost: float = 0.0
    tokens: Tokens = msgspec.field(default_factory=Tokens)
    finish: str | None = None
    error: MessageError | None = None


Message = UserMessage | AssistantMessage


class WithParts(msgspec.Struct, kw_only=True, weakref=True):
    """A message with its parts in id order: the unit the engine reads and renders."""

    info: Message
    parts: list[Part] = msgspec.field(default_factory=list)
