import random
from typing import Any

import msgspec
import pytest

from sidecar.engine.filter import filter_compacted
from sidecar.engine.render import (
    SUBTASK_TEXT,
    TOOL_MEDIA_TEXT,
    to_anthropic,
    to_openai,
    to_parts,
)
from sidecar.model.conversation import CLEARED, COMPACTION_TEXT, CONTINUE_TEXT, INTERRUPTED
from sidecar.model.messages import WithParts
from sidecar.model.parts import Part, ToolPart

from .builders import (
    Session,
    compaction,
    file,
    finish,
    reasoning,
    step,
    subtask,
    text,
    tool,
)

PNG = "data:image/png;base64,iVBORw0KGgo="


def call(cid: str, name: str = "bash", args: str = '{"cmd":"ls"}') -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


# -- parts ---------------------------------------------------------------------------------------


def test_constants() -> None:
    assert CLEARED == "[Old tool result content cleared]"
    assert COMPACTION_TEXT == "What did we do so far?"
    assert INTERRUPTED == "[Tool execution was interrupted]"
    assert CONTINUE_TEXT == "Continue if you have next steps"
    assert SUBTASK_TEXT == "The following tool was executed by the user"


def test_to_parts_clears_compacted_outputs_and_drops_nothing() -> None:
    s = Session()
    s.user("hi", text("ui only", ignored=True))
    img = file("image/png", PNG)
    s.assistant(
        step(),
        tool(output="secret" * 100, compacted=77, attachments=[img], call="c1"),
        tool(output="fresh", attachments=[img], call="c2"),
        finish(),
    )
    s.assistant("failed", error="APIError")
    out = to_parts(s.messages)
    assert [len(m["parts"]) for m in out] == [2, 4, 1]
    assert out[0]["info"]["sessionID"] == "ses_test"
    assert out[0]["parts"][1] == {
        "id": "prt_0003",
        "sessionID": "ses_test",
        "messageID": "msg_0001",
        "type": "text",
        "text": "ui only",
        "ignored": True,
    }
    cleared = out[1]["parts"][1]
    assert cleared["callID"] == "c1"
    assert cleared["state"]["status"] == "completed"
    assert cleared["state"]["output"] == CLEARED
    assert cleared["state"]["time"] == {"start": 1, "end": 2, "compacted": 77}
    assert "attachments" not in cleared["state"]
    kept = out[1]["parts"][2]["state"]
    assert kept["output"] == "fresh"
    assert kept["attachments"][0]["url"] == PNG
    assert out[2]["info"]["error"] == {"name": "APIError"}
    # The stored messages are not modified.
    assert s.messages[1].parts[1].state.output == "secret" * 100  # type: ignore[union-attr]


# -- OpenAI: user --------------------------------------------------------------------------------


def test_openai_user_text_is_one_string() -> None:
    s = Session()
    s.user("first", text("hidden", ignored=True), text(""), text("second", synthetic=True))
    assert to_openai(s.messages) == [{"role": "user", "content": "first\nsecond"}]


def test_openai_user_files() -> None:
    s = Session()
    s.user(
        "look",
        file("image/png", PNG, "a.png"),
        file("text/plain", "file:///a.txt", "a.txt"),
        file("application/x-directory", "file:///src"),
        file("application/zip", "https://x/z.zip", "z.zip"),
        file("application/pdf", "https://x/d.pdf"),
    )
    assert to_openai(s.messages) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": PNG}},
                {"type": "text", "text": "[Attached application/zip: z.zip]"},
                {"type": "text", "text": "[Attached application/pdf: file]"},
            ],
        }
    ]


def test_openai_strip_media_turns_images_into_text() -> None:
    s = Session()
    s.user("look", file("image/png", PNG, "a.png"))
    assert to_openai(s.messages, strip_media=True) == [
        {"role": "user", "content": "look\n[Attached image/png: a.png]"}
    ]


