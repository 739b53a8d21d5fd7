// The bundled extension (dist/extension.js) as VS Code runs it, with a stand-in for the `vscode`
// module (VS Code itself cannot run here): activate() against a real daemon started through
// `connect`, the status bar from notifications, both commands, the history tree, deactivate().
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import Module, { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { connectSidecar } from "compaction-sidecar-client";
import { turn } from "../../typescript/test/turn.mjs";
import { PYTHON, setup } from "./daemon.mjs";

const HERE = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const MODEL = { providerID: "test", modelID: "tiny" };

/** Just the parts of the `vscode` API the extension uses, recording what it shows. */
function fakeVscode(settings) {
  const shown = { errors: [], warnings: [], lines: [], commands: new Map(), trees: new Map() };
  const waiters = [];
  const statusItem = {
    _text: "",
    tooltip: "",
    command: undefined,
    get text() {
      return this._text;
    },
    set text(value) {
      this._text = value;
      for (const w of [...waiters]) {
        if (w.predicate(value)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(value);
        }
      }
    },
    show() {},
    dispose() {},
  };
  class EventEmitter {
    listeners = [];
    event = (l) => {
      this.listeners.push(l);
      return { dispose() {} };
    };
    fire(e) {
      for (const l of this.listeners) l(e);
    }
  }
  class TreeItem {
    constructor(label, collapsibleState) {
      this.label = label;
      this.collapsibleState = collapsibleState;
    }
  }
  class MarkdownString {
    value = "";
    appendText(t) {
      this.value += t;
      return this;
    }
  }
  const api = {
    EventEmitter,
    TreeItem,
    MarkdownString,
    TreeItemCollapsibleState: { None: 0, Collapsed: 1, Expanded: 2 },
    StatusBarAlignment: { Left: 1, Right: 2 },
    window: {
      createOutputChannel: () => ({
        appendLine: (l) => shown.lines.push(l),
        show() {},
        dispose() {},
      }),
      createStatusBarItem: () => statusItem,
      registerTreeDataProvider: (id, provider) => {
        shown.trees.set(id, provider);
        return { dispose() {} };
      },
      showErrorMessage: async (m) => void shown.errors.push(m),
      showWarningMessage: async (m) => void shown.warnings.push(m),
    },
    commands: {
      registerCommand: (id, fn) => {
        shown.commands.set(id, fn);
        return { dispose() {} };
      },
      executeCommand: async (id, ...args) => shown.commands.get(id)?.(...args),
    },
    workspace: { getConfiguration: () => ({ get: (key) => settings[key] }) },
  };
  const statusText = (predicate) =>
    predicate(statusItem.text)
      ? Promise.resolve(statusItem.text)
      : new Promise((resolve) => waiters.push({ predicate, resolve }));
  return { api, shown, statusItem, statusText };
}

/** Load dist/extension.js with `vscode` resolving to `api`. */
function loadExtension(api) {
  const load = Module._load;
  Module._load = function (request, ...rest) {
    return request === "vscode" ? api : load.call(this, request, ...rest);
  };
  try {
    const require = createRequire(import.meta.url);
    const path = require.resolve("../dist/extension.js");
    delete require.cache[path];
    return require(path);
  } finally {
    Module._load = load;
  }
}

test("activate, the status bar, Compact now, the history view and deactivate", async (t) => {
  const { dir, socket, env, connectArgs } = await setup(t, "sidecar-ext-");
  // The extension passes no env: the daemon inherits this process's.
  const saved = process.env;
  process.env = env;
  t.after(() => {
    process.env = saved;
  });

  const vscode = fakeVscode({ path: join(dir, "not-installed"), python: PYTHON, connectArgs });
  const extension = loadExtension(vscode.api);
  const context = { subscriptions: [] };
  await extension.activate(context);
  assert.deepEqual(vscode.shown.errors, []);
  assert.equal(vscode.statusItem.text, "$(archive) sidecar");
  assert.equal(vscode.statusItem.command, "compactionSidecar.showHistory");
  assert.deepEqual([...vscode.shown.commands.keys()].sort(), [
    "compactionSidecar.compactNow",
    "compactionSidecar.showHistory",
    "compactionSidecar.showLog",
  ]);
  assert.ok(
    vscode.shown.lines.some((l) => l.startsWith(`connected through: ${PYTHON} -m sidecar connect`)),
  );

  // An agent writes a turn to the shared daemon; the status bar follows from notifications.
  const agent = await connectSidecar({ socket });
  t.after(() => agent.dispose());
  const { id: sessionID } = await agent.createSession({ title: "agent" });
  const measured = vscode.statusText((text) => text.includes("3.2k"));
  const tokens = { input: 3000, output: 200, reasoning: 0, cache: { read: 0, write: 0 } };
  await turn(agent, sessionID, MODEL, "Refactor src/app.py", tokens);
  assert.equal(await measured, "$(dashboard) 3.2k / 7.0k (46%)");

  // "Compact now", then the history view holds it, with its summary under it.
  const compacting = vscode.statusText((text) => text.endsWith("$(sync~spin)"));
  const estimated = vscode.statusText((text) => /\) ~\d/.test(text));
  await vscode.api.commands.executeCommand("compactionSidecar.compactNow");
  assert.deepEqual(vscode.shown.errors, []);
  assert.equal(await compacting, "$(dashboard) 3.2k / 7.0k (46%) $(sync~spin)");
  assert.match(await estimated, /^\$\(dashboard\) ~\d+ \/ 7\.0k \(\d+%\)$/);
  await vscode.api.commands.executeCommand("compactionSidecar.showHistory");
  const tree = vscode.shown.trees.get("compactionSidecar.history");
  const [entry, ...more] = tree.getChildren();
  assert.deepEqual(more, []);
  const item = tree.getTreeItem(entry);
  assert.match(item.label, /^manual compaction /);
  assert.match(item.description, /^before \d+ → after \d+ tokens$/);
  const lines = tree.getChildren(entry);
  assert.ok(
    lines.some((l) => l.includes("src/app.py")),
    lines.join("\n"),
  );

  // deactivate: shutdown/exit, and `connect` ends; the shared daemon serves on.
  await extension.deactivate();
  assert.equal((await agent.getSession(sessionID)).title, "agent");
});

test("activate with a broken setup shows the error, never hangs", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "sidecar-ext-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const connectArgs = ["--socket", join(dir, "d.sock"), "--config", join(dir, "missing.json")];
  // `compaction-sidecar` is not installed; `python -m sidecar connect` exits at once.
  const vscode = fakeVscode({ path: join(dir, "none"), python: PYTHON, connectArgs });
  const extension = loadExtension(vscode.api);
  await extension.activate({ subscriptions: [] });
  assert.equal(vscode.shown.errors.length, 1);
  assert.match(
    vscode.shown.errors[0],
    /^compaction-sidecar did not start: .* exited with status 2 before answering initialize/,
  );
  assert.equal(vscode.statusItem.text, "$(error) sidecar");
  assert.match(vscode.statusItem.tooltip, /missing\.json/);
  assert.ok(
    vscode.shown.lines.some((l) => l.startsWith("[daemon] ") && l.includes("missing.json")),
  );
  await extension.deactivate();
});
