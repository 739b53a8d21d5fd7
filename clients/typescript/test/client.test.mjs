// The client against the real daemon: handshake, typed requests, error replies, notifications,
// the daemon's requests to the client, the socket transports and dispose.
import assert from "node:assert/strict";
import { join } from "node:path";
import { createServer } from "node:net";
import { test } from "node:test";
import { connectSidecar, ErrorCodes, isRpcError, PROTOCOL_VERSION } from "../dist/index.js";
import { listeningDaemon, spawnDaemon, tempDir, turn } from "./helpers.mjs";

const MODEL = { providerID: "test", modelID: "small" };
const tokens = (input) => ({ input, output: 100, reasoning: 0, cache: { read: 0, write: 0 } });

test("spawnSidecar resolves initialized: requests work at once", async (t) => {
  const client = await spawnDaemon(t, { clientInfo: { name: "ts-test", version: "1" } });
  assert.equal(client.initializeResult.serverInfo.name, "compaction-sidecar");
  assert.equal(client.initializeResult.protocolVersion, PROTOCOL_VERSION);
  assert.ok(client.initializeResult.capabilities.notifications.includes("session/compacted"));

  const session = await client.request("session/create", { title: "hello" });
  assert.match(session.id, /^ses_/);
  assert.deepEqual(await client.getSession(session.id), session);
  const list = await client.listSessions();
  assert.deepEqual(list.sessions.map((s) => s.id), [session.id]);
});

test("an error reply rejects with its code and message", async (t) => {
  const client = await spawnDaemon(t);
  await assert.rejects(client.getSession("ses_missing"), (err) => {
    assert.ok(isRpcError(err, ErrorCodes.UNKNOWN_SESSION));
    assert.match(err.message, /ses_missing/);
    return true;
  });
  await assert.rejects(
    client.request("message/update", { message: { role: "robot", sessionID: "x" } }),
    (err) => isRpcError(err, ErrorCodes.INVALID_PARAMS) && /\$\.message\.role/.test(err.message),
  );
  // The connection survives bad input.
  assert.equal((await client.createSession()).title, "");
});

test("writes notify the client and messages read back in order", async (t) => {
  const client = await spawnDaemon(t);
  const { id: sessionID } = await client.createSession();
  const updated = [];
  client.onNotification("part/updated", (p) => updated.push(p.part.type));
  const user = await client.updateMessage({ role: "user", sessionID });
  const part = await client.updatePart({ type: "text", sessionID, messageID: user.id, text: "hi" });
  assert.match(part.id, /^prt_/);
  const page = await client.messages(sessionID);
  assert.deepEqual(page.messages.map((m) => m.info.id), [user.id]);
  assert.equal(page.messages[0].parts[0].text, "hi");
  assert.deepEqual(updated, ["text"]);
  await client.removePart(sessionID, user.id, part.id);
  const removed = client.waitFor("message/removed", (e) => e.messageID === user.id);
  await client.removeMessage(sessionID, user.id).then(() => removed);
});

test("searchHistory finds a stored part and expandHistory reads it back in pages", async (t) => {
  const client = await spawnDaemon(t);
  const { id: sessionID } = await client.createSession();
  const user = await client.updateMessage({ role: "user", sessionID });
  const text = "ModuleNotFoundError raised in src/pkg/mod.py by test_parse_header";
  const part = await client.updatePart({ type: "text", sessionID, messageID: user.id, text });
  // The message is the session's open turn (nothing answered it yet), which a search leaves
  // out unless asked to include it.
  assert.deepEqual((await client.searchHistory(sessionID, "src/pkg/mod.py")).hits, []);
  const { hits } = await client.searchHistory(sessionID, "src/pkg/mod.py", {
    limit: 5,
    includeRecall: true,
  });
  assert.deepEqual(hits.map((h) => [h.messageID, h.partID, h.role, h.tool]), [
    [user.id, part.id, "user", null],
  ]);
  const page = await client.expandHistory(sessionID, user.id, { partID: part.id, maxChars: 20 });
  assert.equal(page.content, text.slice(0, 20));
  assert.equal(page.total, text.length);
  assert.equal(page.nextOffset, 20);
  assert.deepEqual((await client.searchHistory("*", "nothing_like_this")).hits, []);
});

test("onRequest answers compaction/compacting and summarizer/complete", async (t) => {
  const client = await spawnDaemon(t, {
    capabilities: { compactingHook: true, summarizer: true },
    initializationOptions: { summarizer: { provider: "client" } },
  });
  const hooks = [];
  client.onRequest("compaction/compacting", (params) => {
    hooks.push(params);
    return { context: ["Team rule: keep the public API stable"] };
  });
  const prompts = [];
  client.onRequest("summarizer/complete", (params) => {
    prompts.push(params);
    return { text: "## Goal\nSummary written by the TypeScript client." };
  });
  const { id: sessionID } = await client.createSession();
  await turn(client, sessionID, MODEL, "Rename the module", tokens(1000));
  const result = await client.compact(sessionID);
  assert.equal(result.status, "continue");
  assert.deepEqual(hooks, [{ sessionID }]);
  assert.equal(prompts.length, 1);
  assert.ok(JSON.stringify(prompts[0].messages).includes("keep the public API stable"));
  const page = await client.messages(sessionID);
  const summary = page.messages.find((m) => m.info.id === result.summaryMessageID);
  // The client's text, then the daemon's artifact ledger.
  const text = summary.parts.find((p) => p.type === "text").text;
  assert.ok(text.startsWith("## Goal\nSummary written by the TypeScript client.\n"));
});