def test_local_and_unsupported_images_become_text() -> None:
    s = Session()
    s.user(file("image/png", "file:///tmp/a.png", "a.png"), file("image/svg+xml", "https://x/s"))
    expected = "[Attached image/png: a.png]\n[Attached image/svg+xml: file]"
    assert to_openai(s.messages) == [{"role": "user", "content": expected}]


def test_compaction_and_subtask_parts_render_as_user_text() -> None:
    s = Session()
    s.user(compaction())
    s.user(subtask())
    assert to_openai(s.messages) == [
        {"role": "user", "content": "What did we do so far?"},
        {"role": "user", "content": "The following tool was executed by the user"},
    ]


def test_user_messages_with_nothing_to_send_are_dropped() -> None:
    s = Session()
    s.user(text("x", ignored=True), file("text/plain", "file:///a"))
    s.user("   ")
    s.user("real")
    assert to_openai(s.messages) == [{"role": "user", "content": "real"}]
    assert to_anthropic(s.messages) == [
        {"role": "user", "content": [{"type": "text", "text": "real"}]}
    ]


# -- OpenAI: assistant ---------------------------------------------------------------------------


def test_step_start_splits_an_assistant_message() -> None:
    s = Session()
    s.user("go")
    s.assistant(
        step(),
        reasoning("thinking"),
        "first",
        tool(call="c1", output="one"),
        finish(),
        step(),
        "second",
        tool(call="c2", output="two"),
        finish(),
        step(),
        "done",
        finish(),
    )
    assert to_openai(s.messages)[1:] == [
        {"role": "assistant", "content": "first", "tool_calls": [call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "assistant", "content": "second", "tool_calls": [call("c2")]},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
        {"role": "assistant", "content": "done"},
    ]


def test_tool_results_by_state() -> None:
    s = Session()
    s.user("go")
    s.assistant(
        tool(call="a", output="out"),
        tool(call="b", output="old", compacted=5),
        tool(call="c", status="error", error="exit 1"),
        tool(call="d", status="pending"),
        tool(call="e", status="running", input={"q": 1}),
    )
    out = to_openai(s.messages)
    assert out[1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [call("a"), call("b"), call("c"), call("d"), call("e", args='{"q":1}')],
    }
    assert [m["content"] for m in out[2:]] == ["out", CLEARED, "exit 1", INTERRUPTED, INTERRUPTED]
    assert [m["tool_call_id"] for m in out[2:]] == ["a", "b", "c", "d", "e"]


def test_empty_segments_are_dropped() -> None:
    s = Session()
    s.user("go")
    s.assistant(step(), reasoning("hmm"), finish(), step(), text(""), step(), "answer", finish())
    assert to_openai(s.messages)[1:] == [{"role": "assistant", "content": "answer"}]


def test_failed_assistant_messages_are_skipped() -> None:
    s = Session()
    s.user("go")
    s.assistant("partial", tool(call="x"), error="APIError")
    s.assistant(step(), reasoning("only thinking"), error="MessageAbortedError")
    s.assistant(step(), "kept after abort", tool(call="y"), error="MessageAbortedError")
    out = to_openai(s.messages)
    assert out[1:] == [
        {"role": "assistant", "content": "kept after abort", "tool_calls": [call("y")]},
        {"role": "tool", "tool_call_id": "y", "content": "ok"},
    ]


def test_summary_message_renders_as_plain_assistant_text() -> None:
    s = Session()
    s.turn("old")
    s.compact()
    s.user(CONTINUE_TEXT)
    assert to_openai(filter_compacted(s.messages)) == [
        {"role": "user", "content": COMPACTION_TEXT},
        {"role": "assistant", "content": "summary of it all"},
        {"role": "user", "content": CONTINUE_TEXT},
    ]


def test_tool_attachments_follow_the_results_as_a_user_message() -> None:
    s = Session()
    s.user("go")
    img = file("image/png", PNG, "shot.png")
    s.assistant(tool(call="c1", output="took it", attachments=[img]))
    s.assistant(tool(call="c2", output="gone", attachments=[img], compacted=1))
    out = to_openai(s.messages)
    assert out[1:] == [
        {"role": "assistant", "content": "", "tool_calls": [call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "took it"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": TOOL_MEDIA_TEXT},
                {"type": "image_url", "image_url": {"url": PNG}},
            ],
        },
        {"role": "assistant", "content": "", "tool_calls": [call("c2")]},
        {"role": "tool", "tool_call_id": "c2", "content": CLEARED},
    ]


# -- duplicates (OpenCode #40235) ------------------------------------------------------------------


def test_duplicate_call_ids_keep_the_last_part() -> None:
    s = Session()
    s.user("go")
    s.assistant("trying", tool(call="dup", status="running"), error="MessageAbortedError")
    s.assistant("again", tool(call="dup", output="final"))
    oa = to_openai(s.messages)
    assert oa[1:] == [
        {"role": "assistant", "content": "trying"},
        {"role": "assistant", "content": "again", "tool_calls": [call("dup")]},
        {"role": "tool", "tool_call_id": "dup", "content": "final"},
    ]
    an = to_anthropic(s.messages)
    assert an[1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "trying"},
                {"type": "text", "text": "again"},
                {"type": "tool_use", "id": "dup", "name": "bash", "input": {"cmd": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "dup", "content": "final"}],
        },
    ]


