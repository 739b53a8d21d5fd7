"""Context rendering: a filtered window as stored parts, OpenAI chat messages or Anthropic
Messages (PROTOCOL.md, "Engine rules"; OpenCode's MessageV2.toModelMessages).

Both chat formats go through one neutral form (``_turns``), so they share every rule: which
assistant messages are skipped, how ``step-start`` splits a message, what a pending, failed or
pruned tool call sends, and that each call is answered exactly once, right after it. Providers
reject a window that breaks that pairing, and a session that hits it cannot recover.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import msgspec

from sidecar.engine.memo import LiveMemo
from sidecar.model import parts
from sidecar.model.conversation import CLEARED, COMPACTION_TEXT, INTERRUPTED
from sidecar.model.messages import AssistantMessage, UserMessage, WithParts
from sidecar.model.tokens import estimate
from sidecar.toolcalls import outputs, shell
from sidecar.toolcalls import vocabulary as tools

SUBTASK_TEXT = "The following tool was executed by the user"
TOOL_MEDIA_TEXT = "Attached media from tool result:"
ABORTED = "MessageAbortedError"

# Files OpenCode has already inlined as synthetic text parts (file contents, directory listings).
SKIPPED_FILE_MIMES = frozenset({"text/plain", "application/x-directory"})
# Image types both providers accept as image input; others are described in text instead.
IMAGE_MIMES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def is_skipped_file(mime: str) -> bool:
    return mime in SKIPPED_FILE_MIMES


def is_media(mime: str) -> bool:
    """Binary media: what ``strip_media`` turns into a text line."""
    return mime.startswith("image/") or mime == "application/pdf"


def attached_text(part: parts.FilePart) -> str:
    return f"[Attached {part.mime}: {part.filename or 'file'}]"


# -- pruned outputs ----------------------------------------------------------------------------

Stub = Literal["opencode", "informative"]
STUB_ARGUMENT_CHARS = 120


def stub(part: parts.ToolPart, mode: Stub = "opencode") -> str:
    """What a pruned tool output is sent as. ``opencode``: OpenCode's placeholder.
    ``informative`` (``compaction.prunedStub``): the same words followed, on one line, by the
    tool, its main argument (file or command), its exit status, the output's size and its first
    error line, so the model still knows what the call did and whether it worked."""
    state = part.state
    if mode == "opencode" or not isinstance(state, parts.ToolCompleted):
        return CLEARED
    data = state.input if isinstance(state.input, dict) else {}
    arg = outputs.one_line(tools.main_argument(part.tool, data), STUB_ARGUMENT_CHARS)
    output = state.output
    code = outputs.exit_status(output, state.metadata)
    facts = [f"{part.tool}" + (f" {arg}" if arg else "")]
    if code is not None:
        facts.append(f"exit {code}")
    facts.append(f"{len(output):,} chars")
    shows_only = tools.tool_kind(part.tool, data) in ("read", "search") or (
        tools.tool_kind(part.tool, data) == "shell"
        and not tools.runs_something(shell.analyse(tools.shell_script(data)).commands)
    )
    if not shows_only or (code is not None and code != 0):
        sigs = outputs.error_signatures(output)
        if sigs:
            facts.append(f"first error: {sigs[0]}")
    return f"{CLEARED} " + "; ".join(facts)


def stub_extra(window: Sequence[WithParts], mode: Stub) -> int:
    """Tokens the informative stubs of ``window`` take beyond OpenCode's placeholder, which is
    what the window's estimate counts for a pruned output."""
    if mode == "opencode":
        return 0
    base = estimate(CLEARED)
    return sum(
        estimate(stub(p, mode)) - base
        for m in window
        for p in m.parts
        if isinstance(p, parts.ToolPart)
        and isinstance(p.state, parts.ToolCompleted)
        and p.state.time.compacted
    )


# -- parts -------------------------------------------------------------------------------------


def _clear(part: parts.Part, mode: Stub = "opencode") -> parts.Part:
    if isinstance(part, parts.ToolPart):
        state = part.state
        if isinstance(state, parts.ToolCompleted) and state.time.compacted:
            state = msgspec.structs.replace(state, output=stub(part, mode), attachments=None)
            return msgspec.structs.replace(part, state=state)
    return part


_MEMO_LIMIT = 50_000
# A message's rendering by its ``WithParts``, while it lives (``engine/memo.py``): the window
# cache hands back the same one until the message or one of its parts is written, and no one
# changes a ``WithParts`` once made.
_parts_memo: LiveMemo[dict[str, Any]] = LiveMemo(_MEMO_LIMIT)


