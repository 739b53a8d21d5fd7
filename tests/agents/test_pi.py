"""The real pi with the packed `compaction-sidecar-pi` extension, against the fake LLM and a real
shared daemon (issue 31, "Must show": pi).

20 turns at a 60,000-token window, each reading a large file (pi's read tool caps it at 50 KB,
about 13,000 tokens): every model request after the daemon's first compaction carries the
daemon's summary as pi's own compaction-summary message, pi compacts nothing itself, and a
`/tree` navigation followed by a new prompt maps to `session/fork` (the abandoned branch stays
in the original daemon session, the new one goes to the fork). The figures are printed.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from sidecar_client import connect

from sidecar.protocol.framing import FrameError, FrameParser
from tests.agents.fake_llm import FakeLLM, Request, text_of
from tests.agents.pi_agent import PiRPC, pi_setup, unpack
from tests.daemon_env import cli_env

# pi's wrapping of a compaction summary in the model's context (messages.d.ts)
SUMMARY_PREFIX = (
    "The conversation history before this point was compacted into the following summary:"
    "\n\n<summary>\n"
)
TURNS = 20
WINDOW = 60_000

# A second extension, only for the test: RPC mode has no `/tree` command, so this one offers
# the same navigation (`ctx.navigateTree`, what the TUI's /tree calls) as an extension command.
TREE_HELPER = """
export default function (pi) {
  pi.registerCommand("tree-to", {
    description: "navigate the session tree (test helper)",
    handler: async (args, ctx) => { await ctx.navigateTree(args.trim(), { summarize: false }); },
  });
}
"""


def big_file(path: Path, i: int) -> None:
    """About 60 KB of distinct lines (pi's read sends the first 50 KB)."""
    lines = [
        f"file {i:03d} line {n:05d}: alpha beta gamma delta {n * 7919 % 10007}" for n in range(1100)
    ]
    path.write_text("\n".join(lines) + "\n")


class Daemon:
    """`serve --listen unix:SOCK` in a subprocess; the extension joins it via `connect --socket`."""

    def __init__(self, home: Path) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.sock = home / "run" / "d.sock"
        self.db = home / "sessions.db"
        env = cli_env(home)
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "sidecar", "serve", "--listen", f"unix:{self.sock}"),
                *("--db", str(self.db), "--log-file", str(home / "daemon.log")),
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        ready = threading.Event()

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                if b"listening on" in line:
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        assert ready.wait(30) and self.proc.poll() is None, "daemon did not start"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(20)


async def daemon_state(sock: Path) -> dict[str, Any]:
    """Every session with its messages and compactions, read through the daemon."""
    client = await connect(f"unix:{sock}")
    try:
        out: dict[str, Any] = {}
        listing = await client.request("session/list", {"limit": 100})
        for s in listing["sessions"]:
            msgs: list[dict[str, Any]] = []
            cursor = None
            while True:
                params: dict[str, Any] = {"sessionID": s["id"]}
                if cursor:
                    params["cursor"] = cursor
                page = await client.request("session/messages", params)
                msgs.extend(page["messages"])
                cursor = page.get("nextCursor")
                if not cursor:
                    break
            comps = await client.request("session/compactions", {"sessionID": s["id"]})
            out[s["id"]] = {"session": s, "messages": msgs, "compactions": comps["compactions"]}
        return out
    finally:
        await client.close()


def summary_in(req: Request) -> str | None:
    """The compaction summary pi sent in this request (its own wrapping), if any."""
    for m in req.messages:
        t = text_of(m.get("content"))
        if m.get("role") == "user" and t.startswith(SUMMARY_PREFIX):
            return t[len(SUMMARY_PREFIX) :].removesuffix("\n</summary>")
    return None