def test_duplicate_in_a_skipped_message_does_not_hide_the_kept_one() -> None:
    s = Session()
    s.user("go")
    s.assistant(tool(call="dup", output="real"))
    s.assistant(tool(call="dup", status="running"), error="APIError")  # skipped entirely
    out = to_openai(s.messages)
    assert [m.get("tool_call_id") for m in out if m["role"] == "tool"] == ["dup"]
    assert out[-1]["content"] == "real"


def test_duplicates_within_one_message() -> None:
    s = Session()
    s.user("go")
    s.assistant(tool(call="d", output="first"), tool(call="d", output="second"))
    out = to_openai(s.messages)
    assert out[1]["tool_calls"] == [call("d")]
    assert out[2:] == [{"role": "tool", "tool_call_id": "d", "content": "second"}]


# -- Anthropic -------------------------------------------------------------------------------------


def test_anthropic_tool_use_and_results() -> None:
    s = Session()
    s.user("go")
    s.assistant(
        step(),
        reasoning("not sent"),
        "running two",
        tool(call="a", output="fine"),
        tool(call="b", status="error", error="denied"),
        tool(call="c", output="x", compacted=1),
        finish(),
        step(),
        tool(call="d", status="pending", input={"q": 2}),
    )
    s.user("thanks")
    assert to_anthropic(s.messages) == [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "running two"},
                {"type": "tool_use", "id": "a", "name": "bash", "input": {"cmd": "ls"}},
                {"type": "tool_use", "id": "b", "name": "bash", "input": {"cmd": "ls"}},
                {"type": "tool_use", "id": "c", "name": "bash", "input": {"cmd": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "fine"},
                {"type": "tool_result", "tool_use_id": "b", "content": "denied", "is_error": True},
                {"type": "tool_result", "tool_use_id": "c", "content": CLEARED},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "d", "name": "bash", "input": {"q": 2}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "d",
                    "content": INTERRUPTED,
                    "is_error": True,
                },
                {"type": "text", "text": "thanks"},
            ],
        },
    ]


def test_anthropic_merges_consecutive_roles() -> None:
    s = Session()
    s.user("one")
    s.user(compaction())
    s.assistant("a", step(), "b")
    s.assistant("c")
    assert to_anthropic(s.messages) == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "one"}, {"type": "text", "text": COMPACTION_TEXT}],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "a"},
                {"type": "text", "text": "b"},
                {"type": "text", "text": "c"},
            ],
        },
    ]