test("$/progress reaches onNotification", async (t) => {
  const client = await spawnDaemon(t);
  const { id: sessionID } = await client.createSession();
  await turn(client, sessionID, MODEL, "Write the parser", tokens(1000));
  const kinds = [];
  client.onNotification("$/progress", (p) => {
    if (p.token === "tok-1") kinds.push(p.value.kind);
  });
  await client.compact(sessionID, { workDoneToken: "tok-1" });
  assert.equal(kinds[0], "begin");
  assert.equal(kinds.at(-1), "end");
});

test("connectSidecar joins a daemon on a unix socket; two clients see each other's writes", async (t) => {
  const dir = await tempDir(t);
  const socket = join(dir, "daemon.sock");
  await listeningDaemon(t, dir, `unix:${socket}`);
  const a = await connectSidecar({ socket });
  t.after(() => a.dispose());
  const b = await connectSidecar({ socket });
  t.after(() => b.dispose());
  const session = await a.createSession({ title: "shared" });
  await b.subscribe(session.id);
  const seen = b.waitFor("message/updated", (e) => e.message.sessionID === session.id);
  const msg = await a.updateMessage({ role: "user", sessionID: session.id });
  assert.equal((await seen).message.id, msg.id);
});

test("a request written as the daemon closes the socket rejects; nothing goes unhandled", async (t) => {
  // vscode-jsonrpc rethrows a failed write inside its own promise executor: unless the client
  // keeps that failure from reaching it, the user's process gets an unhandledRejection.
  const unhandled = [];
  const onUnhandled = (reason) => unhandled.push(reason);
  process.on("unhandledRejection", onUnhandled);
  t.after(() => process.off("unhandledRejection", onUnhandled));
  const dir = await tempDir(t);
  const socket = join(dir, "daemon.sock");
  const daemon = await listeningDaemon(t, dir, `unix:${socket}`);
  const client = await connectSidecar({ socket });
  t.after(() => client.dispose());
  // A round trip first: the daemon has then read all the client sent (the `initialized`
  // notification included). Killed with bytes unread, its socket is reset, not ended: no
  // "end" event, and the write this test is about never happens.
  await client.listSessions();
  // The daemon's end of the socket has arrived, the socket is not yet closed: a write now fails.
  const attempt = new Promise((resolve) =>
    client.link.socket.once("end", () => resolve(client.createSession().then(() => null, (e) => e))),
  );
  daemon.kill("SIGKILL");
  const err = await attempt;
  assert.ok(err instanceof Error, "the request rejects");
  assert.match(err.message, /unix:.*daemon\.sock/);
  await client.dispose();
  await new Promise((resolve) => setTimeout(resolve, 0)); // a rejection is reported after the turn it happened in
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(unhandled.map(String), []);
});

test("connectSidecar joins a daemon on loopback TCP", async (t) => {
  const dir = await tempDir(t);
  const port = await new Promise((resolve) => {
    const srv = createServer().listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
  const authToken = "tcp-test-token-0123456789";
  await listeningDaemon(t, dir, `tcp://127.0.0.1:${port}`, { COMPACTION_SIDECAR_TOKEN: authToken });
  await assert.rejects(
    connectSidecar({ host: "127.0.0.1", port, authToken: "wrong" }),
    (err) => isRpcError(err, ErrorCodes.UNAUTHORIZED),
  );
  const client = await connectSidecar({ host: "127.0.0.1", port, authToken });
  t.after(() => client.dispose());
  assert.equal(client.initializeResult.serverInfo.name, "compaction-sidecar");
  assert.equal((await client.createSession({ title: "tcp" })).title, "tcp");
});

test("dispose shuts the spawned daemon down cleanly", async (t) => {
  const client = await spawnDaemon(t);
  await client.createSession();
  await client.dispose();
  assert.equal(client.process.exitCode, 0);
  await client.onClosed;
  await client.dispose(); // idempotent
});

test("several handlers of one notification all run, and each can be disposed", async (t) => {
  const client = await spawnDaemon(t);
  const a = [];
  const b = [];
  const subA = client.onNotification("message/updated", (e) => a.push(e.message.id));
  client.onNotification("message/updated", (e) => b.push(e.message.id));
  const { id: sessionID } = await client.createSession();
  const first = client.waitFor("message/updated");
  const m1 = await client.updateMessage({ role: "user", sessionID });
  await first;
  subA.dispose();
  const second = client.waitFor("message/updated");
  const m2 = await client.updateMessage({ role: "user", sessionID });
  await second;
  assert.deepEqual(a, [m1.id]);
  assert.deepEqual(b, [m1.id, m2.id]);
});
