// End to end: a turn that overflows a small model window is compacted automatically, the
// client hears `session/compacted`, and the context reads back in all three formats.
import assert from "node:assert/strict";
import { test } from "node:test";
import { spawnDaemon, turn } from "./helpers.mjs";

const MODEL = { providerID: "test", modelID: "tiny" };
// usable input = context - output = 7000 tokens
const MODELS = { "test/tiny": { context: 8000, output: 1000 } };
const tokens = (input) => ({ input, output: 200, reasoning: 0, cache: { read: 0, write: 0 } });

test("an overflowing turn is compacted and the context reads in parts, openai and anthropic", async (t) => {
  const client = await spawnDaemon(t, { initializationOptions: { models: MODELS } });
  const { id: sessionID } = await client.createSession({ title: "e2e" });

  await turn(client, sessionID, MODEL, "Refactor src/app.py into modules", tokens(3000));
  const statuses = [];
  client.onNotification("session/status", (s) => statuses.push(s.status));
  const compacted = client.waitFor("session/compacted", (e) => e.sessionID === sessionID);
  const last = await turn(client, sessionID, MODEL, "Now add tests for it", tokens(9000));

  const event = await compacted;
  assert.equal(event.auto, true);
  await client.idle(sessionID);
  assert.deepEqual(statuses.slice(-2), ["compacting", "idle"]);
  assert.equal((await client.overflow(sessionID)).overflow, false);

  const parts = await client.context(sessionID, "parts");
  assert.equal(parts.format, "parts");
  const [marker, summary] = parts.messages;
  assert.equal(marker.info.role, "user");
  assert.ok(marker.parts.some((p) => p.type === "compaction" && p.auto === true));
  assert.equal(summary.info.role, "assistant");
  assert.equal(summary.info.summary, true);
  assert.equal(summary.info.id, event.messageID);
  assert.ok(parts.messages.every((m) => m.info.id !== last.id), "the compacted turn is gone");

  const openai = await client.context(sessionID, "openai");
  assert.deepEqual(openai.messages[0], { role: "user", content: "What did we do so far?" });
  assert.equal(openai.messages[1].role, "assistant");
  assert.match(openai.messages[1].content, /src\/app\.py/);
  assert.deepEqual(openai.messages.at(-1), { role: "user", content: "Continue if you have next steps" });

  const anthropic = await client.context(sessionID, "anthropic");
  assert.equal(anthropic.format, "anthropic");
  assert.equal(anthropic.messages[0].role, "user");
  assert.equal(anthropic.messages[0].content[0].text, "What did we do so far?");
  assert.equal(anthropic.messages[1].role, "assistant");
  assert.equal(anthropic.messages.length, openai.messages.length);
  assert.ok(anthropic.estimatedTokens < 7000);
  assert.equal(anthropic.overheadSource, "none");

  // The frontend's own overhead (system prompt, tools), counted by `fit` and echoed.
  const given = await client.context(sessionID, "openai", { overheadTokens: 1234 });
  assert.equal(given.overheadTokens, 1234);
  assert.equal(given.overheadSource, "given");
});

test("breakdown splits the window context serves, and the compaction's pair is the window's", async (t) => {
  const client = await spawnDaemon(t, { initializationOptions: { models: MODELS } });
  const { id: sessionID } = await client.createSession({ title: "breakdown" });
  await turn(client, sessionID, MODEL, "Refactor src/app.py into modules", tokens(3000));
  await client.idle(sessionID);
  const ctx = await client.context(sessionID, "parts");
  const b = await client.breakdown(sessionID, { overheadTokens: 500 });
  const sum = b.categories.reduce((n, c) => n + c.tokens, 0);
  assert.equal(sum, ctx.estimatedTokens + 500);
  assert.equal(b.totalTokens, sum);
  assert.equal(b.overheadSource, "given");
  assert.equal(b.usableInput, 7000);
  assert.equal(b.free, 7000 - sum);
  assert.ok(b.largest.length > 0 && b.largest[0].tokens >= b.largest.at(-1).tokens);

  const compacted = client.waitFor("session/compacted", (e) => e.sessionID === sessionID);
  await turn(client, sessionID, MODEL, "Now add tests for it", tokens(9000));
  const event = await compacted;
  await client.idle(sessionID);
  const [record] = await client.compactions(sessionID);
  assert.equal(record.tokensBefore, event.tokensBefore);
  assert.equal(record.tokensAfter, (await client.context(sessionID, "parts")).estimatedTokens);
  assert.equal(record.reportedTokens, 9200);
});
