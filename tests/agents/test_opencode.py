"""The OpenCode plugin in the real OpenCode (1.18.34, headless `opencode serve`), end to end.

Each test scripts a session over OpenCode's HTTP API; every turn asks the fake model to read a
large file (about 10,000 tokens at the 60,000-token window). What the model was sent is what
the fake LLM recorded; what the daemon did is what its subscriber heard and what it stored.
The figures each run observed are printed (`-s` shows them).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.agents.fake_llm import FakeLLM, Request, text_of
from tests.agents.opencode_run import (
    HOW_TO_INSTALL,
    OpenCode,
    Watch,
    make_files,
    plugin_entry,
    sidecar_connect_args,
    stop_daemon,
)

WINDOW = 60_000
OUTPUT = 4_000
FILE_KB = 40  # a read of one file: about 41,000 characters, 10,300 tokens


def _required(var: str) -> Path:
    value = os.environ.get(var)
    if value and Path(value).exists():
        return Path(value)
    reason = f"${var} is {'not set' if not value else f'{value!r}, missing'}: {HOW_TO_INSTALL}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"the OpenCode end-to-end tests are required under CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def opencode_bin() -> Path:
    """The `opencode-linux-x64` 1.18.34 platform binary."""
    return _required("SIDECAR_OPENCODE_BIN")


@pytest.fixture(scope="module")
def opencode_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin's entry file, unpacked from the packed `compaction-sidecar-opencode`."""
    packed = _required("SIDECAR_OPENCODE_PLUGIN")
    return plugin_entry(packed, tmp_path_factory.mktemp("opencode-plugin"))


@dataclass
class Run:
    root: Path
    llm: FakeLLM
    oc: OpenCode
    watch: Watch | None

    def read_turn(self, sid: str, i: int) -> dict[str, Any]:
        path = self.oc.proj / f"big{i:03d}.txt"
        return self.oc.say(sid, f"Turn {i}: what is in {path.name}?\n@@tool read {path}")

    def daemon(self, method: str, params: dict[str, Any]) -> Any:
        assert self.watch is not None
        return self.watch.run(self.watch.client.request(method, params))

    def summaries(self, sid: str) -> list[str]:
        """The text of every summary the daemon wrote for the session."""
        page = self.daemon("session/messages", {"sessionID": sid})["messages"]
        out = []
        for m in page:
            info = m["info"]
            if info["role"] == "assistant" and info.get("summary") is True:
                text = "\n".join(p.get("text", "") for p in m["parts"] if p["type"] == "text")
                out.append(text.strip())
        return out


def carries_summary(req: Request, summaries: list[str]) -> bool:
    body = req.text()
    return any(s[:300] in body for s in summaries if s)


TURN = re.compile(r"^Turn (\d+):")


def turn_of(req: Request) -> int:
    """The turn a request is for: the newest `Turn N:` user message it carries."""
    found = [
        int(m.group(1))
        for msg in req.messages
        if msg.get("role") == "user" and (m := TURN.match(text_of(msg.get("content"))))
    ]
    return max(found, default=0)


def turn_compacted_first(run: Run, sid: str, marker_id: str) -> int:
    """The turn the daemon's first compaction came in: the newest `Turn N:` user message
    stored before its marker."""
    turn = 0
    for m in run.daemon("session/messages", {"sessionID": sid})["messages"]:
        if m["info"]["id"] == marker_id:
            return turn
        for p in m["parts"]:
            found = TURN.match(p.get("text", "")) if m["info"]["role"] == "user" else None
            turn = int(found.group(1)) if found else turn
    raise AssertionError(f"marker {marker_id} not stored")


def tool_results(req: Request) -> dict[str, str]:
    """call id -> tool output text, for the tool results a request carries."""
    return {
        str(m.get("tool_call_id")): text_of(m.get("content"))
        for m in req.messages
        if m.get("role") == "tool"
    }


def lacking_tool_result(main: list[Request]) -> list[int]:
    """Requests that follow a tool call answer without that call's result."""
    bad = []
    for prev, req in itertools.pairwise(main):
        if prev.tool_call is None:
            continue
        call_id = f"call_{prev.n:05d}"
        if call_id not in tool_results(req):
            bad.append(req.n)
    return bad


