// Steering compaction (issue 24) from TypeScript: pins, compact up to a message, the recorded
// diagnostics and undo, against a real daemon over stdio.
import assert from "node:assert/strict";
import { test } from "node:test";
import { spawnDaemon, turn } from "./helpers.mjs";

const MODEL = { providerID: "anthropic", modelID: "claude-sonnet-4-5" };
const tokens = (input) => ({ input, output: 0, reasoning: 0, cache: { read: 0, write: 0 } });

test("pin, compact upTo, compactions and uncompact", async (t) => {
  const client = await spawnDaemon(t);
  const { id: sessionID } = await client.createSession({ title: "steer" });
  const first = await turn(client, sessionID, MODEL, "Plan the parser " + "w".repeat(40000), tokens(5000));
  const later = await turn(client, sessionID, MODEL, "Write it", tokens(6000));

  await client.pin(sessionID, first.id);
  const pins = await client.pins(sessionID);
  assert.ok(pins.length > 0 && pins.every((p) => p.messageID === first.id));

  const before = await client.context(sessionID, "parts");
  const result = await client.compact(sessionID, { upTo: first.id });
  assert.equal(result.status, "continue");
  const after = await client.context(sessionID, "parts");
  assert.equal(after.messages[1].info.id, result.summaryMessageID);
  assert.ok(after.messages.some((m) => m.info.id === later.id), "the later turn is kept");

  const [record] = await client.compactions(sessionID);
  assert.equal(record.messageID, result.summaryMessageID);
  assert.equal(record.writer, "extractive");
  assert.equal(record.tokensAfter, after.estimatedTokens);

  const removed = await client.uncompact(sessionID);
  assert.deepEqual(removed, [record.messageID, record.markerID]);
  const restored = await client.context(sessionID, "parts");
  assert.deepEqual(
    restored.messages.map((m) => m.info.id),
    before.messages.map((m) => m.info.id),
  );
});
