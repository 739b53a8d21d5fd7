// The sample extension's logic (src/logic.ts, no `vscode` import) against a real shared daemon
// that it starts through `compaction-sidecar connect`, with an agent writing turns beside it.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { connectSidecar } from "compaction-sidecar-client";
import logic from "../dist/logic.js";
import { turn } from "../../typescript/test/turn.mjs";
import { PYTHON, REPO, setup } from "./daemon.mjs";

const { SidecarController, formatStatus, formatEntry, commandCandidates } = logic;
const MODEL = { providerID: "test", modelID: "tiny" };
const tokens = (input) => ({ input, output: 200, reasoning: 0, cache: { read: 0, write: 0 } });

/** A sink that records, and resolves `next(predicate)` on the first status that satisfies it. */
function recorder() {
  const lines = [];
  const waiters = [];
  const sink = {
    log: (line) => lines.push(line),
    status: (use) => {
      for (const w of [...waiters]) {
        if (w.predicate(use)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(use);
        }
      }
    },
  };
  const next = (predicate) => new Promise((resolve) => waiters.push({ predicate, resolve }));
  return { sink, lines, next };
}

async function start(t, env, settings) {
  const rec = recorder();
  const controller = await SidecarController.start(settings, rec.sink, { env, cwd: REPO });
  t.after(() => controller.dispose());
  return { controller, ...rec };
}

test("the client bundled is the one in ../typescript, installed from its packed tarball", async () => {
  // package-lock.json carries no integrity for the tarball: with one, npm ci may install a
  // stale copy from its cache instead of the tarball just packed.
  const lock = JSON.parse(
    await readFile(join(REPO, "clients", "vscode", "package-lock.json"), "utf8"),
  );
  const entry = lock.packages["node_modules/compaction-sidecar-client"];
  assert.equal(entry.resolved, "file:../typescript/compaction-sidecar-client-0.1.0.tgz");
  assert.equal(entry.integrity, undefined);
  const installed = join(
    REPO,
    "clients",
    "vscode",
    "node_modules",
    "compaction-sidecar-client",
    "dist",
    "index.js",
  );
  const built = join(REPO, "clients", "typescript", "dist", "index.js");
  assert.equal(
    await readFile(installed, "utf8"),
    await readFile(built, "utf8"),
    "repack: (cd ../typescript && npm pack) && npm ci",
  );
});

test("the path setting runs `connect`; a program that cannot run falls back to `python -m sidecar`", async (t) => {
  const { env, connectArgs, dir } = await setup(t);
  const missing = join(dir, "no-such-compaction-sidecar");
  assert.deepEqual(commandCandidates({ path: missing, python: PYTHON, connectArgs: [] }), [
    { command: missing, args: ["connect"] },
    { command: PYTHON, args: ["-m", "sidecar", "connect"] },
  ]);
  const viaFallback = await start(t, env, { path: missing, python: PYTHON, connectArgs });
  assert.ok(
    viaFallback.lines.some((l) => l.startsWith(`cannot start "${missing}"`)),
    viaFallback.lines.join("\n"),
  );
  assert.ok(
    viaFallback.lines.includes(
      `connected through: ${PYTHON} -m sidecar connect ${connectArgs.join(" ")}`,
    ),
  );
  const binary = join(dirname(PYTHON), "compaction-sidecar");
  const viaPath = await start(t, env, {
    path: binary,
    python: join(dir, "no-python"),
    connectArgs,
  });
  assert.ok(
    viaPath.lines.includes(`connected through: ${binary} connect ${connectArgs.join(" ")}`),
  );
});

test("a broken setup rejects with the status and reaches the log through the daemon's stderr", async (t) => {
  const { env, dir, socket } = await setup(t);
  const { sink, lines } = recorder();
  const connectArgs = ["--socket", socket, "--config", join(dir, "missing.json")];
  const settings = { path: join(dir, "none"), python: PYTHON, connectArgs };
  await assert.rejects(SidecarController.start(settings, sink, { env, cwd: REPO }), (err) => {
    assert.match(err.message, /exited with status 2 before answering initialize/);
    assert.match(err.message, /missing\.json/);
    return true;
  });
  assert.ok(
    lines.some((l) => l.startsWith("[daemon] ") && l.includes("missing.json")),
    lines.join("\n"),
  );
});

