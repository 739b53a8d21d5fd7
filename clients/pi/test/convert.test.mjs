// The pure mapping between pi's session entries and the daemon's messages (src/convert.ts).
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { test } from "node:test";

const require = createRequire(import.meta.url);
const { toDaemon, toPi, toolResults, messageId, ENTRY_FIELD } = require("../dist/convert.js");

const usage = { input: 10, output: 2, cacheRead: 3, cacheWrite: 0, totalTokens: 15, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } };
const user = { type: "message", id: "aaaa0001", parentId: null, timestamp: "2026-01-01T00:00:00.000Z", message: { role: "user", content: [{ type: "text", text: "read it" }], timestamp: 1 } };
const step = {
  type: "message", id: "aaaa0002", parentId: "aaaa0001", timestamp: "2026-01-01T00:00:01.000Z",
  message: { role: "assistant", content: [{ type: "toolCall", id: "call_1", name: "read", arguments: { path: "/x" } }], api: "openai-completions", provider: "fake", model: "m", usage, stopReason: "toolUse", timestamp: 2 },
};
const result = { type: "message", id: "aaaa0003", parentId: "aaaa0002", timestamp: "2026-01-01T00:00:02.000Z", message: { role: "toolResult", toolCallId: "call_1", toolName: "read", content: [{ type: "text", text: "BIG OUTPUT" }], isError: false, timestamp: 3 } };
const path = [user, step, result];

test("ids come from the entries, and a tool result completes the assistant's tool part", () => {
  const w = toDaemon(step, { sessionID: "ses_x", piSession: "0a-bc", parentID: "msg_u", cwd: "/p", results: toolResults(path) });
  assert.equal(w.message.id, messageId("0a-bc", "aaaa0002"));
  assert.equal(w.message.id, "msg_pi_0abc_aaaa0002");
  assert.equal(w.message[ENTRY_FIELD], "aaaa0002");
  assert.equal(w.message.finish, "tool-calls");
  assert.deepEqual(w.message.tokens, { input: 10, output: 2, reasoning: 0, cache: { read: 3, write: 0 } });
  assert.equal(w.parts[0].state.status, "completed");
  assert.equal(w.parts[0].state.output, "BIG OUTPUT");
  assert.equal(w.parts[0].callID, "call_1");
});

test("the window: the summary as pi's compaction summary, the marker dropped, a pruned output as the daemon's stub", () => {
  const win = [
    { info: { id: "m1", role: "user", time: { created: 5 } }, parts: [{ id: "p1", type: "compaction", auto: true }] },
    { info: { id: "m2", role: "assistant", summary: true, time: { created: 6 } }, parts: [{ id: "p2", type: "text", text: "THE SUMMARY" }] },
    { info: { id: "m3", role: "user", [ENTRY_FIELD]: "aaaa0001", time: { created: 7 } }, parts: [{ id: "p3", type: "text", text: "read it" }] },
    {
      info: { id: "m4", role: "assistant", [ENTRY_FIELD]: "aaaa0002", time: { created: 8 } },
      parts: [{ id: "p4", type: "tool", callID: "call_1", tool: "read", state: { status: "completed", input: { path: "/x" }, output: "[Old tool result content cleared]", time: { start: 1, end: 2, compacted: 9 } } }],
    },
  ];
  const byId = new Map(path.map((e) => [e.id, e]));
  const out = toPi(win, new Set(), (id) => byId.get(id), toolResults(path));
  assert.deepEqual(out.map((m) => m.role), ["compactionSummary", "user", "assistant", "toolResult"]);
  assert.equal(out[0].summary, "THE SUMMARY");
  assert.equal(out[1], user.message); // pi's own message back
  assert.equal(out[2].usage, usage);
  assert.equal(out[3].toolCallId, "call_1");
  assert.deepEqual(out[3].content, [{ type: "text", text: "[Old tool result content cleared]" }]);
});

test("an output the daemon did not change goes out as pi's own tool result", () => {
  const win = [
    { info: { id: "m4", role: "assistant", [ENTRY_FIELD]: "aaaa0002", time: { created: 8 } },
      parts: [{ id: "p4", type: "tool", callID: "call_1", tool: "read", state: { status: "completed", input: {}, output: "BIG OUTPUT", time: { start: 1, end: 2 } } }] },
  ];
  const byId = new Map(path.map((e) => [e.id, e]));
  const out = toPi(win, new Set(), (id) => byId.get(id), toolResults(path));
  assert.equal(out[1], result.message);
});

test("entries pi sends as user text: a custom message, a shell run, a branch summary", () => {
  const ctx = { sessionID: "ses_x", piSession: "p", parentID: "", cwd: "/p", results: new Map() };
  const custom = { type: "custom_message", id: "c1", parentId: null, timestamp: "2026-01-01T00:00:00.000Z", customType: "x", content: "injected", display: true };
  const bash = { type: "message", id: "b1", parentId: null, timestamp: "2026-01-01T00:00:00.000Z", message: { role: "bashExecution", command: "ls", output: "a\nb", exitCode: 2, cancelled: false, truncated: false, timestamp: 1 } };
  const branch = { type: "branch_summary", id: "s1", parentId: null, timestamp: "2026-01-01T00:00:00.000Z", fromId: "x", summary: "we tried A" };
  const texts = [custom, bash, branch].map((e) => toDaemon(e, ctx)).map((w) => [w.message.role, w.parts[0].text]);
  assert.deepEqual(texts[0], ["user", "injected"]);
  assert.equal(texts[1][0], "user");
  assert.match(texts[1][1], /^Ran `ls`\n```\na\nb\n```\n\nCommand exited with code 2$/);
  assert.match(texts[2][1], /summary of a branch[\s\S]*we tried A/);
});

test("a tool result pi does not have yet leaves the part running", () => {
  const w = toDaemon(step, { sessionID: "ses_x", piSession: "p", parentID: "u", cwd: "/p", results: new Map() });
  assert.equal(w.parts[0].state.status, "running");
  assert.deepEqual(w.parts[0].state.input, { path: "/x" });
});