def to_parts(
    window: Sequence[WithParts], raws: Mapping[str, str] | None = None, stub: Stub = "opencode"
) -> list[dict[str, Any]]:
    """The window as stored ``{info, parts}`` (wire names), pruned outputs cleared, nothing
    dropped: for frontends that do their own provider conversion, as OpenCode does.

    With ``raws`` (stored JSON by id, from the store) unchanged messages and parts are passed
    through as stored — unknown fields included, and without re-encoding them — and each
    message's entry is remembered while it is the same ``WithParts`` (see ``to_openai``).
    """
    out: list[dict[str, Any]] = []
    for m in window:
        key = (id(m), stub)
        if raws is not None:  # objects from the store: the same objects, the same JSON
            hit = _parts_memo.get(key)
            if hit is not None:
                out.append(hit)
                continue
        entry = parts_entry(m, raws, stub)
        if raws is not None:
            _parts_memo.put(key, (m,), entry)
        out.append(entry)
    return out


def parts_entry(
    m: WithParts, raws: Mapping[str, str | bytes] | None, stub: Stub = "opencode"
) -> dict[str, Any]:
    """One message of ``to_parts``: its stored JSON where ``raws`` has it and it is sent as
    stored, else its Structs encoded."""
    raw = raws.get(m.info.id) if raws is not None else None
    info = msgspec.Raw(raw) if raw is not None else msgspec.to_builtins(m.info)
    out: list[Any] = []
    for p in m.parts:
        cleared = _clear(p, stub)
        raw = raws.get(p.id) if raws is not None and cleared is p else None
        out.append(msgspec.Raw(raw) if raw is not None else msgspec.to_builtins(cleared))
    return {"info": info, "parts": out}


# -- neutral form ------------------------------------------------------------------------------


@dataclass
class _Call:
    id: str
    name: str
    input: dict[str, Any]
    result: str
    is_error: bool
    attachments: list[parts.FilePart] = field(default_factory=list)


@dataclass
class _User:
    items: list[str | parts.FilePart]


@dataclass
class _Assistant:
    texts: list[str] = field(default_factory=list)
    calls: list[_Call] = field(default_factory=list)


def call_id(part: parts.ToolPart) -> str:
    return part.call_id or part.id


def sent(msg: WithParts) -> bool:
    """OpenCode skips failed assistant messages, except an abort that produced something."""
    info = msg.info
    if not isinstance(info, AssistantMessage) or info.error is None:
        return True
    return info.error.name == ABORTED and any(
        not isinstance(p, parts.StepStartPart | parts.ReasoningPart) for p in msg.parts
    )


def _has_text(part: parts.TextPart) -> bool:
    # Whitespace-only blocks are rejected by Anthropic and carry nothing for anyone else.
    return not part.ignored and bool(part.text.strip())


def _call(part: parts.ToolPart, mode: Stub = "opencode") -> _Call:
    state = part.state
    cid, name = call_id(part), part.tool
    if isinstance(state, parts.ToolCompleted):
        if state.time.compacted:
            return _Call(cid, name, state.input, stub(part, mode), False)
        return _Call(cid, name, state.input, state.output, False, list(state.attachments or ()))
    if isinstance(state, parts.ToolError):
        return _Call(cid, name, state.input, state.error, True)
    return _Call(cid, name, state.input, INTERRUPTED, True)  # pending/running: never finished


def _keeper(window: Sequence[WithParts], oks: Sequence[bool]) -> dict[str, parts.ToolPart]:
    """Duplicate callIDs (OpenCode #40235): the last part with an id wins, earlier ones vanish."""
    keeper: dict[str, parts.ToolPart] = {}
    for msg, ok in zip(window, oks, strict=True):
        for part in kept_calls(msg, ok):
            keeper[call_id(part)] = part
    return keeper


def kept_calls(msg: WithParts, ok: bool) -> list[parts.ToolPart]:
    """The tool parts the duplicate-call rule counts: those of a sent (``ok``) assistant
    message."""
    if not ok or not isinstance(msg.info, AssistantMessage):
        return []
    return [p for p in msg.parts if isinstance(p, parts.ToolPart)]


