"""The data model: OpenCode wire names, tagged unions, unknown fields, ids."""

from __future__ import annotations

import msgspec
import pytest

from sidecar.model.base import wire_name
from sidecar.model.config import build, env_layer
from sidecar.model.ids import new_id
from sidecar.model.messages import AssistantMessage, Message, UserMessage
from sidecar.model.parts import CompactionPart, Part, ToolCompleted, ToolPart
from sidecar.model.rpc import PrunedEvent


@pytest.mark.parametrize(
    ("py", "wire"),
    [
        ("session_id", "sessionID"),
        ("part_ids", "partIDs"),
        ("tail_start_id", "tailStartID"),
        ("call_id", "callID"),
        ("provider_id", "providerID"),
        ("tokens_saved", "tokensSaved"),
        ("max_frame_bytes", "maxFrameBytes"),
        ("id", "id"),
    ],
)
def test_wire_names(py: str, wire: str) -> None:
    assert wire_name(py) == wire


def test_pruned_event_uses_contract_names() -> None:
    raw = msgspec.json.encode(
        PrunedEvent(session_id="s", part_ids=["p"], tokens_saved=3, compacted=7)
    )
    assert raw == b'{"sessionID":"s","partIDs":["p"],"tokensSaved":3,"compacted":7}'


def test_messages_are_a_tagged_union_on_role() -> None:
    user = msgspec.json.decode(b'{"role":"user","sessionID":"s"}', type=Message)
    assert isinstance(user, UserMessage)
    a = msgspec.json.decode(
        b'{"role":"assistant","sessionID":"s","parentID":"m","summary":true,"finish":"stop"}',
        type=Message,
    )
    assert isinstance(a, AssistantMessage) and a.summary and a.parent_id == "m"
    with pytest.raises(msgspec.ValidationError, match=r"\$\.role"):
        msgspec.json.decode(b'{"role":"robot","sessionID":"s"}', type=Message)


def test_parts_are_tagged_on_type_and_tool_states_on_status() -> None:
    raw = (
        b'{"type":"tool","id":"p","sessionID":"s","messageID":"m","callID":"c","tool":"read",'
        b'"state":{"status":"completed","input":{"a":1},"output":"x","time":{"start":1,"end":2,'
        b'"compacted":3}}}'
    )
    part = msgspec.json.decode(raw, type=Part)
    assert isinstance(part, ToolPart) and isinstance(part.state, ToolCompleted)
    assert part.state.time.compacted == 3
    c = msgspec.json.decode(
        b'{"type":"compaction","sessionID":"s","messageID":"m","auto":true,"tailStartID":"t"}',
        type=Part,
    )
    assert isinstance(c, CompactionPart) and c.tail_start_id == "t" and c.tail == "t"
    # OpenCode >= 1.14's own name for its kept tail (snake_case on its compaction part).
    o = msgspec.json.decode(
        b'{"type":"compaction","sessionID":"s","messageID":"m","auto":false,"tail_start_id":"u"}',
        type=Part,
    )
    assert isinstance(o, CompactionPart) and o.tail_start_id is None and o.tail == "u"
    assert b'"tail_start_id":"u"' in msgspec.json.encode(o)
    with pytest.raises(msgspec.ValidationError, match=r"\$\.state\.status"):
        msgspec.json.decode(raw.replace(b'"completed"', b'"done"'), type=Part)


def test_ids_ascend_and_carry_their_prefix() -> None:
    ids = [new_id("msg") for _ in range(5000)]
    assert ids == sorted(ids) and len(set(ids)) == 5000
    assert all(i.startswith("msg_") for i in ids)
    # 13 hex digits of milliseconds: no wrap for ~142,000 years (OpenCode wrapped in 2026).
    assert len(ids[0]) == len("msg_") + 13 + 4 + 8


def test_env_switches_fold_into_config() -> None:
    cfg = build([{"compaction": {"auto": True}}, env_layer({"OPENCODE_DISABLE_AUTOCOMPACT": "1"})])
    assert cfg.compaction.auto is False and cfg.compaction.prune is True
    assert build([env_layer({"OPENCODE_DISABLE_PRUNE": "yes"})]).compaction.prune is True
    out = build([env_layer({"OPENCODE_EXPERIMENTAL_OUTPUT_TOKEN_MAX": "8000"})])
    assert out.compaction.output_token_max == 8000


def test_config_errors_name_the_path() -> None:
    with pytest.raises(msgspec.ValidationError, match=r"\$\.compaction\.method"):
        build([{"compaction": {"method": "fold"}}])