def test_anthropic_media_sources() -> None:
    s = Session()
    s.user(
        file("image/png", PNG),
        file("image/jpeg", "https://x/a.jpg"),
        file("application/pdf", "data:application/pdf;base64,JVBERi0=", "d.pdf"),
        file("image/png", "data:image/png,rawbytes", "bad.png"),
        file("application/zip", "https://x/z.zip", "z.zip"),
    )
    assert to_anthropic(s.messages)[0]["content"] == [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
        {"type": "image", "source": {"type": "url", "url": "https://x/a.jpg"}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="},
        },
        {"type": "text", "text": "[Attached image/png: bad.png]"},
        {"type": "text", "text": "[Attached application/zip: z.zip]"},
    ]
    stripped = to_anthropic(s.messages, strip_media=True)[0]["content"]
    assert [b["type"] for b in stripped] == ["text"] * 5
    assert stripped[2] == {"type": "text", "text": "[Attached application/pdf: d.pdf]"}


def test_anthropic_tool_attachments_after_results() -> None:
    s = Session()
    s.user("go")
    s.assistant(tool(call="c1", output="ok", attachments=[file("image/png", PNG, "s.png")]))
    assert to_anthropic(s.messages)[-1] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "ok"},
            {"type": "text", "text": TOOL_MEDIA_TEXT},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
            },
        ],
    }


def test_missing_call_id_falls_back_to_part_id() -> None:
    s = Session()
    s.user("go")
    msg = s.assistant(tool(output="x"))
    part = msg.parts[0]
    msg.parts[0] = msgspec.structs.replace(part, call_id="")
    out = to_openai(s.messages)
    assert out[1]["tool_calls"][0]["id"] == part.id
    assert out[2]["tool_call_id"] == part.id


# -- invariants on random windows ------------------------------------------------------------------


def random_window(rng: random.Random) -> list[WithParts]:
    s = Session()
    calls = [f"call_{i}" for i in range(6)]  # a small pool makes duplicates likely
    for _ in range(rng.randint(1, 12)):
        kind = rng.random()
        if kind < 0.35:
            choices: list[Part] = [
                text("hello"),
                text(""),
                text("x", ignored=True),
                file("image/png", PNG),
                file("text/plain", "file:///a"),
                compaction(),
                subtask(),
            ]
            user_parts = [rng.choice(choices) for _ in range(rng.randint(0, 3))]
            s.user(*user_parts)
        else:
            parts: list[Part | str] = []
            for _ in range(rng.randint(0, 8)):
                r = rng.random()
                if r < 0.2:
                    parts.append(step())
                elif r < 0.35:
                    parts.append(rng.choice(["said", ""]))
                elif r < 0.45:
                    parts.append(reasoning("hm"))
                elif r < 0.5:
                    parts.append(finish())
                else:
                    status = rng.choice(["completed", "completed", "error", "pending", "running"])
                    compacted = 1 if status == "completed" and rng.random() < 0.3 else None
                    attachments = [file("image/png", PNG)] if rng.random() < 0.1 else None
                    parts.append(
                        tool(
                            call=rng.choice(calls),
                            status=status,
                            compacted=compacted,
                            attachments=attachments if status == "completed" else None,
                        )
                    )
            error = rng.choice([None, None, None, "MessageAbortedError", "APIError"])
            summary = rng.random() < 0.1
            s.assistant(*parts, error=error, summary=summary)
    return s.messages


def check_openai(msgs: list[dict[str, Any]]) -> int:
    seen: set[str] = set()
    pending: set[str] = set()
    answered = 0
    for m in msgs:
        role = m["role"]
        if role == "tool":
            assert m["tool_call_id"] in pending, "result without its call just before it"
            pending.remove(m["tool_call_id"])
            answered += 1
            continue
        assert not pending, f"calls left unanswered: {pending}"
        if role == "assistant":
            ids = [c["id"] for c in m.get("tool_calls", [])]
            assert len(set(ids)) == len(ids)
            assert not seen & set(ids), "duplicate tool_call_id in the window"
            seen.update(ids)
            pending = set(ids)
            assert m["content"] or ids, "empty assistant message"
        else:
            assert role == "user" and m["content"]
    assert not pending
    assert answered == len(seen)
    return answered


