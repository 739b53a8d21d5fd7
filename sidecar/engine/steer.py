"""Steering compaction (PROTOCOL.md "Steering compaction"): what a summary keeps verbatim, and
which turn a piece of work is about (the model and agent that select ``compaction.overrides``).

The ``## Kept verbatim`` block is rebuilt from the stored data at every compaction (the first
request, the latest todo output, the pinned parts), never copied from the previous summary:
what it holds cannot drift or be paraphrased away by a writer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sidecar.engine.ports import StorePort
from sidecar.engine.tokens import estimate
from sidecar.model.config import Config, KeepConfig
from sidecar.model.conversation import is_marker
from sidecar.model.messages import AssistantMessage, UserMessage, WithParts
from sidecar.model.parts import Part, TextPart, ToolCompleted, ToolPart
from sidecar.store import Key

TITLE = "## Kept verbatim"
SHORTENED = (
    "\n[shortened to fit compaction.keep.maxTokens: kept the first {n} of {total} characters]"
)
OMITTED = "[omitted to fit compaction.keep.maxTokens: {total} characters]"
_BLOCK = re.compile(r"\n*## Kept verbatim\n.*?(?=\n+## Artifact ledger\n|\n+```ledger\n|\Z)", re.S)


def drop_block(text: str) -> str:
    """``text`` without its kept block (what a writer sees of an earlier summary)."""
    if TITLE not in text:
        return text
    return _BLOCK.sub("", text).rstrip()


def block_of(text: str) -> str:
    """The kept block of a summary's ``text`` ("" when it has none): ``session/breakdown``
    counts it apart from the summary's own prose."""
    if TITLE not in text:
        return ""
    found = _BLOCK.search(text)
    return found.group(0) if found else ""


def turn_of(window: Sequence[WithParts]) -> tuple[str | None, str | None]:
    """``(provider/model, agent)`` of the latest user message (a read, a manual compaction)."""
    for m in reversed(window):
        if isinstance(m.info, UserMessage) and not is_marker(m):
            model = m.info.model
            name = f"{model.provider_id}/{model.model_id}" if model is not None else None
            return name, m.info.agent
    return None, None


def turn_of_assistant(info: AssistantMessage) -> tuple[str | None, str | None]:
    """``(provider/model, agent)`` of the assistant message that ended a turn."""
    model = f"{info.provider_id}/{info.model_id}" if info.provider_id or info.model_id else None
    return model, info.agent


def for_window(cfg: Config, window: Sequence[WithParts]) -> Config:
    model, agent = turn_of(window)
    return cfg.for_turn(model, agent)


@dataclass
class _Item:
    heading: str
    text: str
    total: int = 0
    shortened: bool = False
    omitted: bool = False

    def render(self) -> str:
        if self.omitted:
            body = OMITTED.format(total=self.total)
        elif self.shortened:
            body = self.text + SHORTENED.format(n=len(self.text), total=self.total)
        else:
            body = self.text
        return f"### {self.heading}\n{body}"


def _render(items: Sequence[_Item]) -> str:
    if not items:
        return ""
    return TITLE + "\n\n" + "\n\n".join(i.render() for i in items) + "\n"


def _text_of(part: Part) -> str | None:
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, ToolPart) and isinstance(part.state, ToolCompleted):
        return part.state.output
    return None


async def kept_block(
    store: StorePort, session_id: str, keep: KeepConfig, budget: int, cutoff: Key | None = None
) -> str:
    """The ``## Kept verbatim`` block, at most ``budget`` tokens: empty when nothing is kept.
    Over budget, the oldest pins are shortened first (then the first request, then the todo
    list: the current state goes last), each saying so."""
    items: list[_Item] = []
    if keep.first_request:
        first = await store.first_user_message(session_id)
        if first is not None:
            text = "\n".join(
                p.text for p in first.parts if isinstance(p, TextPart) and not p.synthetic
            )
            if text:
                items.append(_Item("First request", text))
    if keep.todo_tools:
        todo = await _latest_todo(store, session_id, set(keep.todo_tools), cutoff)
        if todo is not None:
            items.append(_Item(f"Todo list ({todo.tool})", _text_of(todo) or ""))
    pins: list[_Item] = []
    if keep.pinned:
        for part in await store.pinned_parts(session_id):
            found = _text_of(part)
            if found is None:
                continue
            what = f"tool {part.tool}" if isinstance(part, ToolPart) else "text"
            pins.append(_Item(f"Pinned {what} (message {part.message_id}, part {part.id})", found))
    items += pins
    for item in items:
        item.total = len(item.text)
    # Shorten in this order until it fits: oldest pin first, then first request, then todo.
    order = pins + [i for i in items if i not in pins]
    while items and estimate(_render(items)) > budget:
        victim = next((i for i in order if not i.omitted), None)
        if victim is None:
            return ""
        over_chars = (estimate(_render(items)) - budget) * 4 + 8
        note = len(SHORTENED.format(n=len(victim.text), total=victim.total))
        keep_chars = len(victim.text) - over_chars - (0 if victim.shortened else note)
        if keep_chars <= 0:
            victim.omitted = True
            victim.text = ""
        else:
            victim.text = victim.text[:keep_chars]
            victim.shortened = True
    return _render(items)


async def _latest_todo(
    store: StorePort, session_id: str, tools: set[str], cutoff: Key | None
) -> ToolPart | None:
    async for page in store.newest_first(session_id):
        for m in page:
            if cutoff is not None and Key(m.info.time.created, m.info.id) > cutoff:
                continue
            for p in reversed(m.parts):
                done = isinstance(p, ToolPart) and isinstance(p.state, ToolCompleted)
                if done and isinstance(p, ToolPart) and p.tool in tools:
                    return p
    return None