def message_turns(
    msg: WithParts, ok: bool, keeper: Mapping[str, parts.ToolPart], mode: Stub = "opencode"
) -> list[_User | _Assistant]:
    out: list[_User | _Assistant] = []
    if isinstance(msg.info, UserMessage):
        items = _user_items(msg.parts)
        if items:
            out.append(_User(items))
    elif ok:
        segment = _Assistant()
        for part in msg.parts:
            if isinstance(part, parts.StepStartPart):
                if segment.texts or segment.calls:
                    out.append(segment)
                segment = _Assistant()
            elif isinstance(part, parts.TextPart) and _has_text(part):
                segment.texts.append(part.text)
            elif isinstance(part, parts.ToolPart) and keeper.get(call_id(part)) is part:
                segment.calls.append(_call(part, mode))
        if segment.texts or segment.calls:
            out.append(segment)
    return out


def _turns(window: Sequence[WithParts], mode: Stub = "opencode") -> list[_User | _Assistant]:
    oks = [sent(m) for m in window]
    keeper = _keeper(window, oks)
    return [
        t for msg, ok in zip(window, oks, strict=True) for t in message_turns(msg, ok, keeper, mode)
    ]


def _user_items(message_parts: Sequence[parts.Part]) -> list[str | parts.FilePart]:
    items: list[str | parts.FilePart] = []
    for part in message_parts:
        if isinstance(part, parts.TextPart):
            if _has_text(part):
                items.append(part.text)
        elif isinstance(part, parts.FilePart):
            if not is_skipped_file(part.mime):
                items.append(part)
        elif isinstance(part, parts.CompactionPart):
            items.append(COMPACTION_TEXT)
        elif isinstance(part, parts.SubtaskPart):
            items.append(SUBTASK_TEXT)
    return items


def _media(part: parts.FilePart, strip_media: bool) -> tuple[str, str] | None:
    """(kind, mime) when ``part`` can go as media: ("image", ...) or ("pdf", ...)."""
    if strip_media:
        return None
    mime = "image/jpeg" if part.mime == "image/jpg" else part.mime
    scheme = part.url.split(":", 1)[0].lower()
    if scheme not in ("http", "https", "data"):  # file:// and the like mean nothing remotely
        return None
    if scheme == "data" and _data_url(part.url) is None:
        return None
    if mime in IMAGE_MIMES:
        return "image", mime
    if mime == "application/pdf":
        return "pdf", mime
    return None


def _data_url(url: str) -> tuple[str, str] | None:
    """(media type, base64 payload) of a ``data:<mime>;base64,<payload>`` URL."""
    head, sep, payload = url.partition(",")
    if not sep or not head.lower().endswith(";base64"):
        return None
    return head[len("data:") : -len(";base64")], payload


# -- OpenAI chat completions -------------------------------------------------------------------


def _openai_content(items: Sequence[str | parts.FilePart], strip_media: bool) -> str | list[Any]:
    """A plain string when everything is text (lines joined with "\\n", what every
    OpenAI-compatible server accepts), a content-part array only when an image is present."""
    pieces: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, str):
            pieces.append({"type": "text", "text": item})
        elif (media := _media(item, strip_media)) and media[0] == "image":
            pieces.append({"type": "image_url", "image_url": {"url": item.url}})
        else:
            pieces.append({"type": "text", "text": attached_text(item)})
    if all(p["type"] == "text" for p in pieces):
        return "\n".join(p["text"] for p in pieces)
    return pieces


_Calls = tuple[tuple[str, parts.ToolPart], ...]


class _Rendered(NamedTuple):
    """A message's chat-completions rendering, with what the duplicate-call rule needs to
    know of it: whether it is ``sent``, and its calls (``kept_calls``) by call id."""

    ok: bool
    calls: _Calls
    messages: list[dict[str, Any]]


_openai_memo: LiveMemo[_Rendered] = LiveMemo(_MEMO_LIMIT)


