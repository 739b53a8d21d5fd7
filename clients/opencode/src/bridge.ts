/**
 * The plugin's state: one connection to the daemon, the mirror of OpenCode's messages and
 * parts, and the window swap before each model step.
 *
 * Rules (issue 31, the facts found running OpenCode 1.18.34):
 * - `event` is not awaited by OpenCode, so the mirror can lag: before each step the transform
 *   re-sends whatever it has that the daemon has not acknowledged (same id and same JSON).
 * - The transform must never throw (a throw fails the user's turn): any failure leaves
 *   OpenCode's own messages in place, is logged once, and the connection is dropped; the next
 *   step connects again (in the background, so a dead daemon never stalls a turn). Only a
 *   connection that ended unnoticed (its daemon gone just before the step) makes the step
 *   wait for a new one, once.
 * - OpenCode calls the transform for its own summary request too (a manual `/compact`), right
 *   after `experimental.session.compacting` for that session: that call is left alone.
 * - When the transform runs, the step's (empty) assistant message is already stored and
 *   mirrored: window messages that OpenCode mirrored but did not hand over are left out.
 * - OpenCode mutates its own array after the hook, so the window is swapped in place; and it
 *   may change the messages it was handed (a reminder pushed into the last user message's
 *   parts), so it gets copies: the window kept for the next step's `since` stays as served.
 */
import {
  connectSidecar,
  ErrorCodes,
  isRpcError,
  SidecarExitedError,
  type ContextWindow,
  type SidecarClient,
} from "compaction-sidecar-client";
import { programArgs, type Settings } from "./settings.js";

export type Logger = (level: "debug" | "info" | "warn" | "error", message: string) => void;
/** `{info, parts}`, as OpenCode's transform hands it over and the daemon's `parts` format. */
export type WireMessage = { info: Record<string, unknown>; parts: Record<string, unknown>[] };
type Json = Record<string, unknown>;

/** The daemon config overlay this plugin's connection runs under (OpenCode keeps its own
 * recent tail, so a compaction in the middle of a turn keeps that turn). */
export const OVERLAY = { compaction: { keepOpenTurn: true } };

const VERSION = "0.1.0";
/** Sessions whose window a connection keeps assembled (the least recently read go first). */
const WINDOWS = 16;

/** One live connection and what it has acknowledged (a new connection starts empty, so the
 * first step after a reconnect re-sends the whole history OpenCode hands over). */
class Link {
  readonly acked = new Map<string, string>();
  readonly sessions = new Map<string, Promise<void>>();
  queue: Promise<void> = Promise.resolve();
  dead = false;
  private readonly windows = new Map<string, ContextWindow>();
  constructor(readonly client: SidecarClient) {}

  /** The session's window, kept assembled from `since` deltas: each step after the first
   * gets only what changed, not the whole window again. */
  window(sessionID: string): ContextWindow {
    let window = this.windows.get(sessionID);
    if (window !== undefined) {
      this.windows.delete(sessionID);
    } else {
      window = this.client.window(sessionID, "parts");
      if (this.windows.size >= WINDOWS) this.windows.delete(this.windows.keys().next().value!);
    }
    this.windows.set(sessionID, window);
    return window;
  }
}

function isText(part: Json): boolean {
  return part.type === "text" || part.type === "reasoning";
}

/** Whether a part event is worth sending now: streaming text and running tools are sent once
 * they are final (the transform sends whatever is still missing before the next step). */
export function finalPart(part: Json): boolean {
  if (isText(part)) {
    const time = part.time as Json | undefined;
    return time === undefined || time.end !== undefined;
  }
  if (part.type === "tool") {
    const status = (part.state as Json | undefined)?.status;
    return status === "completed" || status === "error";
  }
  return true;
}

function describe(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}

export class Bridge {
  private link?: Link;
  private connecting?: Promise<Link | undefined>;
  private everConnected = false;
  private models: Record<string, Json> = {};
  /** Sessions whose next transform is OpenCode's own summary request. */
  private readonly summarizing = new Set<string>();
  /** Every OpenCode message id seen in an event (to tell them from the daemon's own). */
  private readonly mirrored = new Set<string>();
  private readonly logged = new Set<string>();
  private disposed = false;

  constructor(
    private readonly settings: Settings,
    private readonly log: Logger,
  ) {}

  // -- config ----------------------------------------------------------------------------------

  /** OpenCode's own compaction and prune off; its models' limits become the daemon's for this
   * connection (a custom provider's model is otherwise unknown to the daemon). */
  configure(config: Json): void {
    const compaction = ((config.compaction as Json | undefined) ?? {}) as Json;
    compaction.auto = false;
    compaction.prune = false;
    config.compaction = compaction;
    const models: Record<string, Json> = {};
    const providers = (config.provider as Record<string, Json> | undefined) ?? {};
    for (const [providerID, provider] of Object.entries(providers)) {
      const entries = (provider?.models as Record<string, Json> | undefined) ?? {};
      for (const [modelID, model] of Object.entries(entries)) {
        const limit = model?.limit as Json | undefined;
        if (typeof limit?.context === "number" && limit.context > 0) {
          const known: Json = { context: limit.context, output: limit.output ?? 0 };
          if (typeof limit.input === "number") known.input = limit.input;
          models[`${providerID}/${modelID}`] = known;
        }
      }
    }
    this.models = models;
    void this.connect();
  }

