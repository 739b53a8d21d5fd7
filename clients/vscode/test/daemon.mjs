// The shared daemon the extension tests start through `compaction-sidecar connect`: a temp dir,
// a config with a small model window, config and state homes of its own, and `connect`
// arguments isolated to them; stopped and removed when the test ends.
import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const PYTHON = process.env.SIDECAR_PYTHON || "python3";
export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

/** `{ dir, socket, env, connectArgs }`: `env` is this process's, isolated to `dir`. */
export async function setup(t, prefix = "sidecar-vscode-") {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  const socket = join(dir, "daemon.sock");
  const env = {
    ...process.env,
    XDG_CONFIG_HOME: join(dir, "cfg"),
    XDG_STATE_HOME: join(dir, "state"),
  };
  delete env.OPENCODE_DISABLE_AUTOCOMPACT;
  delete env.OPENCODE_DISABLE_PRUNE;
  const config = join(dir, "config.json");
  await writeFile(
    config,
    JSON.stringify({ models: { "test/tiny": { context: 8000, output: 1000 } } }),
  );
  const connectArgs = ["--socket", socket, "--db", join(dir, "s.db"), "--config", config];
  // A daemon left behind by a failed run exits by itself.
  connectArgs.push("--log-file", join(dir, "daemon.log"), "--idle-exit", "30");
  t.after(async () => {
    await new Promise((done) =>
      spawn(PYTHON, ["-m", "sidecar", "stop", "--socket", socket], {
        cwd: REPO,
        env,
        stdio: "ignore",
      }).once("exit", done),
    );
    await rm(dir, { recursive: true, force: true });
  });
  return { dir, socket, env, connectArgs };
}