def to_openai(
    window: Sequence[WithParts], *, strip_media: bool = False, stub: Stub = "opencode"
) -> list[dict[str, Any]]:
    """Chat-completions ``messages``: each step is an assistant message with its ``tool_calls``,
    then one ``tool`` message per call; reasoning is not sent (the format has no slot for it).

    User content is a string when it is all text, an array only when it carries an image;
    assistant content is the step's text, ``""`` when the step only calls tools: what
    OpenCode's provider SDK sends (its recorded requests in ``tests/fixtures/opencode-*``).

    A message's rendering is remembered while it is the same ``WithParts`` (see ``_parts_memo``)
    and none of its calls lost to a duplicate id, so a window rendered every turn costs only
    its new messages; with it, whether the message is sent and its calls, so a remembered
    message is not looked at again. The returned dicts may be shared: do not mutate them.
    """
    seen: list[tuple[WithParts, tuple[int, Stub], bool, _Calls, _Rendered | None]] = []
    keeper: dict[str, parts.ToolPart] = {}  # ``_keeper``: the last part with a call id wins
    for msg in window:
        key = (id(msg), stub)
        hit = None if strip_media else _openai_memo.get(key)
        if hit is None:
            ok = sent(msg)
            calls = tuple((call_id(p), p) for p in kept_calls(msg, ok))
        else:  # its objects live: the ids in the key are still theirs
            ok, calls = hit.ok, hit.calls
        for cid, part in calls:
            keeper[cid] = part
        seen.append((msg, key, ok, calls, hit))
    out: list[dict[str, Any]] = []
    for msg, key, ok, calls, hit in seen:
        whole = all(keeper[cid] is part for cid, part in calls)
        if hit is not None and whole:
            out.extend(hit.messages)
            continue
        rendered = openai_message(msg, ok, keeper, stub, strip_media)
        if whole and not strip_media:
            _openai_memo.put(key, (msg,), _Rendered(ok, calls, rendered))
        out.extend(rendered)
    return out


def openai_message(
    msg: WithParts,
    ok: bool,
    keeper: Mapping[str, parts.ToolPart],
    stub: Stub = "opencode",
    strip_media: bool = False,
) -> list[dict[str, Any]]:
    """One stored message of ``to_openai`` (``ok``: ``sent``; ``keeper``: ``keeper``)."""
    rendered: list[dict[str, Any]] = []
    for turn in message_turns(msg, ok, keeper, stub):
        rendered.extend(_openai_turn(turn, strip_media))
    return rendered


def _openai_turn(turn: _User | _Assistant, strip_media: bool) -> list[dict[str, Any]]:
    """One neutral turn as chat-completions messages."""
    if isinstance(turn, _User):
        return [{"role": "user", "content": _openai_content(turn.items, strip_media)}]
    msg: dict[str, Any] = {"role": "assistant", "content": "\n".join(turn.texts)}
    if turn.calls:
        msg["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": msgspec.json.encode(c.input).decode()},
            }
            for c in turn.calls
        ]
    out = [msg]
    out.extend({"role": "tool", "tool_call_id": c.id, "content": c.result} for c in turn.calls)
    media = [a for c in turn.calls for a in c.attachments]
    if media:  # tool messages are text-only: media follows as a user message
        out.append(
            {"role": "user", "content": _openai_content([TOOL_MEDIA_TEXT, *media], strip_media)}
        )
    return out


# -- Anthropic Messages ------------------------------------------------------------------------


def _anthropic_block(item: str | parts.FilePart, strip_media: bool) -> dict[str, Any]:
    if isinstance(item, str):
        return {"type": "text", "text": item}
    media = _media(item, strip_media)
    if media is None:
        return {"type": "text", "text": attached_text(item)}
    kind, mime = media
    data = _data_url(item.url) if item.url.lower().startswith("data:") else None
    if data is None:
        source: dict[str, Any] = {"type": "url", "url": item.url}
    else:
        source = {"type": "base64", "media_type": mime, "data": data[1]}
    return {"type": "image" if kind == "image" else "document", "source": source}


def to_anthropic(
    window: Sequence[WithParts], *, strip_media: bool = False, stub: Stub = "opencode"
) -> list[dict[str, Any]]:
    """Messages API ``messages``: ``tool_use`` blocks answered by ``tool_result`` blocks at the
    head of the next user message; same-role neighbours merged, since roles must alternate."""
    out: list[dict[str, Any]] = []
    for turn in _turns(window, stub):
        anthropic_turn(out, turn, strip_media)
    return out


def anthropic_turn(out: list[dict[str, Any]], turn: _User | _Assistant, strip_media: bool) -> None:
    """Append one neutral turn to ``out``; only its last message can still change (a merge)."""

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    if isinstance(turn, _User):
        add("user", [_anthropic_block(i, strip_media) for i in turn.items])
        return
    blocks: list[dict[str, Any]] = [{"type": "text", "text": t} for t in turn.texts]
    blocks += [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in turn.calls
    ]
    add("assistant", blocks)
    if not turn.calls:
        return
    results: list[dict[str, Any]] = []
    for c in turn.calls:
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": c.id,
            "content": c.result,
        }
        if c.is_error:
            result["is_error"] = True
        results.append(result)
    media: list[str | parts.FilePart] = [a for c in turn.calls for a in c.attachments]
    if media:
        results += [_anthropic_block(i, strip_media) for i in [TOOL_MEDIA_TEXT, *media]]
    add("user", results)