  // -- connection ------------------------------------------------------------------------------

  /** Log a failure once per kind (a daemon that stays away must not flood OpenCode's log). */
  private once(key: string, message: string): void {
    if (this.logged.has(key)) return;
    this.logged.add(key);
    this.log("error", message);
  }

  private async open(): Promise<Link | undefined> {
    const args = programArgs(this.settings);
    try {
      const client = await connectSidecar({
        command: this.settings.command,
        args,
        stderr: "ignore",
        startTimeout: this.settings.startTimeout,
        clientInfo: { name: "compaction-sidecar-opencode", version: VERSION },
        // The mirror never reads its own writes back: their replies are enough.
        capabilities: { echo: false },
        initializationOptions: Object.keys(this.models).length ? { models: this.models } : {},
      });
      const link = new Link(client);
      void client.onClosed.then(() => {
        // The daemon went away (killed, stopped, restarted): connect again for the next step.
        if (link.dead) return;
        link.dead = true;
        if (this.link === link) this.link = undefined;
        void this.connect();
      });
      try {
        await client.updateConfig(OVERLAY);
      } catch (err) {
        this.once("overlay", `daemon refused ${JSON.stringify(OVERLAY)}: ${describe(err)}`);
      }
      if (this.disposed) {
        await client.dispose().catch(() => undefined);
        return undefined;
      }
      this.link = link;
      this.everConnected = true;
      this.logged.delete("connect");
      this.log("info", `connected: ${this.settings.command} ${args.join(" ")}`);
      return link;
    } catch (err) {
      this.once(
        "connect",
        `cannot reach the daemon (${this.settings.command} ${args.join(" ")}): ${describe(err)};` +
          " OpenCode's own messages are sent meanwhile",
      );
      return undefined;
    }
  }

  /** The live link, starting a connection when there is none. */
  private connect(): Promise<Link | undefined> {
    if (this.link && !this.link.dead) return Promise.resolve(this.link);
    if (this.disposed) return Promise.resolve(undefined);
    if (!this.connecting) {
      this.connecting = this.open().finally(() => {
        this.connecting = undefined;
      });
    }
    return this.connecting;
  }

  /** For a model step: a connection under way (the first one, or the one started when the
   * last was lost) is waited for; otherwise, once connected before, a new attempt starts and
   * this step goes out with OpenCode's messages, so a daemon that stays away never makes
   * every step wait. */
  private async linkForStep(): Promise<Link | undefined> {
    if (this.link && !this.link.dead) return this.link;
    if (this.connecting || !this.everConnected) return this.connect();
    void this.connect();
    return undefined;
  }

  /** A link that failed a step: closed, and a new connection started for the next step. */
  private drop(link: Link): void {
    link.dead = true;
    if (this.link === link) this.link = undefined;
    void link.client.dispose().catch(() => undefined);
    void this.connect();
  }

  /** For the recall tools: wait for a connection. */
  async client(): Promise<SidecarClient | undefined> {
    return (await this.connect())?.client;
  }

  async dispose(): Promise<void> {
    this.disposed = true;
    const link = this.link ?? (await this.connecting);
    this.link = undefined;
    await link?.client.dispose().catch(() => undefined);
  }

  // -- the mirror ------------------------------------------------------------------------------

  private ensureSession(link: Link, sessionID: string, extra: Json = {}): Promise<void> {
    let made = link.sessions.get(sessionID);
    if (!made) {
      made = link.client
        .createSession({ id: sessionID, ...extra })
        .then(
          () => undefined,
          (err: unknown) => {
            if (!isRpcError(err, ErrorCodes.CONFLICT)) throw err;
          },
        );
      link.sessions.set(sessionID, made);
      made.catch(() => link.sessions.delete(sessionID));
    }
    return made;
  }

  private async writeMessage(link: Link, info: Json): Promise<void> {
    const json = JSON.stringify(info);
    if (link.acked.get(info.id as string) === json) return;
    await link.client.request("message/update", { message: info } as never);
    link.acked.set(info.id as string, json);
  }

  private async writePart(link: Link, part: Json): Promise<void> {
    const json = JSON.stringify(part);
    if (link.acked.get(part.id as string) === json) return;
    await link.client.request("part/update", { part } as never);
    link.acked.set(part.id as string, json);
  }

  /** Queue a mirror write behind the earlier ones (their order is the daemon's order). */
  private enqueue(link: Link, work: () => Promise<void>): void {
    link.queue = link.queue.then(work).catch((err: unknown) => {
      this.log("debug", `mirror write failed (the next step re-sends it): ${describe(err)}`);
    });
  }

  onEvent(event: { type: string; properties?: unknown }): void {
    try {
      this.mirror(event);
    } catch (err) {
      this.once("event", `mirroring ${event.type} failed: ${describe(err)}`);
    }
  }

