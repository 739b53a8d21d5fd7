// Starting, losing and regaining a daemon: spawn and connect settle on an early exit (with the
// exit status and the daemon's last stderr lines) or after `startTimeout`; requests pending when
// the daemon dies reject; a protocol-version mismatch is a clear error; `connectSidecar` with
// `reconnect` re-initializes and re-subscribes after the shared daemon restarts.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { test } from "node:test";
import {
  connectSidecar,
  PROTOCOL_VERSION,
  ProtocolVersionError,
  SidecarExitedError,
  SidecarTimeoutError,
  spawnSidecar,
} from "../dist/index.js";
import {
  daemonEnv,
  listeningDaemon,
  PYTHON,
  REPO,
  spawnDaemon,
  tempDir,
  turn,
} from "./helpers.mjs";

const MODEL = { providerID: "test", modelID: "small" };
const tokens = (input) => ({ input, output: 100, reasoning: 0, cache: { read: 0, write: 0 } });

/** Resolves with the client's next event of `kind` ("disconnect" or "reconnect"). */
function next(client, kind) {
  return new Promise((resolve) => {
    const sub = (kind === "disconnect" ? client.onDidDisconnect : client.onDidReconnect).call(
      client,
      (e) => {
        sub.dispose();
        resolve(e);
      },
    );
  });
}

function exited(proc) {
  return proc.exitCode !== null || proc.signalCode !== null
    ? Promise.resolve()
    : new Promise((done) => proc.once("exit", done));
}

test("spawnSidecar rejects when the daemon exits on bad arguments, with its status and stderr", async (t) => {
  const dir = await tempDir(t);
  await assert.rejects(
    spawnSidecar({
      command: PYTHON,
      args: ["-m", "sidecar", "serve", "--no-such-flag"],
      env: daemonEnv(dir),
      cwd: REPO,
      stderr: "ignore",
    }),
    (err) => {
      assert.ok(err instanceof SidecarExitedError, String(err));
      assert.equal(err.exitCode, 2);
      assert.ok(
        err.stderr.some((line) => line.includes("--no-such-flag")),
        err.stderr.join("\n"),
      );
      assert.match(err.message, /exited with status 2 before answering initialize/);
      assert.match(err.message, /--no-such-flag/);
      return true;
    },
  );
});

test("spawnSidecar rejects when the daemon's config file is broken", async (t) => {
  const dir = await tempDir(t);
  const config = join(dir, "broken.json");
  await writeFile(config, "{ not json");
  await assert.rejects(
    spawnSidecar({
      command: PYTHON,
      args: ["-m", "sidecar", "serve", "--config", config, "--db", join(dir, "s.db")],
      env: daemonEnv(dir),
      cwd: REPO,
      stderr: "ignore",
    }),
    (err) => {
      assert.ok(err instanceof SidecarExitedError, String(err));
      assert.notEqual(err.exitCode, 0);
      assert.ok(err.stderr.length > 0);
      assert.ok(err.message.includes(err.stderr.at(-1)), err.message);
      return true;
    },
  );
});

test("spawnSidecar rejects with a clear error for a wrong interpreter", async (t) => {
  const dir = await tempDir(t);
  await assert.rejects(
    spawnSidecar({ command: join(dir, "no-python"), args: ["-m", "sidecar", "serve"] }),
    (err) => {
      assert.match(err.message, /cannot start .*no-python.*ENOENT/);
      return true;
    },
  );
  // An interpreter without the package (-S: no site-packages, and not run from the repo).
  await assert.rejects(
    spawnSidecar({
      command: PYTHON,
      args: ["-S", "-m", "sidecar", "serve"],
      cwd: dir,
      env: daemonEnv(dir),
      stderr: "ignore",
    }),
    (err) => {
      assert.ok(err instanceof SidecarExitedError, String(err));
      assert.equal(err.exitCode, 1);
      assert.match(err.message, /No module named sidecar/);
      return true;
    },
  );
});

