"""Generated: the ``Client``'s method wrappers, one per row of the method table.

Written by ``python -m sidecar.protocol.clients`` from ``sidecar/protocol/methods.py``.
Do not edit: change the table and regenerate."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar, overload

import msgspec
from msgspec import UNSET, UnsetType

from sidecar.model.config import Config
from sidecar.model.daemon import DaemonStatus
from sidecar.model.messages import Message, ModelRef
from sidecar.model.parts import Part
from sidecar.model.rpc import (
    BreakdownResult,
    CompactionRecord,
    CompactionsResult,
    CompactResult,
    HistoryExpandResult,
    HistorySearchResult,
    OverflowModel,
    OverflowResult,
    Pin,
    PinsResult,
    PruneResult,
    SessionList,
    UncompactResult,
)
from sidecar.model.session import Session
from sidecar.model.tokens import Tokens
from sidecar_client._types import ContextResult, MessagesPage

_MessageT = TypeVar("_MessageT", bound=Message)
_PartT = TypeVar("_PartT", bound=Part)


def clean_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The params without their ``None`` values (left out: the daemon's default)."""
    return {k: v for k, v in params.items() if v is not None}


class Methods:
    """Each request a client sends, typed: params in, the result decoded out."""

    async def _rpc(
        self, method: str, params: Any, result: Any, timeout: float | UnsetType | None
    ) -> Any:
        """Send ``method`` and decode its reply into ``result`` (``Client.request``)."""
        raise NotImplementedError

    async def shutdown(self, *, timeout: float | UnsetType | None = UNSET) -> None:
        """``shutdown``."""
        await self._rpc("shutdown", {}, None, timeout)

    async def create_session(
        self,
        *,
        id: str | None = None,
        title: str | None = None,
        parent_id: str | None = None,
        directory: str | None = None,
        timeout: float | UnsetType | None = UNSET,
    ) -> Session:
        """``session/create``."""
        result: Session = await self._rpc(
            "session/create",
            clean_params({"id": id, "title": title, "parentID": parent_id, "directory": directory}),
            Session,
            timeout,
        )
        return result

    async def get_session(
        self, session_id: str, *, timeout: float | UnsetType | None = UNSET
    ) -> Session:
        """``session/get``."""
        result: Session = await self._rpc(
            "session/get", clean_params({"sessionID": session_id}), Session, timeout
        )
        return result

    async def list_sessions(
        self,
        limit: int | None = None,
        cursor: str | None = None,
        *,
        timeout: float | UnsetType | None = UNSET,
    ) -> SessionList:
        """``session/list``."""
        result: SessionList = await self._rpc(
            "session/list", clean_params({"limit": limit, "cursor": cursor}), SessionList, timeout
        )
        return result

    async def delete_session(
        self, session_id: str, *, timeout: float | UnsetType | None = UNSET
    ) -> None:
        """``session/delete``."""
        await self._rpc("session/delete", clean_params({"sessionID": session_id}), None, timeout)

    async def messages(
        self,
        session_id: str,
        limit: int | None = None,
        cursor: str | None = None,
        *,
        part_limit: int | None = None,
        timeout: float | UnsetType | None = UNSET,
    ) -> MessagesPage:
        """``session/messages``: full history, chronological."""
        result: MessagesPage = await self._rpc(
            "session/messages",
            clean_params(
                {"sessionID": session_id, "limit": limit, "cursor": cursor, "partLimit": part_limit}
            ),
            MessagesPage,
            timeout,
        )
        return result

    async def subscribe(
        self, session_id: str, *, timeout: float | UnsetType | None = UNSET
    ) -> None:
        """``session/subscribe``: sessionID "*" subscribes to every session."""
        await self._rpc("session/subscribe", clean_params({"sessionID": session_id}), None, timeout)

    async def unsubscribe(
        self, session_id: str, *, timeout: float | UnsetType | None = UNSET
    ) -> None:
        """``session/unsubscribe``."""
        await self._rpc(
            "session/unsubscribe", clean_params({"sessionID": session_id}), None, timeout
        )

    async def context(
        self,
        session_id: str,
        format: Literal["parts", "openai", "anthropic"] = "parts",
        *,
        wait: bool = True,
        fit: bool = True,
        since: str | None = None,
        overhead_tokens: int | None = None,
        timeout: float | UnsetType | None = UNSET,
    ) -> ContextResult:
        """``session/context``: the filtered window."""
        result: ContextResult = await self._rpc(
            "session/context",
            clean_params(
                {
                    "sessionID": session_id,
                    "format": format,
                    "wait": wait,
                    "fit": fit,
                    "since": since,
                    "overheadTokens": overhead_tokens,
                }
            ),
            ContextResult,
            timeout,
        )
        return result

    async def breakdown(
        self,
        session_id: str,
        *,
        wait: bool = True,
        overhead_tokens: int | None = None,
        timeout: float | UnsetType | None = UNSET,
    ) -> BreakdownResult:
        """``session/breakdown``: what fills the window the next session/context serves."""
        result: BreakdownResult = await self._rpc(
            "session/breakdown",
            clean_params(
                {"sessionID": session_id, "wait": wait, "overheadTokens": overhead_tokens}
            ),
            BreakdownResult,
            timeout,
        )
        return result

    async def overflow(
        self,
        session_id: str | None = None,
        *,
        wait: bool = True,
        tokens: Tokens | Mapping[str, Any] | None = None,
        model: OverflowModel | Mapping[str, Any] | None = None,
        timeout: float | UnsetType | None = UNSET,
    ) -> OverflowResult:
        """``session/overflow``."""
        result: OverflowResult = await self._rpc(
            "session/overflow",
            clean_params({"sessionID": session_id, "wait": wait, "tokens": tokens, "model": model}),
            OverflowResult,
            timeout,
        )
        return result

    async def idle(self, session_id: str, *, timeout: float | UnsetType | None = UNSET) -> None:
        """``session/idle``: answered once automatic work has finished."""
        await self._rpc("session/idle", clean_params({"sessionID": session_id}), None, timeout)

    async def prune(
        self, session_id: str, *, timeout: float | UnsetType | None = UNSET
    ) -> PruneResult:
        """``session/prune``."""
        result: PruneResult = await self._rpc(
            "session/prune", clean_params({"sessionID": session_id}), PruneResult, timeout
        )
        return result

    async def compact(
        self,
        session_id: str,
        auto: bool = False,
        *,
        model: ModelRef | Mapping[str, Any] | None = None,
        instructions: str | None = None,
        work_done_token: str | int | None = None,
        up_to: str | None = None,
        timeout: float | UnsetType | None = UNSET,
    ) -> CompactResult:
        """``session/compact``."""
        result: CompactResult = await self._rpc(
            "session/compact",
            clean_params(
                {
                    "sessionID": session_id,
                    "model": model,
                    "auto": auto,
                    "instructions": instructions,
                    "workDoneToken": work_done_token,
                    "upTo": up_to,
                }
            ),
            CompactResult,
            timeout,
        )
        return result

    async def fork(
        self,
        session_id: str,
        message_id: str | None = None,
        *,
        timeout: float | UnsetType | None = UNSET,
    ) -> Session:
        """``session/fork``."""
        result: Session = await self._rpc(
            "session/fork",
            clean_params({"sessionID": session_id, "messageID": message_id}),
            Session,
            timeout,
        )
        return result

    async def revert(
        self,
        session_id: str,
        message_id: str,
        part_id: str | None = None,
        *,
        timeout: float | UnsetType | None = UNSET,
    ) -> Session:
        """``session/revert``."""
        result: Session = await self._rpc(
            "session/revert",
            clean_params({"sessionID": session_id, "messageID": message_id, "partID": part_id}),
            Session,
            timeout,
        )
        return result

    async def unrevert(
        self, session_id: str, *, timeout: float | UnsetType | None = UNSET
    ) -> Session:
        """``session/unrevert``."""
        result: Session = await self._rpc(
            "session/unrevert", clean_params({"sessionID": session_id}), Session, timeout
        )
        return result

    async def compactions(
        self, session_id: str, *, timeout: float | UnsetType | None = UNSET
    ) -> list[CompactionRecord]:
        """``session/compactions``: each compaction's diagnostics, oldest first."""
        result: CompactionsResult = await self._rpc(
            "session/compactions",
            clean_params({"sessionID": session_id}),
            CompactionsResult,
            timeout,
        )
        return result.compactions

    async def uncompact(
        self,
        session_id: str,
        message_id: str | None = None,
        *,
        restore_pruned: bool = False,
        timeout: float | UnsetType | None = UNSET,
    ) -> list[str]:
        """``session/uncompact``: undo the newest (or the named and every later) compaction."""
        result: UncompactResult = await self._rpc(
            "session/uncompact",
            clean_params(
                {"sessionID": session_id, "messageID": message_id, "restorePruned": restore_pruned}
            ),
            UncompactResult,
            timeout,
        )
        return result.removed

    async def pin(
        self,
        session_id: str,
        message_id: str,
        part_id: str | None = None,
        pinned: bool = True,
        *,
        timeout: float | UnsetType | None = UNSET,
    ) -> None:
        """``part/pin``: pin or unpin a part (or every part of a message)."""
        await self._rpc(
            "part/pin",
            clean_params(
                {
                    "sessionID": session_id,
                    "messageID": message_id,
                    "partID": part_id,
                    "pinned": pinned,
                }
            ),
            None,
            timeout,
        )

    async def pins(
        self, session_id: str, *, timeout: float | UnsetType | None = UNSET
    ) -> list[Pin]:
        """``session/pins``."""
        result: PinsResult = await self._rpc(
            "session/pins", clean_params({"sessionID": session_id}), PinsResult, timeout
        )
        return result.pins

    @overload
    async def update_message(
        self, message: _MessageT, *, timeout: float | UnsetType | None = UNSET
    ) -> _MessageT: ...

    @overload
    async def update_message(
        self, message: Mapping[str, Any], *, timeout: float | UnsetType | None = UNSET
    ) -> Message: ...

    async def update_message(
        self, message: Message | Mapping[str, Any], *, timeout: float | UnsetType | None = UNSET
    ) -> Message:
        """``message/update``: upsert; echoes the stored message. The stored object comes back as
        the type sent (a mapping: by its tag)."""
        result_type: Any = type(message) if isinstance(message, msgspec.Struct) else Message
        stored: Message = await self._rpc(
            "message/update", {"message": message}, result_type, timeout
        )
        return stored

    async def remove_message(
        self, session_id: str, message_id: str, *, timeout: float | UnsetType | None = UNSET
    ) -> None:
        """``message/remove``."""
        await self._rpc(
            "message/remove",
            clean_params({"sessionID": session_id, "messageID": message_id}),
            None,
            timeout,
        )

    @overload
    async def update_part(
        self, part: _PartT, *, timeout: float | UnsetType | None = UNSET
    ) -> _PartT: ...

    @overload
    async def update_part(
        self, part: Mapping[str, Any], *, timeout: float | UnsetType | None = UNSET
    ) -> Part: ...

    async def update_part(
        self, part: Part | Mapping[str, Any], *, timeout: float | UnsetType | None = UNSET
    ) -> Part:
        """``part/update``: upsert; echoes the stored part. The stored object comes back as the type
        sent (a mapping: by its tag)."""
        result_type: Any = type(part) if isinstance(part, msgspec.Struct) else Part
        stored: Part = await self._rpc("part/update", {"part": part}, result_type, timeout)
        return stored

    async def remove_part(
        self,
        session_id: str,
        message_id: str,
        part_id: str,
        *,
        timeout: float | UnsetType | None = UNSET,
    ) -> None:
        """``part/remove``."""
        await self._rpc(
            "part/remove",
            clean_params({"sessionID": session_id, "messageID": message_id, "partID": part_id}),
            None,
            timeout,
        )

    async def search_history(
        self,
        session_id: str,
        query: str,
        *,
        limit: int = 20,
        before: str | None = None,
        kinds: Sequence[Literal["text", "reasoning", "tool"]] | None = None,
        include_recall: bool = False,
        timeout: float | UnsetType | None = UNSET,
    ) -> HistorySearchResult:
        """``history/search``: full-text search of stored history; sessionID "*" searches every
        session."""
        result: HistorySearchResult = await self._rpc(
            "history/search",
            clean_params(
                {
                    "sessionID": session_id,
                    "query": query,
                    "limit": limit,
                    "before": before,
                    "kinds": kinds,
                    "includeRecall": include_recall,
                }
            ),
            HistorySearchResult,
            timeout,
        )
        return result

    async def expand_history(
        self,
        session_id: str,
        message_id: str,
        part_id: str | None = None,
        *,
        offset: int = 0,
        max_chars: int = 20000,
        timeout: float | UnsetType | None = UNSET,
    ) -> HistoryExpandResult:
        """``history/expand``: a message's or part's original content, paged by characters."""
        result: HistoryExpandResult = await self._rpc(
            "history/expand",
            clean_params(
                {
                    "sessionID": session_id,
                    "messageID": message_id,
                    "partID": part_id,
                    "offset": offset,
                    "maxChars": max_chars,
                }
            ),
            HistoryExpandResult,
            timeout,
        )
        return result

    async def get_config(self, *, timeout: float | UnsetType | None = UNSET) -> Config:
        """``config/get``: the effective config, secrets redacted."""
        result: Config = await self._rpc("config/get", {}, Config, timeout)
        return result

    async def update_config(
        self, config: Mapping[str, Any], *, timeout: float | UnsetType | None = UNSET
    ) -> Config:
        """``config/update``: partial, deep-merged."""
        result: Config = await self._rpc(
            "config/update", clean_params({"config": config}), Config, timeout
        )
        return result

    async def daemon_status(self, *, timeout: float | UnsetType | None = UNSET) -> DaemonStatus:
        """``daemon/status``: extension: the daemon's pid, listener, db, load."""
        result: DaemonStatus = await self._rpc("daemon/status", {}, DaemonStatus, timeout)
        return result

    async def stop_daemon(self, *, timeout: float | UnsetType | None = UNSET) -> None:
        """``daemon/stop``: extension: answered, then the daemon stops."""
        await self._rpc("daemon/stop", {}, None, timeout)
