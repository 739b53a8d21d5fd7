/**
 * The extension's logic, with no `vscode` import, so that it runs (and is tested) under plain
 * node against a real daemon; src/extension.ts only wires it to VS Code's UI.
 */
import {
  connectSidecar,
  SidecarError,
  type AssistantMessage,
  type CompactResult,
  type Message,
  type Part,
  type SidecarClient,
} from "compaction-sidecar-client";

/** The extension's settings (`compactionSidecar.*`). */
export interface Settings {
  /** The `compaction-sidecar` program. */
  path: string;
  /** The Python for the `python -m sidecar connect` fallback. */
  python: string;
  /** More arguments for `connect` (`--socket`, `--db`, `--config`, ...). */
  connectArgs: string[];
}

/** Where the logic reports: the output channel and the status bar. */
export interface Sink {
  log(line: string): void;
  status(use: WindowUse | undefined): void;
}

/** The active session's window use, as the status bar shows it. */
export interface WindowUse {
  sessionID: string;
  /** Tokens the model counted on its last call (input + cache reads + output). */
  used: number;
  /** The model's usable input: its context minus the output reserve; null when unknown. */
  usable: number | null;
  status: "idle" | "compacting" | "error";
  /** Set right after a compaction: `used` is then the daemon's estimate of the new window. */
  estimated: boolean;
}

/** One compaction of a session, for "Show compaction history". */
export interface CompactionEntry {
  markerID: string;
  summaryID: string | null;
  auto: boolean;
  time: number | undefined;
  /** Tokens the model counted on the last call before the compaction (what overflowed). */
  before: number | null;
  /** Tokens of the summary that replaced them (the summary's output). */
  after: number | null;
  summary: string;
}

/** The programs to try, in order: the `path` setting, then `python -m sidecar`. */
export function commandCandidates(settings: Settings): { command: string; args: string[] }[] {
  return [
    { command: settings.path, args: ["connect", ...settings.connectArgs] },
    { command: settings.python, args: ["-m", "sidecar", "connect", ...settings.connectArgs] },
  ];
}

const k = (n: number): string => (n >= 1000 ? `${(n / 1000).toFixed(1)}k` : String(n));

/** The status bar's text and tooltip for `use` (VS Code `$(icon)` syntax). */
export function formatStatus(use: WindowUse | undefined): { text: string; tooltip: string } {
  if (use === undefined) {
    return { text: "$(archive) sidecar", tooltip: "compaction-sidecar: no active session yet" };
  }
  const spin =
    use.status === "compacting" ? " $(sync~spin)" : use.status === "error" ? " $(error)" : "";
  const approx = use.estimated ? "~" : "";
  if (use.usable === null || use.usable === 0) {
    return {
      text: `$(dashboard) ${approx}${k(use.used)} / ?${spin}`,
      tooltip: `Session ${use.sessionID}: ${use.used} tokens; the model's limit is not known to the daemon (config "models")`,
    };
  }
  const pct = Math.round((100 * use.used) / use.usable);
  const what = use.estimated
    ? "estimated tokens in the window since the compaction"
    : "tokens on the model's last call";
  return {
    text: `$(dashboard) ${approx}${k(use.used)} / ${k(use.usable)} (${pct}%)${spin}`,
    tooltip: `Session ${use.sessionID}: ${use.used} ${what}, of ${use.usable} usable (the model's context minus its output reserve)`,
  };
}

/** A history entry as a tree item's label, description and tooltip. */
export function formatEntry(e: CompactionEntry): {
  label: string;
  description: string;
  tooltip: string;
} {
  const when =
    e.time === undefined ? "" : new Date(e.time).toISOString().replace("T", " ").slice(0, 19);
  const before = e.before === null ? "?" : String(e.before);
  const after = e.after === null ? "?" : String(e.after);
  return {
    label: `${e.auto ? "auto" : "manual"} compaction ${when}`.trim(),
    description: `before ${before} → after ${after} tokens`,
    tooltip:
      `before: ${before} tokens on the model's last call before compacting; ` +
      `after: the summary's ${after} tokens\n\n${e.summary}`,
  };
}

const count = (m: AssistantMessage): number =>
  (m.tokens?.input ?? 0) + (m.tokens?.cache?.read ?? 0) + (m.tokens?.output ?? 0);

/** Every compaction of `sessionID`, oldest first, read from its stored messages. */
export async function compactionHistory(
  client: SidecarClient,
  sessionID: string,
): Promise<CompactionEntry[]> {
  const all: { info: Message; parts: Part[] }[] = [];
  let cursor: string | undefined;
  do {
    const page = await client.messages(sessionID, cursor === undefined ? {} : { cursor });
    all.push(...(page.messages as { info: Message; parts: Part[] }[]));
    cursor = page.nextCursor ?? undefined;
  } while (cursor !== undefined);
  const entries: CompactionEntry[] = [];
  let lastCall: AssistantMessage | undefined;
  for (const { info, parts } of all) {
    if (info.role === "assistant" && !info.summary && info.finish) lastCall = info;
    const marker = parts.find((p) => p.type === "compaction");
    if (info.role !== "user" || marker === undefined || marker.type !== "compaction") continue;
    const summary = all.find(
      (m) => m.info.role === "assistant" && m.info.summary && m.info.parentID === info.id,
    );
    const text =
      summary?.parts.flatMap((p) => (p.type === "text" ? [p.text ?? ""] : [])).join("\n") ?? "";
    entries.push({
      markerID: info.id ?? "",
      summaryID: summary?.info.id ?? null,
      auto: marker.auto ?? false,
      time: info.time?.created,
      before: lastCall === undefined ? null : count(lastCall),
      after: summary?.info.role === "assistant" ? (summary.info.tokens?.output ?? null) : null,
      summary: text,
    });
  }
  return entries;
}

