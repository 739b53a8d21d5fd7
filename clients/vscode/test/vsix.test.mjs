// The `.vsix`: `vsce package` (no network: the client is bundled, `--no-dependencies`) ships
// the bundled extension, whose only imports are `vscode` and node's own modules.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { builtinModules } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { test } from "node:test";

const run = promisify(execFile);
const HERE = resolve(dirname(fileURLToPath(import.meta.url)), "..");

test("vsce packages a .vsix holding the bundled extension, its manifest and README", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "sidecar-vsix-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const out = join(dir, "ext.vsix");
  const vsce = join(HERE, "node_modules", "@vscode", "vsce", "vsce");
  await run(
    process.execPath,
    [vsce, "package", "--no-dependencies", "--allow-missing-repository", "--out", out],
    { cwd: HERE },
  );
  const { stdout } = await run("python3", ["-m", "zipfile", "-l", out], { encoding: "utf8" });
  for (const f of [
    "extension/package.json",
    "extension/dist/extension.js",
    "extension/readme.md",
    "extension/LICENSE.txt",
  ]) {
    assert.ok(stdout.toLowerCase().includes(f.toLowerCase()), `${f} missing:\n${stdout}`);
  }
  assert.ok(!stdout.includes("node_modules"), stdout);
  assert.ok(!stdout.includes("extension/src/"), stdout);

  const bundle = await readFile(join(HERE, "dist", "extension.js"), "utf8");
  const required = new Set([...bundle.matchAll(/require\("([^"]+)"\)/g)].map((m) => m[1]));
  const foreign = [...required].filter(
    (m) => m !== "vscode" && !builtinModules.includes(m.replace(/^node:/, "")),
  );
  assert.deepEqual(foreign, []);
  assert.ok(required.has("vscode"));
  assert.match(bundle, /compaction-sidecar-client|spawnSidecar|connectSidecar/);
});