test("spawnSidecar rejects after startTimeout when the program never answers, and ends it", async (t) => {
  let proc;
  await assert.rejects(
    spawnSidecar({
      command: PYTHON,
      args: ["-c", "import sys; print('starting', file=sys.stderr, flush=True); sys.stdin.read()"],
      startTimeout: 300,
      stderr: "ignore",
      onStderr: () => {},
      onSpawn: (child) => {
        proc = child;
      },
    }),
    (err) => {
      assert.ok(err instanceof SidecarTimeoutError, String(err));
      assert.match(err.message, /did not answer initialize within 0\.3 s/);
      return true;
    },
  );
  await exited(proc);
  assert.ok(proc.exitCode !== null || proc.signalCode !== null);
});

test("connectSidecar rejects when `connect` exits early, with its status and stderr", async (t) => {
  const dir = await tempDir(t);
  await assert.rejects(
    connectSidecar({
      command: PYTHON,
      args: [
        "-m",
        "sidecar",
        "connect",
        "--socket",
        join(dir, "d.sock"),
        "--config",
        join(dir, "missing.json"),
      ],
      env: daemonEnv(dir),
      cwd: REPO,
      stderr: "ignore",
    }),
    (err) => {
      assert.ok(err instanceof SidecarExitedError, String(err));
      assert.equal(err.exitCode, 2);
      assert.match(err.message, /missing\.json/);
      return true;
    },
  );
});

test("connectSidecar rejects when no daemon listens on the socket", async (t) => {
  const dir = await tempDir(t);
  await assert.rejects(connectSidecar({ socket: join(dir, "none.sock") }), (err) => {
    assert.match(err.message, /none\.sock/);
    return true;
  });
});

test("every pending request rejects when the daemon dies", async (t) => {
  const client = await spawnDaemon(t, {
    capabilities: { summarizer: true },
    initializationOptions: { summarizer: { provider: "client" } },
  });
  const { id: sessionID } = await client.createSession();
  await turn(client, sessionID, MODEL, "Rename the module", tokens(1000));
  // The daemon waits for this summary while `session/compact` is pending: kill it then.
  client.onRequest("summarizer/complete", () => {
    client.process.kill("SIGKILL");
    return new Promise(() => {});
  });
  const compacting = client.compact(sessionID);
  const idle = client.idle(sessionID);
  for (const pending of [compacting, idle]) {
    await assert.rejects(pending, (err) => {
      assert.ok(err instanceof SidecarExitedError, String(err));
      assert.equal(err.signal, "SIGKILL");
      assert.match(err.message, /before replying/);
      return true;
    });
  }
  await client.onClosed;
  await assert.rejects(client.getSession(sessionID), SidecarExitedError);
});

test("a daemon of another protocol version is refused with a clear error", async (t) => {
  const dir = await tempDir(t);
  // The real daemon, answering initialize with protocolVersion 2.0.
  const script = [
    "import sys, sidecar.server.handlers.lifecycle as l",
    "R = l.InitializeResult",
    "l.InitializeResult = lambda **kw: R(protocol_version='2.0', **kw)",
    "from sidecar.cli import main",
    "sys.exit(main(sys.argv[1:]))",
  ].join("\n");
  let proc;
  await assert.rejects(
    spawnSidecar({
      command: PYTHON,
      args: ["-c", script, "serve", "--db", join(dir, "s.db")],
      env: daemonEnv(dir),
      cwd: REPO,
      stderr: "ignore",
      onSpawn: (child) => {
        proc = child;
      },
    }),
    (err) => {
      assert.ok(err instanceof ProtocolVersionError, String(err));
      assert.equal(err.daemonVersion, "2.0");
      assert.equal(err.clientVersion, PROTOCOL_VERSION);
      assert.match(err.message, /protocol 2\.0.*this client speaks 1\.0/);
      return true;
    },
  );
  await exited(proc);
});

test("connectSidecar without reconnect closes for good when the daemon goes", async (t) => {
  const dir = await tempDir(t);
  const socket = join(dir, "daemon.sock");
  const daemon = await listeningDaemon(t, dir, `unix:${socket}`);
  const client = await connectSidecar({ socket });
  t.after(() => client.dispose());
  const { id: sessionID } = await client.createSession();
  daemon.kill("SIGKILL");
  await client.onClosed;
  await assert.rejects(client.getSession(sessionID), SidecarExitedError);
  await assert.rejects(client.waitFor("message/updated"), SidecarExitedError);
  client.onNotification("session/status", () => {}).dispose(); // no throw on a closed client
});