def check_anthropic(msgs: list[dict[str, Any]]) -> int:
    seen: set[str] = set()
    answered = 0
    for i, m in enumerate(msgs):
        assert m["content"], "empty message"
        if i:
            assert m["role"] != msgs[i - 1]["role"], "roles must alternate"
        for b in m["content"]:
            if b["type"] == "text":
                assert b["text"].strip()
        uses = [b["id"] for b in m["content"] if b["type"] == "tool_use"]
        assert not seen & set(uses) and len(set(uses)) == len(uses)
        seen.update(uses)
        results = [b["tool_use_id"] for b in m["content"] if b["type"] == "tool_result"]
        if m["role"] == "assistant":
            assert not results
            if uses:
                nxt = msgs[i + 1]
                assert nxt["role"] == "user"
                head = [b.get("tool_use_id") for b in nxt["content"][: len(uses)]]
                assert head == uses, "results must lead the next user message, one per call"
        elif results:
            prev = msgs[i - 1]
            prev_uses = [b["id"] for b in prev["content"] if b["type"] == "tool_use"]
            assert prev["role"] == "assistant" and results == prev_uses
            answered += len(results)
    assert answered == len(seen)
    return answered


@pytest.mark.parametrize("seed", range(300))
def test_random_windows_pair_every_call_with_one_result(seed: int) -> None:
    rng = random.Random(seed)
    window = random_window(rng)
    if seed % 2:
        window = filter_compacted(window)
    strip = seed % 3 == 0
    n_openai = check_openai(to_openai(window, strip_media=strip))
    n_anthropic = check_anthropic(to_anthropic(window, strip_media=strip))
    assert n_openai == n_anthropic
    assert len(to_parts(window)) == len(window)


def test_random_windows_exercise_duplicates_and_skips() -> None:
    # Guard that the generator above really produces the hard cases it is meant to.
    dups = skipped = calls = 0
    for seed in range(300):
        window = random_window(random.Random(seed))
        ids = [p.call_id for m in window for p in m.parts if isinstance(p, ToolPart)]
        dups += len(ids) - len(set(ids))
        skipped += sum(1 for m in window if getattr(m.info, "error", None))
        calls += check_openai(to_openai(window))
    assert dups > 100
    assert skipped > 50
    assert calls > 300


def test_openai_memo_follows_changed_parts_and_later_duplicates() -> None:
    s = Session()
    s.user("go")
    first = s.assistant(tool("bash", "v1", call="dup"))
    out1 = to_openai(s.messages)
    assert out1 == to_openai(s.messages)  # served from the memo, same content
    # a changed part is a new object: the message renders anew
    changed = msgspec.structs.replace(
        first.parts[0], state=msgspec.structs.replace(first.parts[0].state, output="v2")
    )
    window = [s.messages[0], WithParts(info=first.info, parts=[changed])]
    assert [m.get("content") for m in to_openai(window) if m["role"] == "tool"] == ["v2"]
    # a later part with the same call id makes the first one vanish, memo or not
    s.assistant(tool("bash", "v3", call="dup"))
    results = [m["content"] for m in to_openai(s.messages) if m["role"] == "tool"]
    assert results == ["v3"]


def test_a_remembered_message_loses_and_regains_a_call_to_a_duplicate() -> None:
    """The memo keeps a message's calls: a later duplicate hides its call without a fresh look
    at the message, and once that duplicate is gone the remembered rendering is whole again."""
    s = Session()
    s.user("go")
    s.assistant(tool("bash", "first", call="dup"))
    alone = list(s.messages)
    s.assistant(tool("bash", "second", call="dup"))

    def results(window: list[WithParts]) -> list[Any]:
        return [m["content"] for m in to_openai(window) if m["role"] == "tool"]

    assert results(alone) == ["first"]
    assert results(s.messages) == ["second"]
    assert results(alone) == ["first"]
    assert to_openai(alone) == to_openai(alone, strip_media=True)  # the memo as rendered anew
