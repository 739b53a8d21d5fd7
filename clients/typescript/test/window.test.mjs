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

test("refreshes in flight together each apply their delta to the window they asked from", async () => {
  // A scripted reader: replies are released by the test, in an order of its choosing.
  const asked = [];
  const reader = {
    context: (_sid, _format, options) =>
      new Promise((resolve) => asked.push({ since: options.since, resolve })),
  };
  const reply = (messages, revision, start) => ({
    messages,
    revision,
    delta: start === undefined ? null : true,
    start: start ?? null,
  });
  const window = new ContextWindow(reader, "ses_x", "parts");
  const first = window.refresh();
  asked[0].resolve(reply(["a", "b"], "r1"));
  await first;
  // Two refreshes from r1: the first served changed "b"; the second, served later, appended "c"
  // to r1's window. Each delta is relative to r1's window, whichever reply lands last.
  const one = window.refresh();
  const two = window.refresh();
  assert.deepEqual(asked.slice(1).map((a) => a.since), ["r1", "r1"]);
  asked[1].resolve(reply(["b2"], "r2", 1));
  assert.deepEqual((await one).messages, ["a", "b2"]);
  asked[2].resolve(reply(["c"], "r3", 2));
  assert.deepEqual((await two).messages, ["a", "b", "c"]);
  assert.deepEqual(window.messages, ["a", "b", "c"]);
  assert.equal(window.revision, "r3");
});