def start_pi(
    tmp_path: Path,
    llm: FakeLLM,
    sidecar: list[str],
    *extra: Path,
    config: dict[str, Any] | None = None,
) -> tuple[PiRPC, Path]:
    """pi in RPC mode on the fake model (window 60,000), the packed extension loaded, its
    daemon reached by running `sidecar`; the project folder."""
    pi_bin, packed = pi_setup()
    ext = unpack(packed, tmp_path / "ext")
    proj = tmp_path / "proj"
    proj.mkdir(exist_ok=True)
    agent_dir = tmp_path / "pi-agent"
    agent_dir.mkdir(exist_ok=True)
    model = {"id": "fake-model", "contextWindow": WINDOW, "maxTokens": 4000}
    model |= {"reasoning": False, "input": ["text"]}
    provider = {"baseUrl": llm.base_url, "api": "openai-completions", "apiKey": "sk-fake"}
    provider |= {"compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False}}
    (agent_dir / "models.json").write_text(
        json.dumps({"providers": {"fake": {**provider, "models": [model]}}})
    )
    # pi's own compaction stays on: the extension has to cancel it.
    (agent_dir / "settings.json").write_text(json.dumps({"compaction": {"enabled": True}}))
    (tmp_path / "d").mkdir(exist_ok=True)
    env = cli_env(tmp_path / "d")
    env |= {
        "HOME": str(tmp_path / "home"),
        "PI_CODING_AGENT_DIR": str(agent_dir),
        "PI_OFFLINE": "1",
        "PI_SKIP_VERSION_CHECK": "1",
        "COMPACTION_SIDECAR_COMMAND": sidecar[0],
        "COMPACTION_SIDECAR_ARGS": json.dumps(sidecar[1:]),
    }
    if config is not None:
        (tmp_path / "sidecar.json").write_text(json.dumps(config))
        env["COMPACTION_SIDECAR_CONFIG"] = str(tmp_path / "sidecar.json")
    argv = [str(pi_bin), "--mode", "rpc", "--provider", "fake", "--model", "fake-model"]
    argv += ["-e", str(ext)]
    for e in extra:
        argv += ["-e", str(e)]
    return PiRPC(argv, proj, env, tmp_path / "pi.stderr"), proj


def sent(wire: Path) -> list[dict[str, Any]]:
    """Every frame the extension sent the daemon (LSP frames), connection after connection:
    each `sidecar connect` the extension starts tees its input to a file of its own, `wire` +
    `.<start time in ns>.<pid>` (one shared file interleaved the frames of a connection still
    closing with those of the next, as two processes appended to it)."""
    out: list[dict[str, Any]] = []
    started = sorted(wire.parent.glob(f"{wire.name}.*"), key=lambda f: int(f.name.split(".")[-2]))
    assert started, f"no {wire.name}.* written"
    for log in started:
        parser = FrameParser()
        parser.feed(log.read_bytes())
        while (body := parser.next()) is not None:
            assert not isinstance(body, FrameError), (log, body)
            out.append(json.loads(bytes(body)))
        assert parser.inside_frame is None, (log, parser.inside_frame)
    return out


def context_reads(wire: Path) -> list[dict[str, Any]]:
    """The params of each `session/context` request sent."""
    return [f["params"] for f in sent(wire) if f.get("method") == "session/context"]


def notices(pi: PiRPC) -> list[dict[str, Any]]:
    """What the extension told the user (notify) and any extension error pi reported."""
    return pi.of_type("extension_error") + [
        e
        for e in pi.of_type("extension_ui_request")
        if e.get("method") == "notify" and e.get("notifyType") != "info"
    ]


def test_pi_runs_on_the_daemons_window(tmp_path: Path) -> None:
    pi_setup()
    helper = tmp_path / "tree_helper.mjs"
    helper.write_text(TREE_HELPER)
    daemon = Daemon(tmp_path / "d")
    llm = FakeLLM(log_dir=tmp_path / "llm").start()
    try:
        # Through `tee`: what the extension sends the daemon is on record, a file for each
        # connection (`context_reads`).
        wire = tmp_path / "to-daemon.log"
        sidecar = ["sh", "-c", 'tee "$0.$(date +%s%N).$$" | exec "$@"', str(wire)]
        sidecar += [sys.executable, "-m", "sidecar", "connect", "--socket", str(daemon.sock)]
        pi, proj = start_pi(tmp_path, llm, sidecar, helper)
        for i in range(1, TURNS + 1):
            big_file(proj / f"big{i:03d}.txt", i)
        try:
            for i in range(1, TURNS + 1):
                path = proj / f"big{i:03d}.txt"
                end = pi.prompt(f"turn {i}: read it\n@@tool read {json.dumps({'path': str(path)})}")
                assert end["messages"][-1]["role"] == "assistant"
            state = pi.command({"type": "get_state"})["data"]
            forks = pi.command({"type": "get_fork_messages"})["data"]["messages"]
            target = next(m for m in forks if m["text"].startswith("turn 15:"))
            requests_before_tree = len(llm.requests("main"))
            pi.command({"type": "prompt", "message": f"/tree-to {target['entryId']}"})
            pi.prompt(
                "branch: a different turn 15\n@@tool read "
                + json.dumps({"path": str(proj / "big001.txt")})
            )
            # pi's own /fork (RPC `fork`): a new pi session from before the branch's prompt.
            requests_before_fork = len(llm.requests("main"))
            branch_prompt = next(
                m
                for m in pi.command({"type": "get_fork_messages"})["data"]["messages"]
                if m["text"].startswith("branch:")
            )
            assert not pi.command({"type": "fork", "entryId": branch_prompt["entryId"]})["data"][
                "cancelled"
            ]
            fork_state = pi.command({"type": "get_state"})["data"]
            # Recall, called by the model: turn 3's output is behind the summaries by now.
            pi.prompt('forked: find it\n@@tool history_search {"query": "file 003 line 00001"}')
            # The daemon's compaction by hand (pi's /compact is pi's own, cancelled).
            pi.command({"type": "prompt", "message": "/sidecar-compact keep file 014 in detail"})
            pi.prompt("after the manual compaction")
            errors = notices(pi)
            pi_compactions = [e for e in pi.of_type("compaction_end") if e.get("result")]
            attempts = pi.of_type("compaction_start")
        finally:
            code = pi.close()
        stderr = (tmp_path / "pi.stderr").read_text()
        assert code == 0, stderr
        assert errors == [], errors
        assert "compaction-sidecar:" not in stderr, stderr
        sessions = asyncio.run(daemon_state(daemon.sock))
    finally:
        llm.stop()
        daemon.stop()

    root_id = "ses_pi_" + state["sessionId"].replace("-", "")
    assert root_id in sessions, list(sessions)
    root = sessions[root_id]
    summaries = {
        "\n".join(p["text"] for p in m["parts"] if p["type"] == "text")
        for s in sessions.values()
        for m in s["messages"]
        if m["info"]["role"] == "assistant" and m["info"].get("summary")
    }
    main = llm.requests("main")
    before_tree = main[:requests_before_tree]
    carried = [summary_in(r) for r in before_tree]
    first = next(i for i, s in enumerate(carried) if s is not None)
    after = carried[first:]
    # Every request after the first compaction carries a summary the daemon wrote, as pi's
    # own compaction-summary message.
    assert all(s is not None for s in after), [i for i, s in enumerate(carried) if s is None]
    assert all(s in summaries for s in after)
    # ... and each compaction of the root (all before the branch) reached the model.
    root_summaries = {
        "\n".join(p["text"] for p in m["parts"] if p["type"] == "text")
        for m in root["messages"]
        if m["info"]["role"] == "assistant" and m["info"].get("summary")
    }
    assert set(after) == root_summaries
    assert len(root["compactions"]) >= 3
    # pi compacted nothing itself: no summary request, no compaction entry, none finished.
    assert llm.requests("summary") == []
    assert pi_compactions == []
    session_file = Path(state["sessionFile"])
    entries = [json.loads(x) for x in session_file.read_text().splitlines() if x.strip()]
    assert [e for e in entries if e.get("type") == "compaction"] == []
    # No request over the window.
    over = [r.n for r in main if r.prompt_tokens > WINDOW]

    # The /tree branch maps to session/fork: a new daemon session whose parent is the root,
    # holding the branch's prompt; the root keeps the abandoned turns and not the branch.
    def users(s: dict[str, Any]) -> list[str]:
        return [
            "\n".join(p.get("text", "") for p in m["parts"] if p["type"] == "text")
            for m in s["messages"]
            if m["info"]["role"] == "user"
        ]

    forked = [s for s in sessions.values() if s["session"].get("parentID") == root_id]
    assert len(forked) == 2, [s["session"] for s in sessions.values()]
    (fork,) = [s for s in forked if any(u.startswith("branch:") for u in users(s))]
    assert any(u.startswith("branch: a different turn 15") for u in users(fork))
    assert not any(u.startswith(("turn 15:", "turn 16:", "turn 20:")) for u in users(fork))
    assert any(u.startswith("turn 20:") for u in users(root))
    assert not any(u.startswith("branch:") for u in users(root))
    branch_reqs = main[requests_before_tree:requests_before_fork]
    assert branch_reqs and all("turn 16: read it" not in r.text() for r in branch_reqs)
    assert all("branch: a different turn 15" in r.text() for r in branch_reqs)
    entry_ids = {m["info"].get("piEntryID") for m in fork["messages"]} - {None}
    assert target["entryId"] not in entry_ids  # the re-edited prompt is not in the fork

    # pi's /fork: a new pi session, mapped to a fork of the root made before turn 15 (the
    # branch point of what pi copied), holding the new prompt and none of turns 15-20.
    assert fork_state["sessionId"] != state["sessionId"]
    (pi_fork,) = [s for s in forked if s is not fork]
    assert any(u.startswith("forked: find it") for u in users(pi_fork))
    assert not any(u.startswith(("turn 15:", "branch:")) for u in users(pi_fork))
    assert any(u.startswith("turn 14:") for u in users(pi_fork))
    # The recall tool ran on the fork's daemon session and found turn 3's output, which the
    # model no longer had in its window.
    recall = main[requests_before_fork:]
    asked, answered = recall[0], recall[1]
    assert asked.tool_call is not None and asked.tool_call.name == "history_search"
    assert "file 003 line 00001: alpha" not in asked.text()
    result = next(m for m in answered.messages if m.get("tool_call_id") == f"call_{asked.n:05d}")
    assert "file 003 line 00001: alpha" in text_of(result.get("content")), result
    # /sidecar-compact: a manual daemon compaction of the fork's session, whose summary the
    # next request carries.
    manual = [c for c in pi_fork["compactions"] if not c["auto"]]
    assert len(manual) == 1, pi_fork["compactions"]
    last = main[-1]
    assert "after the manual compaction" in last.text()
    (newest,) = [m for m in pi_fork["messages"] if m["info"]["id"] == manual[0]["messageID"]]
    assert summary_in(last) == "\n".join(p["text"] for p in newest["parts"] if p["type"] == "text")

    # The mirror is answered, never echoed: each connection declared `echo: false`.
    hellos = [f for f in sent(wire) if f.get("method") == "initialize"]
    assert hellos and all(f["params"]["capabilities"] == {"echo": False} for f in hellos), hellos

    # Each daemon session's window is read whole once, then only what changed (`since`).
    reads: dict[str, list[dict[str, Any]]] = {}
    for params in context_reads(wire):
        reads.setdefault(params["sessionID"], []).append(params)
    assert set(reads) == set(sessions), (set(reads), set(sessions))
    assert len(reads[root_id]) >= TURNS
    assert all("since" not in r[0] for r in reads.values())
    assert all(isinstance(later.get("since"), str) for r in reads.values() for later in r[1:])

    # Requests after a step that asked for a tool, without that tool's result (the open turn
    # lost at a compaction made on a read).
    lost = 0
    for prev, r in itertools.pairwise(main):
        if prev.tool_call is not None:
            want = f"call_{prev.n:05d}"
            lost += not any(m.get("tool_call_id") == want for m in r.messages)
    assert lost == 0  # compaction.keepOpenTurn, which the extension turns on
    # Requests with a tool call whose result is missing (the model would be refused).
    lacking = 0
    for r in main:
        prev_calls = [
            c["id"]
            for m in r.messages
            if m.get("role") == "assistant"
            for c in m.get("tool_calls") or []
        ]
        results = {m.get("tool_call_id") for m in r.messages if m.get("role") == "tool"}
        lacking += any(c not in results for c in prev_calls)
    print(
        f"\npi e2e: {len(main)} main requests over {TURNS} turns, a /tree branch turn and a "
        f"/fork recall turn; "
        f"{len(root['compactions'])} daemon compactions in the root session; first summary in "
        f"request {first + 1}; {len(after)}/{len(after)} later requests carry the daemon's "
        f"summary as pi's compaction-summary message; {len(over)} over the {WINDOW:,} window; "
        f"{lost} requests lacking the tool result asked for in the previous step; "
        f"{lacking} with a tool call lacking its result; pi compactions "
        f"{len(pi_compactions)} (attempts cancelled {len(attempts)}); fork "
        f"{fork['session']['id']} <- {root_id} with {len(fork['messages'])} messages; pi /fork "
        f"-> {pi_fork['session']['id']} <- {root_id}"
    )


def test_pi_without_a_daemon_keeps_its_own_messages(tmp_path: Path) -> None:
    """A daemon that cannot be reached never breaks a turn: pi sends its own messages, the user
    is told once, and pi's own compaction is left alone."""
    pi_setup()
    with FakeLLM() as llm:
        pi, proj = start_pi(tmp_path, llm, [str(tmp_path / "no-such-compaction-sidecar")])
        try:
            for i in range(1, 4):
                big_file(proj / f"f{i}.txt", i)
                read = json.dumps({"path": str(proj / f"f{i}.txt")})
                end = pi.prompt(f"turn {i}\n@@tool read {read}")
                assert end["messages"][-1]["role"] == "assistant"
            told = notices(pi)
        finally:
            assert pi.close() == 0
    main = llm.requests("main")
    assert len(main) == 6
    assert len(told) == 1 and "compaction-sidecar:" in told[0]["message"], told
    # pi's own messages: the whole history, every tool result in full, no summary
    assert all(summary_in(r) is None for r in main)
    assert all(f"file {i:03d} line 00001" in main[-1].text() for i in range(1, 4))


def test_pi_rejoins_a_restarted_daemon(tmp_path: Path) -> None:
    """The daemon killed between turns: the next model call is on a new daemon (`connect`
    starts one on the same socket and database), holding the whole branch, nothing twice, with
    the extension's config file applied again (a 20,000-token trigger: turns of about 13,000
    tokens compact, which the 60,000 window alone would not). The old `connect` outlives its
    daemon until the extension's next request reaches it (late_exit.py): the request it takes
    unanswered goes again on a new connection, and the user is told nothing."""
    pi_setup()
    home = tmp_path / "d"
    daemon = Daemon(home)
    try:
        with FakeLLM() as llm:
            sidecar = [sys.executable, str(Path(__file__).with_name("late_exit.py"))]
            sidecar += [sys.executable, "-m", "sidecar", "connect", "--socket", str(daemon.sock)]
            sidecar += ["--db", str(daemon.db)]
            config = {"compaction": {"triggerTokens": 20_000}}
            pi, proj = start_pi(tmp_path, llm, sidecar, config=config)
            try:
                for i in range(1, 4):
                    if i == 3:
                        daemon.stop()
                    big_file(proj / f"f{i}.txt", i)
                    read = json.dumps({"path": str(proj / f"f{i}.txt")})
                    pi.prompt(f"turn {i}\n@@tool read {read}")
                state = pi.command({"type": "get_state"})["data"]
                told = notices(pi)
            finally:
                assert pi.close() == 0
        assert told == []
        sessions = asyncio.run(daemon_state(daemon.sock))
    finally:
        daemon.stop()
        asyncio.run(stop_shared(daemon.sock))
    root = sessions["ses_pi_" + state["sessionId"].replace("-", "")]
    mirrored = [m for m in root["messages"] if m["info"].get("piEntryID")]
    users = [m for m in mirrored if m["info"]["role"] == "user"]
    assert [m["parts"][0]["text"].split("\n")[0] for m in users] == ["turn 1", "turn 2", "turn 3"]
    assert len([m for m in mirrored if m["info"]["role"] == "assistant"]) == 6
    assert len({m["info"]["piEntryID"] for m in mirrored}) == len(mirrored)
    assert root["compactions"], "the config file's triggerTokens was not applied"
    assert summary_in(llm.requests("main")[-1]) is not None


async def stop_shared(sock: Path) -> None:
    """Stop the daemon `connect` started on this socket, if one runs."""
    if not sock.exists():
        return
    client = await connect(f"unix:{sock}")
    try:
        await client.request("daemon/stop", {})
    finally:
        await client.close()
