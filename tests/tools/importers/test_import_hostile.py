"""Hostile imports (issue 19 item 5): a corpus of bad files, each run through the real
``compaction-sidecar import`` process. Every one must end as a correct import or as exactly
one line on stderr naming the file, the line or entry and the field, exit 1, and nothing
stored. The FIFO and the symlink to /dev/zero also show that reads are bounded: regular
files only, at most ``--max-bytes`` each."""

from __future__ import annotations

import copy
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.tools.conftest import FIXTURES

GUARD = 120  # seconds: only a blocked or unbounded read reaches it
SID = "0b7e4c1a-hostile"
TS = "2025-06-01T12:00:00.000Z"
DEEP = 100_000


@dataclass
class Case:
    name: str
    build: Callable[[Path], Path]  # writes the input under the given folder, returns it
    needles: list[str] = field(default_factory=list)  # in the one error line; [] = success
    args: list[str] = field(default_factory=list)
    ok: bool = False


def _jsonl(path: Path, lines: list[Any]) -> Path:
    out = b""
    for line in lines:
        out += (line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n"
    path.write_bytes(out)
    return path


def _deep(n: int = DEEP) -> bytes:
    return b"[" * n + b"]" * n


# -- Claude Code ---------------------------------------------------------------------------------


def _cc_user(n: int = 1, **over: Any) -> dict[str, Any]:
    rec = {
        "type": "user",
        "sessionId": SID,
        "cwd": "/p",
        "uuid": f"u-{n}",
        "timestamp": TS,
        "message": {"role": "user", "content": f"question {n}"},
    }
    rec.update(over)
    return rec


def _cc_asst(n: int = 2, content: Any = None, **over: Any) -> dict[str, Any]:
    rec = {
        "type": "assistant",
        "sessionId": SID,
        "cwd": "/p",
        "uuid": f"a-{n}",
        "timestamp": TS,
        "message": {
            "id": f"m-{n}",
            "role": "assistant",
            "model": "claude",
            "content": content if content is not None else [{"type": "text", "text": "answer"}],
            "usage": {"input_tokens": 10, "output_tokens": 5},
        },
    }
    rec.update(over)
    return rec


def _cc(*lines: Any) -> Callable[[Path], Path]:
    return lambda d: _jsonl(d / "cc.jsonl", list(lines))


def _cc_raw(data: bytes) -> Callable[[Path], Path]:
    def build(d: Path) -> Path:
        (d / "cc.jsonl").write_bytes(data)
        return d / "cc.jsonl"

    return build


def _with_msg(rec: dict[str, Any], **msg: Any) -> dict[str, Any]:
    rec = copy.deepcopy(rec)
    rec["message"].update(msg)
    return rec


def _usage(**usage: Any) -> dict[str, Any]:
    return _with_msg(_cc_asst(), usage={"input_tokens": 1, "output_tokens": 1, **usage})


def _tool(**block: Any) -> dict[str, Any]:
    return _cc_asst(
        content=[{"type": "tool_use", "id": "t1", "name": "read", "input": {}, **block}]
    )


def _good_cc_line() -> bytes:
    return json.dumps(_cc_user()).encode()


# -- pi ------------------------------------------------------------------------------------------

PI_HEADER = {"type": "session", "version": 3, "id": "pi-hostile", "timestamp": TS, "cwd": "/p"}


def _pi_msg(eid: str, parent: str | None, message: dict[str, Any], **over: Any) -> dict[str, Any]:
    entry = {"type": "message", "id": eid, "parentId": parent, "timestamp": TS, "message": message}
    entry.update(over)
    return entry


def _pi(*entries: Any, header: Any = None) -> Callable[[Path], Path]:
    return lambda d: _jsonl(d / "pi.jsonl", [header if header is not None else PI_HEADER, *entries])


def _pi_user(content: Any) -> dict[str, Any]:
    return _pi_msg("e1", None, {"role": "user", "content": content})


def _pi_asst(content: Any, **msg: Any) -> dict[str, Any]:
    return _pi_msg("e2", "e1", {"role": "assistant", "content": content, **msg})


PI_OK_USER = _pi_user([{"type": "text", "text": "hello"}])

# -- transcript ----------------------------------------------------------------------------------

TR_HEADER = {"session": "hostile", "source": "test", "license": "MIT"}


def _tr(*lines: Any) -> Callable[[Path], Path]:
    return lambda d: _jsonl(d / "t.jsonl", [TR_HEADER, *lines])


def _second_line_not_utf8(
    name: str, header: Any, line: Any, word: bytes, broken: bytes
) -> Callable[[Path], Path]:
    """A header, then ``line`` with ``word`` replaced by bytes that are not UTF-8."""

    def make(d: Path) -> Path:
        second = json.dumps(line).encode().replace(word, broken)
        (d / name).write_bytes(json.dumps(header).encode() + b"\n" + second + b"\n")
        return d / name

    return make


def _deep_and_not_utf8(
    fmt: str,
    lines: Callable[..., Callable[[Path], Path]],
    name: str,
    header: Any,
    line: Any,
    word: bytes,
    broken: bytes,
) -> list[Case]:
    """The two line-level hazards of a JSON-lines format with a header: a line nested too
    deep after a good one (line 3), and a second line that is not UTF-8 (line 2)."""
    return [
        Case(f"{fmt}-deep", lines(line, _deep()), [":3:", "deeper"]),
        Case(
            f"{fmt}-not-utf8",
            _second_line_not_utf8(name, header, line, word, broken),
            [":2:", "UTF-8"],
        ),
    ]


TR_USER = {"role": "user", "parts": [{"type": "text", "text": "hi"}]}

# -- OpenCode export and storage -------------------------------------------------------------------

EXPORT = FIXTURES / "opencode-1.1.53" / "export.json"
STORAGE = FIXTURES / "opencode-1.1.53" / "storage"


def _export(mutate: Callable[[dict[str, Any]], None]) -> Callable[[Path], Path]:
    def build(d: Path) -> Path:
        doc = json.loads(EXPORT.read_text())
        mutate(doc)
        (d / "export.json").write_text(json.dumps(doc))
        return d / "export.json"

    return build


def _export_raw(make: Callable[[bytes], bytes]) -> Callable[[Path], Path]:
    def build(d: Path) -> Path:
        (d / "export.json").write_bytes(make(EXPORT.read_bytes()))
        return d / "export.json"

    return build


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        keys: list[Any] = [int(k) if k.isdigit() else k for k in path.split(".")]
        target: Any = doc
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value

    return mutate


def _first_part_file(root: Path) -> Path:
    return sorted((root / "part").glob("*/*.json"))[0]


def _storage(mutate: Callable[[Path], None]) -> Callable[[Path], Path]:
    def build(d: Path) -> Path:
        root = d / "storage"
        shutil.copytree(STORAGE, root)
        mutate(root)
        return root

    return build


def _replace_part(make: Callable[[Path], None]) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        target = _first_part_file(root)
        target.unlink()
        make(target)

    return mutate


def _edit_json(
    pick: Callable[[Path], Path], change: Callable[[dict[str, Any]], None]
) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        target = pick(root)
        doc = json.loads(target.read_text())
        change(doc)
        target.write_text(json.dumps(doc))

    return mutate


def _first_message_file(root: Path) -> Path:
    return sorted((root / "message").glob("*/*.json"))[0]


def _session_file(root: Path) -> Path:
    return sorted((root / "session").glob("*/*.json"))[0]


def _dir_of_jsonl(*entries: tuple[str, Callable[[Path], None]]) -> Callable[[Path], Path]:
    def build(d: Path) -> Path:
        folder = d / "logs"
        folder.mkdir()
        for name, make in entries:
            make(folder / name)
        return folder

    return build


def _write(data: bytes) -> Callable[[Path], None]:
    return lambda p: p.write_bytes(data)


CASES: list[Case] = [
    # Claude Code JSONL
    Case("cc-valid", _cc(_cc_user(), _cc_asst()), ok=True),
    Case("cc-deep", _cc(_cc_user(), _deep()), [":2:", "deeper"]),
    Case("cc-deep-in-field", _cc(_cc_user(message=json.loads(_deep(60)))), [":1:", "message"]),
    Case(
        "cc-not-utf8",
        _cc_raw(_good_cc_line().replace(b"question", b"qu\xff\xfetion") + b"\n"),
        [":1:", "UTF-8", "message.content"],
    ),
    Case("cc-not-json", _cc(_cc_user(), b'{"type": "user", "uu'), [":2:", "JSON"]),
    Case("cc-truncated", _cc_raw(_good_cc_line() + b"\n" + _good_cc_line()[:40]), [":2:"]),
    Case("cc-nan", _cc(b'{"type": "user", "x": NaN}'), [":1:"]),
    Case(
        "cc-big-number",
        _cc(
            _cc_user(),
            json.dumps(_usage()).replace('"input_tokens": 1', '"input_tokens": 1e400').encode(),
        ),
        [":2:"],
    ),
    Case("cc-array-line", _cc(_cc_user(), [1, 2]), [":2:", "object"]),
    Case("cc-empty", _cc_raw(b""), ["empty"]),
    Case("cc-blank-only", _cc_raw(b"\n  \n\n"), ["empty"]),
    Case("cc-time-invalid", _cc(_cc_user(timestamp="2025-13-45T99:00:00Z")), [":1:", "timestamp"]),
    Case("cc-time-garbage", _cc(_cc_user(timestamp="yesterday")), [":1:", "timestamp"]),
    Case("cc-time-huge", _cc(_cc_user(timestamp=10**20)), [":1:", "timestamp"]),
    Case("cc-time-negative", _cc(_cc_user(timestamp=-5)), [":1:", "timestamp"]),
    Case("cc-time-type", _cc(_cc_user(timestamp=[2025])), [":1:", "timestamp"]),
    Case(
        "cc-time-missing",
        _cc({k: v for k, v in _cc_user().items() if k != "timestamp"}),
        [":1:", "timestamp"],
    ),
    Case(
        "cc-role-unknown",
        _cc(_cc_user(), _with_msg(_cc_asst(), role="robot")),
        [":2:", "role", "robot"],
    ),
    Case(
        "cc-type-unknown-message",
        _cc(_cc_user(), _cc_user(2, type="robot")),
        [":2:", "type", "robot"],
    ),
    Case("cc-message-string", _cc(_cc_user(message="hi")), [":1:", "message"]),
    Case("cc-content-int", _cc(_with_msg(_cc_user(), content=5)), [":1:", "message.content"]),
    Case(
        "cc-asst-content-string", _cc(_cc_user(), _cc_asst(content="x")), [":2:", "message.content"]
    ),
    Case(
        "cc-text-int",
        _cc(_cc_user(), _cc_asst(content=[{"type": "text", "text": 5}])),
        [":2:", "text"],
    ),
    Case("cc-block-not-object", _cc(_with_msg(_cc_user(), content=["x"])), [":1:", "content[0]"]),
    Case("cc-usage-string", _cc(_cc_user(), _usage(input_tokens="many")), [":2:", "input_tokens"]),
    Case("cc-usage-negative", _cc(_cc_user(), _usage(output_tokens=-3)), [":2:", "output_tokens"]),
    Case(
        "cc-usage-not-object", _cc(_cc_user(), _with_msg(_cc_asst(), usage=[1])), [":2:", "usage"]
    ),
    Case("cc-tool-input-string", _cc(_cc_user(), _tool(input="rm -rf")), [":2:", "input"]),
    Case("cc-tool-name-int", _cc(_cc_user(), _tool(name=7)), [":2:", "name"]),
    Case("cc-tool-id-missing", _cc(_cc_user(), _tool(id=None)), [":2:", "id"]),
    Case(
        "cc-tool-result-orphan",
        _cc(
            _with_msg(
                _cc_user(), content=[{"type": "tool_result", "tool_use_id": "nope", "content": "x"}]
            )
        ),
        [":1:", "tool_use_id"],
    ),
    Case(
        "cc-tool-result-text-int",
        _cc(
            _cc_user(),
            _tool(),
            _with_msg(
                _cc_user(3),
                content=[
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": 9}],
                    }
                ],
            ),
        ),
        [":3:", "text"],
    ),
    Case(
        "cc-uuid-missing",
        _cc({k: v for k, v in _cc_user().items() if k != "uuid"}),
        [":1:", "uuid"],
    ),
    Case("cc-uuid-int", _cc(_cc_user(uuid=12)), [":1:", "uuid"]),
    Case(
        "cc-compact-meta-string",
        _cc(
            _cc_user(),
            {
                "type": "system",
                "subtype": "compact_boundary",
                "sessionId": SID,
                "uuid": "s1",
                "timestamp": TS,
                "compactMetadata": "x",
            },
        ),
        [":2:", "compactMetadata"],
    ),
    Case(
        "cc-image-data-int",
        _cc(
            _with_msg(
                _cc_user(),
                content=[
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": 5},
                    }
                ],
            )
        ),
        [":1:", "data"],
    ),
    Case("cc-session-id-int", _cc(_cc_user(sessionId=5)), ["sessionId"]),
    Case(
        "cc-over-max-bytes",
        _cc(_cc_user(message={"role": "user", "content": "x" * 10_000})),
        ["--max-bytes", "4096"],
        ["--max-bytes", "4096"],
    ),
    Case(
        "cc-max-bytes-raised",
        _cc(_cc_user(message={"role": "user", "content": "x" * 10_000})),
        [],
        ["--max-bytes", "1000000"],
        ok=True,
    ),
    Case(
        "cc-symlink-dev-zero",
        lambda d: (d / "z.jsonl").symlink_to("/dev/zero") or d / "z.jsonl",
        ["z.jsonl", "not a regular file"],
    ),
    Case(
        "cc-symlink-dev-zero-format",
        lambda d: (d / "z.jsonl").symlink_to("/dev/zero") or d / "z.jsonl",
        ["z.jsonl", "not a regular file"],
        ["--format", "claude-code"],
    ),
    Case(
        "cc-fifo",
        lambda d: os.mkfifo(d / "f.jsonl") or d / "f.jsonl",
        ["f.jsonl", "not a regular file"],
    ),
    Case(
        "dir-with-fifo",
        _dir_of_jsonl(("a.jsonl", _write(_good_cc_line() + b"\n")), ("b.jsonl", os.mkfifo)),
        ["b.jsonl", "not a regular file"],
    ),
    Case(
        "dir-with-dev-zero",
        _dir_of_jsonl(
            ("a.jsonl", _write(_good_cc_line() + b"\n")),
            ("b.jsonl", lambda p: p.symlink_to("/dev/zero")),
        ),
        ["b.jsonl", "not a regular file"],
    ),
    Case(
        "dir-second-bad",
        _dir_of_jsonl(
            ("a.jsonl", _write(_good_cc_line() + b"\n")), ("b.jsonl", _write(b"{oops\n"))
        ),
        ["b.jsonl", "line 1"],
    ),
    # pi
    Case("pi-valid", _pi(PI_OK_USER, _pi_asst([{"type": "text", "text": "hi"}])), ok=True),
    Case("pi-text-int", _pi(_pi_user([{"type": "text", "text": 5}])), [":2:", "text"]),
    Case(
        "pi-asst-text-int",
        _pi(PI_OK_USER, _pi_asst([{"type": "text", "text": 5}])),
        [":3:", "text"],
    ),
    Case(
        "pi-role-unknown",
        _pi(PI_OK_USER, _pi_msg("e2", "e1", {"role": "robot", "content": "x"})),
        [":3:", "role", "robot"],
    ),
    Case(
        "pi-header-no-id",
        _pi(PI_OK_USER, header={k: v for k, v in PI_HEADER.items() if k != "id"}),
        [":1:", "id"],
    ),
    Case("pi-header-wrong", _pi(PI_OK_USER, header={"type": "nope"}), [":1:"], ["--format", "pi"]),
    Case(
        "pi-time-invalid",
        _pi(
            _pi_msg("e1", None, {"role": "user", "content": "x"}, timestamp="2025-02-30T00:00:00Z")
        ),
        [":2:", "timestamp"],
    ),
    Case(
        "pi-msg-time-invalid",
        _pi(_pi_msg("e1", None, {"role": "user", "content": "x", "timestamp": 1e300})),
        [":2:", "timestamp"],
    ),
    Case(
        "pi-cost-number",
        _pi(PI_OK_USER, _pi_asst([], usage={"input": 1, "cost": 5})),
        [":3:", "cost"],
    ),
    Case(
        "pi-usage-string", _pi(PI_OK_USER, _pi_asst([], usage={"input": "lots"})), [":3:", "input"]
    ),
    Case("pi-id-list", _pi(_pi_msg([1], None, {"role": "user", "content": "x"})), [":2:", "id"]),
    Case(
        "pi-parent-dict",
        _pi(PI_OK_USER, _pi_msg("e2", {"a": 1}, {"role": "user", "content": "x"})),
        [":3:", "parentId"],
    ),
    Case(
        "pi-tool-result-orphan",
        _pi(
            PI_OK_USER,
            _pi_msg("e2", "e1", {"role": "toolResult", "toolCallId": "zz", "content": []}),
        ),
        [":3:", "toolCallId"],
    ),
    Case("pi-content-not-list", _pi(PI_OK_USER, _pi_asst("text")), [":3:", "content"]),
    Case(
        "pi-bash-command-int",
        _pi(_pi_msg("e1", None, {"role": "bashExecution", "command": 5, "output": ""})),
        [":2:", "command"],
    ),
    *_deep_and_not_utf8("pi", _pi, "pi.jsonl", PI_HEADER, PI_OK_USER, b"hello", b"he\xc3\x28llo"),
    # transcript
    Case(
        "tr-valid",
        _tr(TR_USER, {"role": "assistant", "parts": [{"type": "text", "text": "ok"}]}),
        ok=True,
    ),
    Case("tr-role-unknown", _tr(TR_USER, {"role": "robot", "parts": []}), [":3:", "role"]),
    Case(
        "tr-text-int",
        _tr({"role": "user", "parts": [{"type": "text", "text": 5}]}),
        [":2:", "text"],
    ),
    Case("tr-parts-missing", _tr({"role": "user"}), [":2:", "parts"]),
    Case(
        "tr-header-array",
        lambda d: _jsonl(d / "t.jsonl", [[1], TR_USER]),
        [":1:"],
        ["--format", "transcript"],
    ),
    *_deep_and_not_utf8("tr", _tr, "t.jsonl", TR_HEADER, TR_USER, b"hi", b"h\xffi"),
    Case(
        "tr-truncated",
        lambda d: (
            (d / "t.jsonl").write_bytes(
                json.dumps(TR_HEADER).encode() + b"\n" + json.dumps(TR_USER).encode()[:20]
            )
            and d / "t.jsonl"
        ),
        [":2:"],
        ["--format", "transcript"],
    ),
    # OpenCode export
    Case("oc-export-valid", _export(lambda doc: None), ok=True),
    Case(
        "oc-export-deep",
        _export_raw(lambda data: b'{"info": {"id": "ses_x"}, "messages": [' + _deep() + b"]}"),
        ["deeper"],
    ),
    Case(
        "oc-export-role-unknown",
        _export(_set("messages.0.info.role", "robot")),
        ["messages[0]", "role"],
    ),
    Case(
        "oc-export-time-negative",
        _export(_set("messages.0.info.time.created", -1)),
        ["messages[0]", "time"],
    ),
    Case("oc-export-time-zero", _export(_set("info.time.created", 0)), ["info", "time"]),
    Case(
        "oc-export-time-string",
        _export(_set("messages.0.info.time.created", "soon")),
        ["messages[0]", "time"],
    ),
    Case(
        "oc-export-time-huge",
        _export(_set("messages.1.info.time.created", 2**63 - 1)),
        ["messages[1]", "time"],
    ),
    Case(
        "oc-export-not-utf8",
        _export_raw(lambda data: data.replace(b"Fake session title", b"Fake \xff title", 1)),
        ["UTF-8"],
        ["--format", "opencode"],
    ),
    Case(
        "oc-export-truncated",
        _export_raw(lambda data: data[: len(data) // 2]),
        ["not JSON"],
        ["--format", "opencode"],
    ),
    Case(
        "oc-export-messages-string",
        _export(_set("messages", "x")),
        ["messages"],
        ["--format", "opencode"],
    ),
    Case(
        "oc-export-part-text-int",
        _export(_set("messages.0.parts.0.text", 5)),
        ["messages[0].parts[0]", "text"],
    ),
    Case(
        "oc-export-part-other-session",
        _export(_set("messages.0.parts.0.sessionID", "ses_other")),
        ["messages[0].parts[0]", "sessionID"],
    ),
    # OpenCode storage trees
    Case("st-valid", _storage(lambda root: None), ok=True),
    Case("st-part-fifo", _storage(_replace_part(os.mkfifo)), ["part", "not a regular file"]),
    Case(
        "st-part-dev-zero",
        _storage(_replace_part(lambda p: p.symlink_to("/dev/zero"))),
        ["part", "not a regular file"],
    ),
    Case("st-part-directory", _storage(_replace_part(lambda p: p.mkdir())), ["part"]),
    Case(
        "st-message-truncated",
        _storage(
            lambda root: _first_message_file(root).write_bytes(
                _first_message_file(root).read_bytes()[:30]
            )
        ),
        ["message", "not JSON"],
    ),
    Case(
        "st-message-role-unknown",
        _storage(_edit_json(_first_message_file, _set("role", "robot"))),
        ["message", "role"],
    ),
    Case(
        "st-session-deep",
        _storage(lambda root: _session_file(root).write_bytes(_deep())),
        ["session", "deeper"],
    ),
    Case(
        "st-session-id-traversal",
        _storage(_edit_json(_session_file, _set("id", "../../../etc"))),
        ["session", "id"],
    ),
    Case(
        "st-session-time-invalid",
        _storage(_edit_json(_session_file, _set("time.updated", -7))),
        ["session", "time"],
    ),
    Case(
        "st-part-over-max-bytes",
        _storage(lambda root: None),
        ["--max-bytes"],
        ["--max-bytes", "200"],
    ),
]


@dataclass
class Outcome:
    case: Case
    path: Path
    code: int
    out: str
    err: str
    stored: int


def _stored(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "sessions" not in tables:
            return 0
        return int(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])


def _run(case: Case, base: Path) -> Outcome:
    folder = base / case.name
    folder.mkdir()
    path = case.build(folder)
    db = folder / "s.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENCODE_", "SIDECAR_"))}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "sidecar", "import", str(path), "--db", str(db), *case.args],
            capture_output=True,
            timeout=GUARD,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return Outcome(case, path, -1, "", f"blocked for {GUARD}s", _stored(db))
    return Outcome(
        case,
        path,
        proc.returncode,
        proc.stdout.decode(errors="replace"),
        proc.stderr.decode(errors="replace"),
        _stored(db),
    )


