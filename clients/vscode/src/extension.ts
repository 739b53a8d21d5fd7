/**
 * VS Code glue: settings, the status bar item, the output channel, the two commands and the
 * history tree. Everything it shows comes from ./logic.ts (tested under node).
 */
import * as vscode from "vscode";
import {
  formatEntry,
  formatStatus,
  SidecarController,
  type CompactionEntry,
  type Settings,
} from "./logic";

let controller: SidecarController | undefined;

class HistoryProvider implements vscode.TreeDataProvider<CompactionEntry | string> {
  private readonly emitter = new vscode.EventEmitter<void>();
  readonly onDidChangeTreeData = this.emitter.event;
  private entries: CompactionEntry[] = [];

  async refresh(): Promise<void> {
    this.entries = (await controller?.history()) ?? [];
    this.emitter.fire();
  }

  getTreeItem(element: CompactionEntry | string): vscode.TreeItem {
    if (typeof element === "string") {
      // A summary line, under its compaction.
      return new vscode.TreeItem(element, vscode.TreeItemCollapsibleState.None);
    }
    const shown = formatEntry(element);
    const item = new vscode.TreeItem(shown.label, vscode.TreeItemCollapsibleState.Collapsed);
    item.description = shown.description;
    item.tooltip = new vscode.MarkdownString().appendText(shown.tooltip);
    return item;
  }

  getChildren(element?: CompactionEntry | string): (CompactionEntry | string)[] {
    if (element === undefined) return [...this.entries].reverse();
    if (typeof element === "string") return [];
    return element.summary.split("\n").filter((line) => line.trim() !== "");
  }
}

function settings(): Settings {
  const cfg = vscode.workspace.getConfiguration("compactionSidecar");
  return {
    path: cfg.get<string>("path") || "compaction-sidecar",
    python: cfg.get<string>("python") || "python3",
    connectArgs: cfg.get<string[]>("connectArgs") ?? [],
  };
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const output = vscode.window.createOutputChannel("Compaction Sidecar");
  const status = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  status.command = "compactionSidecar.showHistory";
  const history = new HistoryProvider();
  const showStatus = (s: { text: string; tooltip: string }): void => {
    status.text = s.text;
    status.tooltip = s.tooltip;
    status.show();
  };
  showStatus(formatStatus(undefined));
  context.subscriptions.push(
    output,
    status,
    vscode.window.registerTreeDataProvider("compactionSidecar.history", history),
    vscode.commands.registerCommand("compactionSidecar.showLog", () => output.show()),
    vscode.commands.registerCommand("compactionSidecar.compactNow", async () => {
      try {
        const result = await controller?.compactNow();
        if (result?.status === "stop") {
          void vscode.window.showWarningMessage(
            `Compaction stopped: ${result.error ?? "see the log"}`,
          );
        }
        await history.refresh();
      } catch (err) {
        void vscode.window.showErrorMessage(
          `Compact now: ${err instanceof Error ? err.message : String(err)}`,
        );
      }
    }),
    vscode.commands.registerCommand("compactionSidecar.showHistory", async () => {
      await history.refresh();
      await vscode.commands.executeCommand("compactionSidecar.history.focus");
    }),
  );
  try {
    controller = await SidecarController.start(settings(), {
      log: (line) => output.appendLine(line),
      status: (use) => showStatus(formatStatus(use)),
    });
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    output.appendLine(message);
    status.text = "$(error) sidecar";
    status.tooltip = message;
    void vscode.window
      .showErrorMessage(`compaction-sidecar did not start: ${message.split("\n")[0]}`, "Show log")
      .then((choice) => choice && output.show());
    return;
  }
  context.subscriptions.push(controller.onDidCompact(() => void history.refresh()));
}

/** A clean shutdown: VS Code awaits the promise (the daemon gets `shutdown`/`exit`). */
export async function deactivate(): Promise<void> {
  const c = controller;
  controller = undefined;
  await c?.dispose();
}
