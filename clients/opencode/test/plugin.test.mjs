// The bundled plugin (dist/index.js) loaded as OpenCode loads it, its hooks called as OpenCode
// calls them, against a real daemon (`$SIDECAR_PYTHON -m sidecar serve`, default python3) on
// stdio. The real OpenCode runs it in tests/agents (pytest).
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import plugin from "../dist/index.js";

const PYTHON = process.env.SIDECAR_PYTHON ?? "python3";

function fakeInput() {
  const logs = [];
  return {
    logs,
    input: { client: { app: { log: async ({ body }) => logs.push(body) } } },
  };
}

function user(sessionID, id, text, t) {
  return {
    info: {
      id,
      sessionID,
      role: "user",
      time: { created: t },
      agent: "build",
      model: { providerID: "fake", modelID: "fake-model" },
    },
    parts: [{ id: `prt_${id}`, sessionID, messageID: id, type: "text", text }],
  };
}

function assistant(sessionID, id, parentID, text, t) {
  return {
    info: {
      id,
      sessionID,
      role: "assistant",
      parentID,
      time: { created: t, completed: t + 1 },
      modelID: "fake-model",
      providerID: "fake",
      mode: "build",
      path: { cwd: "/", root: "/" },
      cost: 0,
      tokens: { input: 10, output: 5, reasoning: 0, cache: { read: 0, write: 0 } },
      finish: "stop",
    },
    parts: [{ id: `prt_${id}`, sessionID, messageID: id, type: "text", text }],
  };
}

