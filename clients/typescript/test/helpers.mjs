// Shared by the tests: a real daemon (`python -m sidecar serve`), each with its own temp dir.
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { spawnSidecar } from "../dist/index.js";

export { turn } from "./turn.mjs";

/** The Python that has the daemon installed (.ci/run sets it to the venv's). */
export const PYTHON = process.env.SIDECAR_PYTHON || "python3";
export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

export async function tempDir(t) {
  const dir = await mkdtemp(join(tmpdir(), "sidecar-ts-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** The daemon's environment: no user config, no env overrides of auto-compaction. */
export function daemonEnv(dir) {
  const env = { ...process.env, XDG_CONFIG_HOME: join(dir, "cfg") };
  delete env.OPENCODE_DISABLE_AUTOCOMPACT;
  delete env.OPENCODE_DISABLE_PRUNE;
  return env;
}

/** A private daemon on stdio, disposed when the test ends. */
export async function spawnDaemon(t, options = {}) {
  const dir = await tempDir(t);
  const client = await spawnSidecar({
    command: PYTHON,
    args: ["-m", "sidecar", "serve"],
    db: join(dir, "sessions.db"),
    env: daemonEnv(dir),
    cwd: REPO,
    stderr: "ignore",
    ...options,
  });
  t.after(() => client.dispose());
  return client;
}

/** `serve --listen ADDRESS` as a process; resolves once it has logged that it listens. */
export async function listeningDaemon(t, dir, address, env = {}) {
  const proc = spawn(
    PYTHON,
    ["-m", "sidecar", "serve", "--db", join(dir, "shared.db"), "--listen", address],
    { cwd: REPO, env: { ...daemonEnv(dir), ...env }, stdio: ["ignore", "ignore", "pipe"] },
  );
  const exited = new Promise((done) => proc.once("exit", done));
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGTERM");
    await exited;
  });
  let log = "";
  await new Promise((ready, fail) => {
    proc.stderr.setEncoding("utf8");
    proc.stderr.on("data", (chunk) => {
      log += chunk;
      if (log.includes("listening on")) ready();
    });
    proc.once("exit", (code) => fail(new Error(`daemon exited (${code}) before listening: ${log}`)));
  });
  return proc;
}