def _verdict(o: Outcome) -> str | None:
    """None when the outcome is right; else what is wrong with it."""
    if "Traceback" in o.err:
        return "traceback: " + o.err.strip().splitlines()[-1]
    if o.case.ok:
        if o.code != 0 or o.stored < 1:
            return f"expected an import, got exit {o.code}: {o.err.strip()}"
        return None
    lines = o.err.strip("\n").split("\n")
    if o.code != 1:
        return f"exit {o.code}, not 1: {o.err.strip()[:300]}"
    if len(lines) != 1:
        return f"{len(lines)} lines on stderr: {o.err[:300]}"
    line = lines[0]
    if not line.startswith("compaction-sidecar import: "):
        return f"not our error line: {line[:300]}"
    if len(line) > 1000:
        return f"a {len(line)}-character line"
    named = str(o.path) in line or o.path.name in line
    if not named:
        return f"does not name {o.path}: {line}"
    missing = [n for n in o.case.needles if n not in line]
    if missing:
        return f"does not say {missing}: {line}"
    if o.stored:
        return f"stored {o.stored} session(s) although it failed"
    return None


def test_hostile_imports(tmp_path: Path) -> None:
    assert len(CASES) >= 60
    assert len({c.name for c in CASES}) == len(CASES)
    with ThreadPoolExecutor(max_workers=3) as pool:
        outcomes = list(pool.map(lambda c: _run(c, tmp_path), CASES))
    wrong = {o.case.name: v for o in outcomes if (v := _verdict(o)) is not None}
    good = len(outcomes) - len(wrong)
    print(f"\nhostile imports: {good} of {len(outcomes)} a correct import or a one-line error")
    assert not wrong, f"{len(wrong)} of {len(outcomes)} wrong:\n" + "\n".join(
        f"  {name}: {why}" for name, why in wrong.items()
    )