export interface StartOptions {
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  startTimeout?: number;
}

/**
 * The running extension: one client of the shared daemon (through `connect`, reconnecting after a
 * restart), subscribed to every session; the active session is the one written to last.
 */
export class SidecarController {
  private use: WindowUse | undefined;
  private readonly changed = new Set<(sessionID: string) => void>();

  private constructor(
    readonly client: SidecarClient,
    private readonly sink: Sink,
  ) {}

  /** Start `connect` (the `path` setting, else `python -m sidecar`) and follow every session. */
  static async start(
    settings: Settings,
    sink: Sink,
    options: StartOptions = {},
  ): Promise<SidecarController> {
    let client: SidecarClient | undefined;
    let lastError: unknown;
    for (const { command, args } of commandCandidates(settings)) {
      try {
        client = await connectSidecar({
          command,
          args,
          env: options.env,
          cwd: options.cwd,
          startTimeout: options.startTimeout,
          stderr: "ignore",
          onStderr: (line) => sink.log(`[daemon] ${line}`),
          clientInfo: { name: "compaction-sidecar-vscode", version: "0.1.0" },
          reconnect: true,
        });
        sink.log(`connected through: ${[command, ...args].join(" ")}`);
        break;
      } catch (err) {
        lastError = err;
        // Only a program that cannot be run falls back; a daemon that failed says why.
        const cannotRun = err instanceof SidecarError && err.message.startsWith("cannot start");
        sink.log(`${err instanceof Error ? err.message : String(err)}`);
        if (!cannotRun) throw err;
      }
    }
    if (client === undefined) throw lastError;
    const controller = new SidecarController(client, sink);
    controller.listen();
    await client.subscribe("*");
    return controller;
  }

  private listen(): void {
    const c = this.client;
    c.onNotification("window/logMessage", (p) => this.sink.log(p.message));
    c.onNotification("message/updated", (e) => {
      const m = e.message;
      if (m.role === "assistant" && m.finish && !m.summary && m.id !== undefined)
        void this.measure(m.sessionID);
    });
    c.onNotification("session/status", (e) => {
      if (this.use?.sessionID === e.sessionID) this.show({ ...this.use, status: e.status });
      if (e.status === "error" && e.error) this.sink.log(`session ${e.sessionID}: ${e.error}`);
    });
    c.onNotification("session/compacted", (e) => {
      this.sink.log(
        `session ${e.sessionID} compacted (${e.auto ? "auto" : "manual"}), summary ${e.messageID}`,
      );
      void this.measureAfterCompaction(e.sessionID);
      for (const h of [...this.changed]) h(e.sessionID);
    });
    c.onDidDisconnect((err) => this.sink.log(`daemon gone: ${err.message}; reconnecting`));
    c.onDidReconnect(() => this.sink.log("reconnected to the daemon"));
  }

  /** The session the status bar follows (the last one written to). */
  get active(): string | undefined {
    return this.use?.sessionID;
  }

  /** The status bar's current figures. */
  get windowUse(): WindowUse | undefined {
    return this.use;
  }

  /** Called with a session id after each of its compactions (refresh the history view). */
  onDidCompact(listener: (sessionID: string) => void): { dispose(): void } {
    this.changed.add(listener);
    return { dispose: () => this.changed.delete(listener) };
  }

  /** A finished model call: the daemon's count against the model's usable window. */
  private async measure(sessionID: string): Promise<void> {
    try {
      const r = await this.client.overflow(sessionID);
      this.show({
        sessionID,
        used: r.count,
        usable: r.known === false ? null : r.usable,
        status: "idle",
        estimated: false,
      });
    } catch (err) {
      this.sink.log(
        `session/overflow ${sessionID}: ${err instanceof Error ? err.message : String(err)}`,
      );
    }
  }

  /** After a compaction no model call has been made yet: show the daemon's estimate. */
  private async measureAfterCompaction(sessionID: string): Promise<void> {
    try {
      const usable = this.use?.sessionID === sessionID ? this.use.usable : null;
      const ctx = await this.client.context(sessionID, "parts");
      this.show({
        sessionID,
        used: ctx.estimatedTokens,
        usable: ctx.usable ?? usable,
        status: "idle",
        estimated: true,
      });
    } catch (err) {
      this.sink.log(
        `session/context ${sessionID}: ${err instanceof Error ? err.message : String(err)}`,
      );
    }
  }

  private show(use: WindowUse): void {
    this.use = use;
    this.sink.status(use);
  }

  /** "Compact now": compact the active session (or `sessionID`). */
  async compactNow(sessionID = this.active): Promise<CompactResult> {
    if (sessionID === undefined) throw new Error("no active session: nothing has been written yet");
    return this.client.compact(sessionID);
  }

  /** "Show compaction history" of the active session (or `sessionID`). */
  async history(sessionID = this.active): Promise<CompactionEntry[]> {
    return sessionID === undefined ? [] : compactionHistory(this.client, sessionID);
  }

  /** A clean shutdown: `shutdown`/`exit` to the daemon, then wait for `connect` to end. */
  async dispose(): Promise<void> {
    this.changed.clear();
    await this.client.dispose();
  }
}