  private mirror(event: { type: string; properties?: unknown }): void {
    const p = (event.properties ?? {}) as Json;
    if (event.type === "message.updated") {
      const info = p.info as Json;
      this.mirrored.add(info.id as string);
    }
    const link = this.link;
    if (!link || link.dead) {
      if (event.type.startsWith("message.") || event.type.startsWith("session.")) {
        void this.connect();
      }
      return;
    }
    switch (event.type) {
      case "session.created": {
        const info = p.info as Json;
        const extra: Json = {};
        for (const key of ["title", "parentID", "directory"]) {
          if (typeof info[key] === "string") extra[key] = info[key];
        }
        this.enqueue(link, () => this.ensureSession(link, info.id as string, extra));
        return;
      }
      case "session.deleted": {
        const info = p.info as Json;
        this.enqueue(link, async () => {
          await link.client.deleteSession(info.id as string).catch(() => undefined);
          link.sessions.delete(info.id as string);
        });
        return;
      }
      case "message.updated": {
        const info = p.info as Json;
        const sessionID = info.sessionID as string;
        this.enqueue(link, async () => {
          await this.ensureSession(link, sessionID);
          await this.writeMessage(link, info);
        });
        return;
      }
      case "message.part.updated": {
        const part = p.part as Json;
        if (!finalPart(part)) return;
        this.enqueue(link, async () => {
          await this.ensureSession(link, part.sessionID as string);
          await this.writePart(link, part);
        });
        return;
      }
      case "message.removed": {
        const { sessionID, messageID } = p as { sessionID: string; messageID: string };
        this.enqueue(link, async () => {
          link.acked.delete(messageID);
          await link.client.removeMessage(sessionID, messageID).catch(ignoreUnknown);
        });
        return;
      }
      case "message.part.removed": {
        const { sessionID, messageID, partID } = p as Record<string, string>;
        this.enqueue(link, async () => {
          link.acked.delete(partID);
          await link.client.removePart(sessionID, messageID, partID).catch(ignoreUnknown);
        });
        return;
      }
      case "session.idle": {
        const sessionID = p.sessionID as string;
        this.enqueue(link, async () => {
          void link.client.idle(sessionID).catch(() => undefined);
        });
        return;
      }
      default:
        return;
    }
  }

  /** Send what OpenCode hands over that the daemon has not acknowledged: every message
   * before its parts, pipelined on the one connection (which keeps their order). */
  private async resync(link: Link, sessionID: string, messages: WireMessage[]): Promise<void> {
    await link.queue;
    await this.ensureSession(link, sessionID);
    const writes: Promise<void>[] = [];
    for (const message of messages) {
      writes.push(this.writeMessage(link, message.info));
      for (const part of message.parts) writes.push(this.writePart(link, part));
    }
    await Promise.all(writes);
  }

  // -- the window ------------------------------------------------------------------------------

  onCompacting(sessionID: string): void {
    this.summarizing.add(sessionID);
  }

  /** Replace OpenCode's messages with the daemon's window for that session; never throws. */
  async transform(output: { messages: WireMessage[] }): Promise<void> {
    const messages = output.messages;
    if (!Array.isArray(messages) || messages.length === 0) return;
    const sessionID = messages[0]?.info?.sessionID;
    if (typeof sessionID !== "string") return;
    if (this.summarizing.delete(sessionID)) return; // OpenCode's own summary request
    for (let attempt = 0; ; attempt++) {
      let link: Link | undefined;
      try {
        link = await this.linkForStep();
        if (!link) return;
        await this.swap(link, sessionID, messages);
        this.logged.delete("transform");
        return;
      } catch (err) {
        if (link) this.drop(link);
        // The daemon went away since the last step and its old connection took this step's
        // requests unanswered before the plugin knew: once more, on the connection `drop`
        // started (which the next `linkForStep` waits for).
        if (attempt === 0 && err instanceof SidecarExitedError) continue;
        this.once(
          "transform",
          `the daemon's window is unavailable (${describe(err)}); this step sends OpenCode's own messages`,
        );
        return;
      }
    }
  }

  /** The step's messages mirrored, then swapped in place for the daemon's window. */
  private async swap(link: Link, sessionID: string, messages: WireMessage[]): Promise<void> {
    await this.resync(link, sessionID, messages);
    const window = await link.window(sessionID).refresh();
    const handed = new Set(messages.map((m) => m.info.id));
    const next = (window.messages as unknown as WireMessage[])
      .filter((m) => handed.has(m.info.id) || !this.mirrored.has(m.info.id as string))
      .map((m) => structuredClone(m));
    if (next.length > 0) messages.splice(0, messages.length, ...next);
  }
}

function ignoreUnknown(err: unknown): void {
  if (
    isRpcError(err, ErrorCodes.UNKNOWN_SESSION) ||
    isRpcError(err, ErrorCodes.UNKNOWN_MESSAGE) ||
    isRpcError(err, ErrorCodes.UNKNOWN_PART)
  ) {
    return;
  }
  throw err;
}