class Runs:
    """Starts runs under `root` (OpenCode, the fake LLM, the plugin's own daemon, a watcher)
    and stops them all at the end."""

    def __init__(self, root: Path, binary: Path, plugin: Path) -> None:
        self.root, self.binary, self.plugin = root, binary, plugin
        self.runs: list[Run] = []

    def __call__(
        self,
        daemon_config: dict[str, Any] | None = None,
        *,
        files: int = 12,
        options: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        watch: bool = True,
        summary_text: str = "SUMMARY {n}: we read several large files.",
    ) -> Run:
        root = self.root
        config = None
        if daemon_config is not None:
            config = root / "daemon.json"
            config.write_text(json.dumps(daemon_config))
        llm = FakeLLM(summary_text=summary_text).start()
        watcher = Watch(root, config) if watch else None
        command, args = sidecar_connect_args(root, config)
        plugin_options: dict[str, Any] = {"command": command, "args": args}
        plugin_options.update(options or {})
        oc = OpenCode(
            binary=self.binary,
            root=root,
            llm_url=llm.base_url,
            plugin=self.plugin,
            plugin_options=plugin_options,
            context=WINDOW,
            output=OUTPUT,
            env_extra=env or {},
            plugin_config=env is None,
        )
        oc.proj.mkdir(parents=True, exist_ok=True)
        make_files(oc.proj, files, FILE_KB)
        run = Run(root, llm, oc, watcher)
        self.runs.append(run)
        oc.start()
        return run

    def close(self) -> None:
        for run in self.runs:
            run.oc.stop()
            if run.watch is not None:
                run.watch.close()
            stop_daemon(run.root)
            run.llm.stop()


@pytest.fixture
def start(tmp_path: Path, opencode_bin: Path, opencode_plugin: Path) -> Iterator[Runs]:
    runs = Runs(tmp_path, opencode_bin, opencode_plugin)
    yield runs
    runs.close()


@dataclass
class LongSession:
    """30 turns at the 60,000-token window with `compaction.prepare: 0.7`, each reading a
    file, and what was seen by then (later tests may go on in the same session)."""

    run: Run
    sid: str
    main: list[Request]
    summaries: list[str]
    records: list[dict[str, Any]]
    prepared: list[Any]
    opencode_summaries: int  # summary requests OpenCode sent plus summaries it stored
    first_compacted_turn: int


@pytest.fixture(scope="module")
def long_session(
    tmp_path_factory: pytest.TempPathFactory, opencode_bin: Path, opencode_plugin: Path
) -> Iterator[LongSession]:
    runs = Runs(tmp_path_factory.mktemp("long"), opencode_bin, opencode_plugin)
    try:
        run = runs({"compaction": {"prepare": 0.7}}, files=30)
        sid = run.oc.new_session()
        for i in range(1, 31):
            run.read_turn(sid, i)
        assert run.watch is not None
        events = [e for e in run.watch.compacted() if e["sessionID"] == sid]
        records = run.daemon("session/compactions", {"sessionID": sid})["compactions"]
        yield LongSession(
            run,
            sid,
            run.llm.requests("main"),
            run.summaries(sid),
            records,
            [e.get("prepared") for e in events],
            len(run.llm.requests("summary"))
            + sum(1 for m in run.oc.messages(sid) if m["info"].get("summary") is True),
            turn_compacted_first(run, sid, records[0]["markerID"]) if records else 0,
        )
    finally:
        runs.close()


def test_thirty_turns_at_a_60k_window_run_on_the_daemon(long_session: LongSession) -> None:
    """Every main request after the first compaction carries the daemon's summary, OpenCode
    never summarizes, no request goes over the window, every compaction after the first
    preparation is a prepared one (`compaction.prepare: 0.7`), and no step lacks the tool
    result the model asked for in the step before."""
    s = long_session
    main, summaries, prepared = s.main, s.summaries, s.prepared
    first = next(i for i, r in enumerate(main) if carries_summary(r, summaries))
    without = [r.n for r in main[first:] if not carries_summary(r, summaries)]
    # No request of a turn after the first compaction's goes without a summary either.
    later = [r.n for r in main if turn_of(r) > s.first_compacted_turn]
    assert 0 < s.first_compacted_turn < 30 and later and main[first].n <= later[0]
    over = [(r.n, r.prompt_tokens) for r in main if r.prompt_tokens > WINDOW]
    print(
        f"opencode 30 turns: {len(main)} main requests, {len(s.records)} daemon compactions, "
        f"the first in turn {s.first_compacted_turn}, "
        f"prepared {prepared}, max prompt tokens {max(r.prompt_tokens for r in main)} "
        f"(window {WINDOW}), over the window {len(over)}, "
        f"lacking a tool result {len(lacking_tool_result(main))}"
    )
    assert len(main) == 60  # a read step and an answer step per turn
    assert s.opencode_summaries == 0
    assert len(s.records) >= 3
    assert without == []
    assert over == []
    assert lacking_tool_result(main) == []
    first_prepared = prepared.index(True) if True in prepared else len(prepared)
    assert first_prepared < len(prepared), prepared
    assert all(prepared[first_prepared:]), prepared