test("the status bar follows the active session's window from notifications; Compact now; history", async (t) => {
  const { env, connectArgs, socket } = await setup(t);
  const { controller, next, lines } = await start(t, env, {
    path: "compaction-sidecar-not-here",
    python: PYTHON,
    connectArgs,
  });
  assert.deepEqual(formatStatus(undefined).text, "$(archive) sidecar");
  const agent = await connectSidecar({ socket });
  t.after(() => agent.dispose());
  const { id: sessionID } = await agent.createSession({ title: "agent" });

  const measured = next((u) => u.sessionID === sessionID && u.used > 0);
  await turn(agent, sessionID, MODEL, "Refactor src/app.py", tokens(3000));
  const use = await measured;
  const { breakdown, ...figures } = use;
  assert.deepEqual(figures, { sessionID, used: 3200, usable: 7000, status: "idle", estimated: false });
  assert.equal(breakdown.sessionID, sessionID);
  assert.equal(breakdown.usableInput, 7000);
  assert.equal(controller.active, sessionID);
  assert.equal(formatStatus(use).text, "$(dashboard) 3.2k / 7.0k (46%)");
  const tooltip = formatStatus(use).tooltip;
  assert.match(tooltip, /3200 tokens on the model's last call, of 7000 usable/);
  // What fills the window, from session/breakdown: its categories and the room left.
  assert.match(tooltip, new RegExp(`What fills the window \\(${breakdown.totalTokens} tokens\\)`));
  assert.match(tooltip, /\nuser messages: \d+ \(\d+%\)/);
  assert.match(tooltip, new RegExp(`\\nfree: ${breakdown.free}`));

  const compacted = next((u) => u.sessionID === sessionID && u.estimated);
  const result = await controller.compactNow();
  assert.equal(result.status, "continue");
  const after = await compacted;
  assert.ok(after.used > 0 && after.used < 3200, JSON.stringify(after));
  assert.equal(after.used, after.breakdown.totalTokens);
  assert.ok(
    lines.some((l) => l.startsWith(`session ${sessionID} compacted (manual)`)),
    lines.join("\n"),
  );

  const [entry, ...rest] = await controller.history();
  assert.deepEqual(rest, []);
  assert.equal(entry.auto, false);
  assert.equal(entry.summaryID, result.summaryMessageID);
  // The pair session/compactions recorded: the window before and right after.
  const [record] = await agent.compactions(sessionID);
  assert.equal(entry.before, record.tokensBefore);
  assert.equal(entry.after, record.tokensAfter);
  assert.equal(entry.after, (await agent.context(sessionID, "parts")).estimatedTokens);
  assert.ok(entry.after > 0 && entry.after < entry.before);
  assert.equal(entry.reported, null);
  assert.match(entry.summary, /src\/app\.py/);
  const shown = formatEntry(entry);
  assert.equal(shown.description, `before ${entry.before} → after ${entry.after} tokens`);
  assert.match(shown.label, /^manual compaction \d{4}-/);
  assert.ok(shown.tooltip.endsWith(entry.summary));
});

test("window/logMessage reaches the log, and dispose shuts down cleanly", async (t) => {
  const { env, connectArgs, socket } = await setup(t);
  const { controller, lines } = await start(t, env, {
    path: join(REPO, "missing"),
    python: PYTHON,
    connectArgs,
  });
  const agent = await connectSidecar({ socket });
  t.after(() => agent.dispose());
  const { id: sessionID } = await agent.createSession();
  const logged = controller.client.waitFor("window/logMessage", (p) =>
    p.message.includes("test/unknown-model"),
  );
  await turn(
    agent,
    sessionID,
    { providerID: "test", modelID: "unknown-model" },
    "Hello",
    tokens(10),
  );
  await logged;
  assert.ok(
    lines.some((l) => l.includes("no context limits known for model 'test/unknown-model'")),
    lines.join("\n"),
  );

  const bridge = controller.client.process;
  await controller.dispose();
  assert.equal(bridge.exitCode, 0);
  // The shared daemon keeps serving the other clients.
  assert.equal((await agent.getSession(sessionID)).id, sessionID);
});