/** The plugin on a real daemon (`command args`, given the store's path), its config hook run. */
async function pluginOnDaemon(t, program = (db) => ({ command: PYTHON, args: ["-m", "sidecar", "serve", "--db", db] })) {
  const dir = mkdtempSync(join(tmpdir(), "sidecar-opencode-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const { input, logs } = fakeInput();
  const hooks = await plugin(input, program(join(dir, "s.db"), dir));
  t.after(() => hooks.dispose());
  await hooks.config({ provider: {} });
  return { hooks, dir, logs };
}

/** A session's first two messages and the next user prompt: what OpenCode hands the first step. */
function firstStep(sid, t0) {
  const history = [user(sid, "msg_01", "first", t0), assistant(sid, "msg_02", "msg_01", "one", t0 + 10)];
  return { history, step: [...history, user(sid, "msg_03", "second", t0 + 20)] };
}

test("the config hook turns OpenCode's compaction and prune off", async () => {
  const { input } = fakeInput();
  const hooks = await plugin(input, { command: "/nonexistent/compaction-sidecar" });
  const config = { compaction: { auto: true }, provider: {} };
  await hooks.config(config);
  assert.deepEqual(config.compaction, { auto: false, prune: false });
  await hooks.dispose();
});

test("an unreachable daemon leaves OpenCode's messages unchanged and is logged once", async () => {
  const { input, logs } = fakeInput();
  const hooks = await plugin(input, { command: "/nonexistent/compaction-sidecar" });
  const messages = [user("ses_a", "msg_1", "hello", 1_700_000_000_000)];
  const before = structuredClone(messages);
  for (let step = 0; step < 3; step++) {
    await hooks["experimental.chat.messages.transform"]({}, { messages });
    assert.deepEqual(messages, before);
  }
  assert.equal(logs.filter((l) => l.message.includes("cannot reach the daemon")).length, 1);
  await hooks.dispose();
});

test("bad options load nothing and say why", async () => {
  const { input, logs } = fakeInput();
  const hooks = await plugin(input, { args: "connect" });
  assert.deepEqual(hooks, {});
  assert.match(logs[0].message, /args must be an array of strings/);
});

test("the transform swaps in the daemon's window and leaves OpenCode's summary request alone", async (t) => {
  const { hooks } = await pluginOnDaemon(t);
  const sid = "ses_plugin_test";
  const t0 = 1_700_000_000_000;
  // The mirror lags (events are not awaited): the transform itself re-sends what is missing.
  const { history, step } = firstStep(sid, t0);
  const messages = structuredClone(step);
  await hooks["experimental.chat.messages.transform"]({}, { messages });
  assert.deepEqual(
    messages.map((m) => m.info.id),
    ["msg_01", "msg_02", "msg_03"],
  );
  assert.equal(messages[2].parts[0].text, "second");
  // The step's own (empty) assistant message, mirrored before the transform, stays out.
  await hooks.event({ event: { type: "message.updated", properties: { info: assistant(sid, "msg_04", "msg_03", "", t0 + 30).info } } });
  const again = structuredClone(step);
  await hooks["experimental.chat.messages.transform"]({}, { messages: again });
  assert.deepEqual(
    again.map((m) => m.info.id),
    ["msg_01", "msg_02", "msg_03"],
  );
  // OpenCode's own summary request: announced by experimental.session.compacting, untouched.
  await hooks["experimental.session.compacting"]({ sessionID: sid }, { context: [] });
  const head = structuredClone(history).slice(0, 1);
  await hooks["experimental.chat.messages.transform"]({}, { messages: head });
  assert.deepEqual(head, structuredClone(history).slice(0, 1));
  // The recall tools are bound to the calling session.
  const found = await hooks.tool.history_search.execute({ query: "second" }, { sessionID: sid });
  assert.match(found, /msg_03 prt_msg_03 user/);
});

test("steps after the first read only what changed (since); what OpenCode changes in its copy stays out", async (t) => {
  // The daemon between two `tee`s: what the plugin sends it and what it answers are on record.
  const { hooks, dir } = await pluginOnDaemon(t, (db, dir) => ({
    command: "sh",
    args: [
      "-c",
      'tee "$0" | "$1" -m sidecar serve --db "$2" | tee "$3"',
      join(dir, "to-daemon.log"),
      PYTHON,
      db,
      join(dir, "from-daemon.log"),
    ],
  }));
  const wire = join(dir, "to-daemon.log");
  const sid = "ses_plugin_since";
  const t0 = 1_700_000_000_000;
  const { step: step1 } = firstStep(sid, t0);
  const messages = structuredClone(step1);
  await hooks["experimental.chat.messages.transform"]({}, { messages });
  assert.deepEqual(messages.map((m) => m.info.id), ["msg_01", "msg_02", "msg_03"]);
  // OpenCode pushes a reminder into the last user message of what it was handed.
  messages[2].parts.push({ id: "prt_reminder", type: "text", text: "reminder", synthetic: true });
  messages[0].parts[0].text = "changed by OpenCode";

  const step2 = [
    ...step1,
    assistant(sid, "msg_04", "msg_03", "two", t0 + 30),
    user(sid, "msg_05", "third", t0 + 40),
  ];
  const again = structuredClone(step2);
  await hooks["experimental.chat.messages.transform"]({}, { messages: again });
  assert.deepEqual(again.map((m) => m.info.id), ["msg_01", "msg_02", "msg_03", "msg_04", "msg_05"]);
  assert.equal(again[0].parts[0].text, "first");
  assert.deepEqual(again[2].parts.map((p) => p.id), ["prt_msg_03"]);
  assert.equal(again[4].parts[0].text, "third");

  // `tee` writes a frame to the daemon before the file: once the program has ended (dispose
  // waits for it), the file holds every frame.
  await hooks.dispose();
  const frames = (file) =>
    readFileSync(file, "utf8")
      .split(/Content-Length: \d+\r\n\r\n/)
      .filter((body) => body.length)
      .map((body) => JSON.parse(body));
  const sent = frames(wire);
  const reads = sent.filter((f) => f.method === "session/context").map((f) => f.params);
  assert.equal(reads.length, 2);
  assert.equal(reads[0].since, undefined);
  assert.equal(typeof reads[1].since, "string");
  // The mirror declared `echo: false`: its writes are answered, never echoed back to it.
  const writes = sent.filter((f) => f.method === "part/update" || f.method === "message/update");
  assert.ok(writes.length >= 8, `${writes.length} writes`);
  const answered = new Set(frames(join(dir, "from-daemon.log")).map((f) => f.id));
  assert.ok(writes.every((w) => answered.has(w.id)));
  const heard = frames(join(dir, "from-daemon.log")).map((f) => f.method).filter(Boolean);
  assert.deepEqual(heard.filter((m) => m === "part/updated" || m === "message/updated"), []);
});

test("a step the old connection took unanswered (its daemon gone, unnoticed yet) goes on a new one", async (t) => {
  // tests/agents/late_exit.py keeps the program's stdio open after its daemon is killed, until
  // the plugin's next request reaches it: the race of a daemon stopped just before a step.
  const late = join(import.meta.dirname, "..", "..", "..", "tests", "agents", "late_exit.py");
  let pidfile;
  const { hooks, logs } = await pluginOnDaemon(t, (db, dir) => {
    pidfile = join(dir, "daemon.pid");
    const args = [late, `--pidfile=${pidfile}`, PYTHON, "-m", "sidecar", "serve", "--db", db];
    return { command: PYTHON, args };
  });
  const sid = "ses_plugin_stale";
  const t0 = 1_700_000_000_000;
  const { step: step1 } = firstStep(sid, t0);
  await hooks["experimental.chat.messages.transform"]({}, { messages: structuredClone(step1) });
  const first = Number(readFileSync(pidfile, "utf8"));
  process.kill(first, "SIGKILL");
  // late_exit.py reaps it: from then on the pid is gone.
  for (;;) {
    try {
      process.kill(first, 0);
    } catch {
      break;
    }
    await new Promise((r) => setTimeout(r, 5));
  }
  const step2 = [...step1, assistant(sid, "msg_04", "msg_03", "two", t0 + 30), user(sid, "msg_05", "third", t0 + 40)];
  const messages = structuredClone(step2);
  await hooks["experimental.chat.messages.transform"]({}, { messages });
  assert.deepEqual(messages.map((m) => m.info.id), ["msg_01", "msg_02", "msg_03", "msg_04", "msg_05"]);
  assert.deepEqual(logs.filter((l) => l.message.includes("unavailable")), []);
  // A new daemon (a new program) served the step, from the same store.
  assert.notEqual(Number(readFileSync(pidfile, "utf8")), first);
  // (msg_05, the open turn, is left out of recall.)
  const found = await hooks.tool.history_search.execute({ query: "two" }, { sessionID: sid });
  assert.match(found, /msg_04 prt_msg_04 assistant/);
});