def opencode_ids(run: Run, sid: str) -> list[str]:
    return [m["info"]["id"] for m in run.oc.messages(sid)]


def daemon_ids(run: Run, sid: str) -> tuple[list[str], set[str]]:
    """The daemon's stored message ids, and those its compactions added."""
    page = run.daemon("session/messages", {"sessionID": sid})["messages"]
    records = run.daemon("session/compactions", {"sessionID": sid})["compactions"]
    added = set()
    for c in records:
        added |= {c["messageID"], c["markerID"]} | ({c["continueID"]} - {None})
    return [m["info"]["id"] for m in page], added


def test_restarted_opencode_resyncs_and_the_window_continues(start: Runs) -> None:
    """OpenCode stopped and started again on the same store: the plugin re-sends what it has,
    no message is stored twice or lost, and the next request is still the daemon's window."""
    run = start()
    sid = run.oc.new_session()
    for i in range(1, 8):
        run.read_turn(sid, i)
    before = len(run.daemon("session/compactions", {"sessionID": sid})["compactions"])
    assert before >= 1
    run.oc.stop()
    run.oc.start()
    run.llm.clear()
    for i in range(8, 11):
        run.read_turn(sid, i)
    main = run.llm.requests("main")
    summaries = run.summaries(sid)
    stored, added = daemon_ids(run, sid)
    ours = opencode_ids(run, sid)
    print(
        f"opencode restart: {len(ours)} OpenCode messages, {len(stored)} stored by the daemon "
        f"({len(added)} its compactions added), {len(main)} main requests after the restart"
    )
    assert len(stored) == len(set(stored))
    assert [i for i in stored if i not in added] == ours
    assert all(carries_summary(r, summaries) for r in main)
    assert lacking_tool_result(main) == []


def test_killed_daemon_leaves_the_turn_answered_and_the_next_step_on_the_daemon(
    start: Runs,
) -> None:
    """The daemon killed mid-session: the next turn still gets its answer (a step the daemon
    cannot serve goes out with OpenCode's own messages), and by the turn's next step the
    window is the daemon's again, from the same store."""
    run = start()
    sid = run.oc.new_session()
    for i in range(1, 8):
        run.read_turn(sid, i)
    assert run.watch is not None
    pid = run.daemon("daemon/status", {})["pid"]
    summaries = run.summaries(sid)
    assert summaries
    run.watch.close()
    run.watch = None
    os.kill(pid, signal.SIGKILL)
    run.llm.clear()
    answer = run.read_turn(sid, 8)
    assert answer["info"]["role"] == "assistant" and not answer["info"].get("error")
    step1, step2 = run.llm.requests("main")
    ours = [m["info"]["id"] for m in run.oc.messages(sid)]
    run.watch = Watch(run.root)
    before = len(summaries)
    summaries = run.summaries(sid)
    assert carries_summary(step1, summaries) or len(step1.messages) >= 2 * 7
    assert carries_summary(step2, summaries)
    assert f"call_{step1.n:05d}" in tool_results(step2)
    log = run.oc.log_text()
    print(
        f"opencode daemon killed: step 1 {'daemon' if carries_summary(step1, summaries) else 'own'}"
        f" window ({len(step1.messages)} messages), step 2 daemon window "
        f"({len(step2.messages)} messages), {len(ours)} OpenCode messages, "
        f"daemon summaries {before} before the kill, {len(summaries)} after the turn"
    )
    assert log.count("the daemon's window is unavailable") <= 1


def test_unreachable_daemon_sends_opencodes_own_messages_and_logs_once(
    start: Runs,
) -> None:
    """A daemon that cannot be started: every turn is answered with OpenCode's own messages
    and the failure is logged once, not at every step. The plugin is a file in the project's
    `.opencode/plugin/` here, configured through the environment."""
    env = {"COMPACTION_SIDECAR_COMMAND": "/nonexistent/compaction-sidecar"}
    run = start(env=env, watch=False)
    sid = run.oc.new_session()
    for i in range(1, 4):
        answer = run.read_turn(sid, i)
        assert not answer["info"].get("error")
    main = run.llm.requests("main")
    assert len(main) == 6
    assert [len(r.messages) for r in main] == sorted(len(r.messages) for r in main)
    log = run.oc.log_text()
    assert log.count("cannot reach the daemon (/nonexistent/compaction-sidecar connect)") == 1