test("connectSidecar with reconnect re-initializes and re-subscribes after the daemon restarts", async (t) => {
  const dir = await tempDir(t);
  const socket = join(dir, "daemon.sock");
  const first = await listeningDaemon(t, dir, `unix:${socket}`);
  const client = await connectSidecar({ socket, reconnect: { delay: 50 } });
  t.after(() => client.dispose());
  const session = await client.createSession({ title: "kept" });
  const seen = [];
  client.onNotification("message/updated", (e) => seen.push(e.message.id));

  const lost = next(client, "disconnect");
  first.kill("SIGKILL");
  const err = await lost;
  assert.ok(err instanceof SidecarExitedError);
  // A handler added while the daemon is away is taken on by the next connection.
  const partTypes = [];
  client.onNotification("part/updated", (e) => partTypes.push(e.part.type));
  // A request made while the daemon is away waits for the reconnection.
  const regained = next(client, "reconnect");
  const got = client.getSession(session.id);
  await listeningDaemon(t, dir, `unix:${socket}`);
  await regained;
  assert.equal((await got).title, "kept");
  assert.equal(client.initializeResult.protocolVersion, PROTOCOL_VERSION);

  // Re-subscribed: another client's write to the session reaches this one.
  const other = await connectSidecar({ socket });
  t.after(() => other.dispose());
  const heard = client.waitFor("message/updated", (e) => e.message.sessionID === session.id);
  const msg = await other.updateMessage({ role: "user", sessionID: session.id });
  assert.equal((await heard).message.id, msg.id);
  assert.deepEqual(seen, [msg.id]);
  const part = client.waitFor("part/updated");
  await other.updatePart({ type: "text", sessionID: session.id, messageID: msg.id, text: "hi" });
  await part;
  assert.deepEqual(partTypes, ["text"]);
});

test("connectSidecar through `compaction-sidecar connect` reconnects after the shared daemon restarts", async (t) => {
  const dir = await tempDir(t);
  const socket = join(dir, "shared.sock");
  const args = ["-m", "sidecar", "connect", "--socket", socket, "--db", join(dir, "shared.db")];
  // A daemon left behind by a failed run exits by itself.
  args.push("--log-file", join(dir, "daemon.log"), "--idle-exit", "30");
  const env = daemonEnv(dir);
  const ctl = (cmd) =>
    new Promise((done) => {
      const p = spawn(PYTHON, ["-m", "sidecar", cmd, "--socket", socket], {
        cwd: REPO,
        env,
        stdio: "ignore",
      });
      p.once("exit", done);
    });
  const client = await connectSidecar({
    command: PYTHON,
    args,
    env,
    cwd: REPO,
    stderr: "ignore",
    reconnect: { delay: 50 },
  });
  t.after(() => client.dispose());
  const session = await client.createSession({ title: "shared" });

  const lost = next(client, "disconnect");
  const regained = next(client, "reconnect");
  assert.equal(await ctl("stop"), 0);
  await lost;
  await regained; // the respawned `connect` started a new daemon
  const other = await connectSidecar({ socket });
  t.after(() => other.dispose());
  const heard = client.waitFor("message/updated", (e) => e.message.sessionID === session.id);
  const msg = await other.updateMessage({ role: "user", sessionID: session.id });
  assert.equal((await heard).message.id, msg.id);
  await other.dispose();
  await client.dispose();
  assert.equal(await ctl("stop"), 0); // (t.after would run after the temp dir is gone)
});

test("a reconnecting client gives up after reconnect.timeout: waiting requests reject, it closes", async (t) => {
  const dir = await tempDir(t);
  const socket = join(dir, "daemon.sock");
  const daemon = await listeningDaemon(t, dir, `unix:${socket}`);
  const client = await connectSidecar({ socket, reconnect: { delay: 20, timeout: 300 } });
  t.after(() => client.dispose());
  const lost = next(client, "disconnect");
  daemon.kill("SIGKILL");
  await lost;
  await assert.rejects(client.createSession(), (err) => {
    assert.ok(err instanceof SidecarExitedError, String(err));
    assert.match(err.message, /did not come back within 0\.3 s: no daemon answers/);
    return true;
  });
  await client.onClosed;
});