def test_a_failing_file_after_good_ones_stores_nothing(tmp_path: Path) -> None:
    """Several files in one import: the last is bad, so none is stored (one transaction)."""
    good = _jsonl(tmp_path / "good.jsonl", [_cc_user(), _cc_asst()])
    bad = _jsonl(tmp_path / "bad.jsonl", [_cc_user(timestamp="nope")])
    db = tmp_path / "s.db"
    proc = subprocess.run(
        [sys.executable, "-m", "sidecar", "import", str(good), str(bad), "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=GUARD,
    )
    assert proc.returncode == 1, proc.stderr
    assert str(bad) in proc.stderr and "timestamp" in proc.stderr
    assert _stored(db) == 0


def test_a_database_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    """``--db`` a directory, or a PostgreSQL server that refuses: one line, exit 1, and the
    password of the URL is not echoed."""
    src = _jsonl(tmp_path / "good.jsonl", [_cc_user(), _cc_asst()])
    for db, shown in [
        (str(tmp_path), str(tmp_path)),
        ("postgresql://u:hunter2@127.0.0.1:1/x", "postgresql://u:***@127.0.0.1:1/x"),
    ]:
        proc = subprocess.run(
            [sys.executable, "-m", "sidecar", "import", str(src), "--db", db],
            capture_output=True,
            text=True,
            timeout=GUARD,
        )
        # An unusable --db is a usage error (exit 2), as serve gives for the same --db.
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
        assert f"cannot open the database {shown}" in proc.stderr
        assert "hunter2" not in proc.stderr