def normalized(req: Request, proj: Path) -> list[tuple[str, str]]:
    """A request's messages without ids and the project's path: (role, text or tool call),
    the system prompt left out."""
    out = []
    for m in req.messages:
        if m.get("role") == "system":
            continue
        calls = [c["function"]["name"] for c in m.get("tool_calls") or []]
        text = text_of(m.get("content")) + "|".join(calls)
        out.append((str(m.get("role")), text.replace(str(proj), "PROJ")))
    return out


def test_manual_compact_window_equals_opencodes_next_request(
    start: Runs, tmp_path: Path, opencode_bin: Path, opencode_plugin: Path
) -> None:
    """After a manual `/compact` (OpenCode's own compaction, mirrored), the daemon's window is
    what OpenCode alone sends next: its marker, its summary and its tail. OpenCode alone is
    the same script run in a second OpenCode without the plugin (its automatic compaction off
    too, so both histories match)."""

    def script(oc: OpenCode, llm: FakeLLM) -> Request:
        sid = oc.new_session()
        for i in range(1, 5):
            path = oc.proj / f"big{i:03d}.txt"
            oc.say(sid, f"Turn {i}: what is in {path.name}?\n@@tool read {path}")
        oc.summarize(sid)
        llm.clear()
        oc.say(sid, "And now?")
        (req,) = llm.requests("main")
        return req

    run = start(summary_text="SUMMARY: four files were read.")
    with_plugin = script(run.oc, run.llm)
    alone_root = tmp_path / "alone"
    with FakeLLM(summary_text="SUMMARY: four files were read.") as llm:
        oc = OpenCode(
            binary=opencode_bin,
            root=alone_root,
            llm_url=llm.base_url,
            plugin=None,
            plugin_options={},
            context=WINDOW,
            output=OUTPUT,
            extra_config={"compaction": {"auto": False, "prune": False}},
        )
        oc.proj.mkdir(parents=True)
        make_files(oc.proj, 4, FILE_KB)
        oc.start()
        try:
            alone = script(oc, llm)
        finally:
            oc.stop()
    ours, theirs = normalized(with_plugin, run.oc.proj), normalized(alone, oc.proj)
    print(f"opencode /compact: {len(ours)} messages with the plugin, {len(theirs)} alone")
    assert ours == theirs
    summary = [i for i, (role, text) in enumerate(ours) if text == "SUMMARY: four files were read."]
    assert summary and ours[summary[0] - 1][0] == "user"  # the marker, then the summary
    assert ("user", "Turn 4: what is in big004.txt?\n@@tool read PROJ/big004.txt") in ours[
        summary[0] :
    ]  # and OpenCode's kept tail after it


def test_recall_tool_returns_a_tool_output_compacted_away(long_session: LongSession) -> None:
    """The model calls the plugin's `history_search` (through the fake LLM): it finds the
    output of a read that a compaction took out of the window many turns earlier, and not the
    search call itself nor the message asking for it; `history_expand` returns that output.
    It goes on in the 30-turn session."""
    run, sid = long_session.run, long_session.sid
    line = "f002 l000100"
    run.llm.clear()
    run.oc.say(sid, f'Where did I see {line}?\n@@tool history_search {{"query": "{line}"}}')
    ask, answer = run.llm.requests("main")
    assert not [out for out in tool_results(ask).values() if line in out]  # compacted away
    found = tool_results(answer)[f"call_{ask.n:05d}"]
    stored = run.daemon("session/messages", {"sessionID": sid})["messages"]
    parts = {p["id"]: p for m in stored for p in m["parts"]}
    read_part = next(
        p
        for p in parts.values()
        if p["type"] == "tool" and p["state"]["input"].get("filePath", "").endswith("big002.txt")
    )
    asking = next(m["info"]["id"] for m in stored if "Where did I see" in json.dumps(m["parts"]))
    hits = [h.split(" ", 3) for h in found.splitlines()]
    print(f"opencode recall: {len(hits)} hits, first {hits[0][:3] if hits else None}")
    assert [read_part["messageID"], read_part["id"]] in [h[:2] for h in hits]
    assert all(parts.get(h[1], {}).get("tool") != "history_search" for h in hits)
    assert all(h[0] != asking for h in hits)
    run.llm.clear()
    expand = {"messageID": read_part["messageID"], "partID": read_part["id"], "offset": 0}
    run.oc.say(sid, f"Show it.\n@@tool history_expand {json.dumps(expand)}")
    asked, shown = run.llm.requests("main")
    content = tool_results(shown)[f"call_{asked.n:05d}"]
    assert line in content
