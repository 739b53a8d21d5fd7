// `context({since})` and the assembled window (`ContextWindow`), against a real daemon: writes
// streamed turn by turn come back as deltas, and the window assembled from them is, after each
// refresh, the window a full `context()` read serves.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ContextWindow } from "../dist/index.js";
import { spawnDaemon, turn } from "./helpers.mjs";

const MODEL = { providerID: "test", modelID: "big" };
const tokens = (input) => ({ input, output: 50, reasoning: 0, cache: { read: 0, write: 0 } });

for (const format of ["parts", "openai", "anthropic"]) {
  test(`the window assembled from context({since}) deltas equals a full read (${format})`, async (t) => {
    const client = await spawnDaemon(t);
    const { id: sessionID } = await client.createSession({ title: "deltas" });
    await turn(client, sessionID, MODEL, "step 0", tokens(100));

    const window = client.window(sessionID, format);
    assert.ok(window instanceof ContextWindow);
    const first = await window.refresh();
    assert.equal(first.delta ?? null, null, "the first read has no `since`");
    assert.deepEqual(window.messages, (await client.context(sessionID, format)).messages);

    for (let i = 1; i <= 3; i++) {
      const before = window.revision;
      assert.ok(before, "a reply names its revision");
      await turn(client, sessionID, MODEL, `step ${i}`, tokens(100 + i));
      // The raw delta: only what changed at the end of the window.
      const raw = await client.context(sessionID, format, { since: before });
      const full = await client.context(sessionID, format);
      assert.equal(raw.delta, true);
      assert.ok(raw.start > 0 && raw.messages.length < full.messages.length);

      const result = await window.refresh();
      assert.equal(result.delta, true);
      assert.deepEqual(window.messages, full.messages);
      assert.deepEqual(result.messages, full.messages);
    }

    // A part streamed into the newest message: still a delta, still the whole window.
    const last = (await client.messages(sessionID)).messages.at(-1);
    await client.updatePart({ type: "text", sessionID, messageID: last.info.id, text: "more" });
    assert.equal((await window.refresh()).delta, true);
    assert.deepEqual(window.messages, (await client.context(sessionID, format)).messages);
  });
}
