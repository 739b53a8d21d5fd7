// The newcomer path for the TypeScript client: `npm pack` on a fresh checkout (no dist/) ships
// the compiled code (the `prepack` build), and the tarball, installed into a fresh npm project,
// imports by name, type-checks, and talks to a real daemon.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cp, mkdir, readFile, readdir, symlink, writeFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { test } from "node:test";
import { PYTHON, REPO, daemonEnv, tempDir } from "./helpers.mjs";

const run = promisify(execFile);
const PKG = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const npm = (cwd, ...args) =>
  run("npm", [...args, "--no-audit", "--no-fund"], { cwd, encoding: "utf8" });

/** The package as a clean clone has it: sources, no dist/ (node_modules shared, not copied). */
async function freshCheckout(dir) {
  const checkout = join(dir, "typescript");
  await mkdir(checkout);
  for (const name of ["package.json", "package-lock.json", "tsconfig.json", "README.md", "src"]) {
    await cp(join(PKG, name), join(checkout, name), { recursive: true });
  }
  await symlink(join(PKG, "node_modules"), join(checkout, "node_modules"), "dir");
  return checkout;
}

test("npm pack on a fresh checkout ships dist/, and the installed tarball imports by name", async (t) => {
  const dir = await tempDir(t);
  const checkout = await freshCheckout(dir);
  const { stdout } = await npm(checkout, "pack", "--json", "--pack-destination", dir);
  const [{ filename, files }] = JSON.parse(stdout.slice(stdout.indexOf("[")));
  const shipped = files.map((f) => f.path);
  for (const f of ["dist/index.js", "dist/index.d.ts", "dist/protocol.js", "dist/protocol.d.ts"]) {
    assert.ok(shipped.includes(f), `${f} missing from ${shipped.join(", ")}`);
  }

  // Every shipped source map carries the sources it points at (src/ does not ship).
  for (const map of shipped.filter((f) => f.endsWith(".js.map"))) {
    const body = JSON.parse(await readFile(join(checkout, map), "utf8"));
    assert.equal(body.sourcesContent?.length, body.sources.length, `${map} lacks its sources`);
    assert.ok(body.sourcesContent.every((c) => typeof c === "string" && c.length > 0), map);
  }

  const app = join(dir, "app");
  await mkdir(app);
  await writeFile(
    join(app, "package.json"),
    JSON.stringify({ name: "app", private: true, type: "module" }),
  );
  await npm(app, "install", "--prefer-offline", join(dir, filename));
  assert.deepEqual(
    await readdir(join(app, "node_modules", "compaction-sidecar-client", "dist")).then((f) =>
      f.includes("index.js"),
    ),
    true,
  );

  // ESM and CommonJS imports by name, against a real daemon.
  await writeFile(
    join(app, "main.mjs"),
    `import { spawnSidecar, PROTOCOL_VERSION } from "compaction-sidecar-client";
const client = await spawnSidecar({ command: process.argv[2], args: ["-m", "sidecar", "serve", "--db", process.argv[3]], stderr: "ignore" });
const session = await client.createSession({ title: "newcomer" });
console.log(JSON.stringify({ title: (await client.getSession(session.id)).title, version: client.initializeResult.protocolVersion === PROTOCOL_VERSION }));
await client.dispose();
`,
  );
  const out = await run(process.execPath, ["main.mjs", PYTHON, join(dir, "s.db")], {
    cwd: app,
    env: { ...daemonEnv(dir), PYTHONPATH: REPO },
    encoding: "utf8",
  });
  assert.deepEqual(JSON.parse(out.stdout), { title: "newcomer", version: true });
  const cjs = await run(
    process.execPath,
    ["-e", "console.log(typeof require('compaction-sidecar-client').connectSidecar)"],
    { cwd: app, encoding: "utf8" },
  );
  assert.equal(cjs.stdout.trim(), "function");

  // Its types resolve by name too (with this package's TypeScript).
  await writeFile(
    join(app, "check.ts"),
    `import { connectSidecar, type Session } from "compaction-sidecar-client";
export async function f(): Promise<Session> { return (await connectSidecar({ reconnect: true })).createSession({}); }
`,
  );
  await writeFile(
    join(app, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        module: "Node16",
        moduleResolution: "Node16",
        strict: true,
        noEmit: true,
        types: [],
        skipLibCheck: false,
        typeRoots: [join(PKG, "node_modules", "@types")],
      },
      files: ["check.ts"],
    }),
  );
  await run(process.execPath, [join(PKG, "node_modules", "typescript", "bin", "tsc"), "-p", app], {
    cwd: app,
    encoding: "utf8",
  }).catch((err) => {
    assert.fail(`tsc: ${err.stdout}${err.stderr}`);
  });
});
