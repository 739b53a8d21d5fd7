/**
 * The extension's logic, with no `vscode` import, so that it runs (and is tested) under plain
 * node against a real daemon; src/extension.ts only wires it to VS Code's UI.
 */
import {
  connectSidecar,
  SidecarError,
  type BreakdownResult,
  type CompactResult,
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
  /** What fills the window (`session/breakdown`), for the tooltip; absent when unknown. */
  breakdown?: BreakdownResult;
}

/** One compaction of a session, for "Show compaction history". */
export interface CompactionEntry {
  markerID: string;
  summaryID: string | null;
  auto: boolean;
  time: number | undefined;
  /** The window just before the compaction and right after it (the daemon's estimate, as
   * `session/compactions` records it). */
  before: number;
  after: number;
  /** An automatic compaction's trigger: the turn's tokens as the provider reported them. */
  reported: number | null;
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
    tooltip:
      `Session ${use.sessionID}: ${use.used} ${what}, of ${use.usable} usable (the model's context minus its output reserve)` +
      formatBreakdown(use.breakdown),
  };
}

const LABELS: Record<string, string> = {
  overhead: "system prompt and tools",
  summary: "summary",
  keptVerbatim: "kept verbatim",
  userText: "user messages",
  assistantText: "assistant text",
  reasoning: "reasoning",
  toolCalls: "tool calls",
  toolOutputs: "tool outputs",
  toolOutputsPruned: "pruned outputs",
  pinned: "pinned",
  other: "framing, other",
};

/** The tooltip's lines for a breakdown: what fills the window, largest first, and the room left. */
export function formatBreakdown(b: BreakdownResult | undefined): string {
  if (b === undefined) return "";
  const rows = b.categories
    .filter((c) => c.tokens > 0)
    .sort((x, y) => y.tokens - x.tokens)
    .map((c) => {
      const share = c.share === null || c.share === undefined ? "" : ` (${Math.round(100 * c.share)}%)`;
      return `\n${LABELS[c.name] ?? c.name}: ${c.tokens}${share}`;
    });
  const free = b.free === null || b.free === undefined ? "" : `\nfree: ${b.free}`;
  const trigger =
    b.trigger === null || b.trigger === undefined ? "" : `; compaction past ${b.trigger}`;
  return `\n\nWhat fills the window (${b.totalTokens} tokens):${rows.join("")}${free}${trigger}`;
}

/** A history entry as a tree item's label, description and tooltip. */
export function formatEntry(e: CompactionEntry): {
  label: string;
  description: string;
  tooltip: string;
} {
  const when =
    e.time === undefined ? "" : new Date(e.time).toISOString().replace("T", " ").slice(0, 19);
  const reported = e.reported === null ? "" : `; triggered at ${e.reported} reported tokens`;
  return {
    label: `${e.auto ? "auto" : "manual"} compaction ${when}`.trim(),
    description: `before ${e.before} → after ${e.after} tokens`,
    tooltip:
      `the window just before the compaction (${e.before} tokens) and right after it ` +
      `(${e.after})${reported}\n\n${e.summary}`,
  };
}

/** Every compaction of `sessionID`, oldest first (`session/compactions`), each with its
 * summary's text (`history/expand`). */
export async function compactionHistory(
  client: SidecarClient,
  sessionID: string,
): Promise<CompactionEntry[]> {
  const records = await client.compactions(sessionID);
  return Promise.all(
    records.map(async (r) => ({
      markerID: r.markerID,
      summaryID: r.messageID,
      auto: r.auto ?? false,
      time: r.time,
      before: r.tokensBefore ?? 0,
      after: r.tokensAfter ?? 0,
      reported: r.reportedTokens ?? null,
      summary: (await client.expandHistory(sessionID, r.messageID, { maxChars: 20_000 })).content,
    })),
  );
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
        breakdown: await this.client.breakdown(sessionID),
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
      const b = await this.client.breakdown(sessionID);
      this.show({
        sessionID,
        used: b.totalTokens,
        usable: b.usableInput ?? usable,
        status: "idle",
        estimated: true,
        breakdown: b,
      });
    } catch (err) {
      this.sink.log(
        `session/breakdown ${sessionID}: ${err instanceof Error ? err.message : String(err)}`,
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
