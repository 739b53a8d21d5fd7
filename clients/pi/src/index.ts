/**
 * compaction-sidecar for pi: the daemon owns pi's context window.
 *
 * - Mirror: pi's session entries on the current branch become the daemon's messages and parts
 *   (ids from the entries), before every model call and when the agent ends.
 * - `context`: the model gets the daemon's window (`session/context`), converted back to pi's
 *   messages; the daemon's summary as pi's compaction-summary message.
 * - `session_before_compact`: pi's own compaction is cancelled while the daemon answers.
 * - `agent_end`: the last step is mirrored and `session/idle` lets the daemon finish its work.
 * - Tools `history_search`, `history_expand`, `history_pin`, bound to the current session.
 *
 * A branch of pi's session tree (`/tree`, `/fork`) is a daemon session: when the branch leaves
 * what the bound daemon session holds, that session is forked (`session/fork`) just before the
 * first entry the branch does not have. The binding is kept in pi's session as a custom entry,
 * so it survives restarts and is copied by pi's own `/fork`.
 *
 * Nothing here may break pi's turn: any daemon error means "return nothing" (pi sends its own
 * messages), one log line, and a fresh connection at the next event.
 */
import type { AgentMessage } from "@mariozechner/pi-agent-core";
import type { ExtensionAPI, ExtensionContext, SessionEntry } from "@mariozechner/pi-coding-agent";
import {
  connectSidecar,
  ErrorCodes,
  isRpcError,
  SidecarExitedError,
  type ContextWindow,
  type SidecarClient,
} from "compaction-sidecar-client";
import { readFileSync } from "node:fs";
import { type Static, type TSchema, Type } from "typebox";
import { ENTRY_FIELD, isMirrored, messageId, toDaemon, toolResults, toolState, toPi, type WireMessage } from "./convert";

const RECORD = "compaction-sidecar";

interface Options {
  command: string;
  args: string[];
  config?: Record<string, unknown>;
  timeoutMs: number;
}

function envList(raw: string | undefined): string[] | undefined {
  if (!raw) return undefined;
  const t = raw.trim();
  if (t.startsWith("[")) return (JSON.parse(t) as unknown[]).map(String);
  return t.split(/\s+/);
}

/** Flags (`--sidecar-command` ...) win over the environment; defaults join the shared daemon. */
function options(pi: ExtensionAPI): Options {
  const flag = (n: string) => {
    const v = pi.getFlag(n);
    return typeof v === "string" && v !== "" ? v : undefined;
  };
  const command = flag("sidecar-command") ?? process.env.COMPACTION_SIDECAR_COMMAND ?? "compaction-sidecar";
  const args = envList(flag("sidecar-args") ?? process.env.COMPACTION_SIDECAR_ARGS) ?? ["connect"];
  const file = flag("sidecar-config") ?? process.env.COMPACTION_SIDECAR_CONFIG;
  const config = file ? (JSON.parse(readFileSync(file, "utf8")) as Record<string, unknown>) : undefined;
  const timeoutMs = Number(process.env.COMPACTION_SIDECAR_TIMEOUT_MS ?? 600_000);
  return { command, args, config, timeoutMs };
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer in ${ms} ms`)), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

/** What one daemon session holds of a pi branch: entry ids in order, and done tool calls. */
interface Held {
  sessionID: string;
  entries: string[];
  msgIds: Map<string, string>;
  /** callID -> [daemon message id, part id, done] */
  tools: Map<string, [string, string, boolean]>;
  /** The session's window kept assembled from `since` deltas: a step after the first gets
   * only what changed. */
  window?: ContextWindow;
}

export default function compactionSidecar(pi: ExtensionAPI): void {
  pi.registerFlag("sidecar-command", { description: "compaction-sidecar program (default compaction-sidecar)", type: "string" });
  pi.registerFlag("sidecar-args", { description: 'its arguments (default "connect"; JSON array or words)', type: "string" });
  pi.registerFlag("sidecar-config", { description: "a daemon config JSON file applied to this connection", type: "string" });

  let client: SidecarClient | undefined;
  let connecting: Promise<SidecarClient> | undefined;
  let failed = false; // logged since the last success
  let healthy = false; // the last daemon call succeeded
  let opts: Options | undefined;
  const modelsSent = new Set<string>();
  const held = new Map<string, Held>(); // by daemon session id
  let current: Held | undefined; // the daemon session of the branch last synced
  let piSessionOfCurrent: string | undefined;

  const log = (ctx: ExtensionContext | undefined, err: unknown) => {
    healthy = false;
    if (failed) return;
    failed = true;
    const msg = `compaction-sidecar: ${err instanceof Error ? err.message : String(err)}; pi uses its own messages until the daemon answers again`;
    if (ctx?.hasUI) ctx.ui.notify(msg, "warning");
    else process.stderr.write(msg + "\n");
  };

  const drop = () => {
    const c = client;
    client = undefined;
    connecting = undefined;
    held.clear();
    current = undefined;
    modelsSent.clear();
    if (c) void c.dispose().catch(() => undefined);
  };

  const connect = (): Promise<SidecarClient> => {
    if (client) return Promise.resolve(client);
    if (connecting) return connecting;
    opts ??= options(pi);
    const o = opts;
    const stderr: string[] = [];
    connecting = (async () => {
      const c = await connectSidecar({
        command: o.command,
        args: o.args,
        stderr: "ignore",
        onStderr: (line) => {
          stderr.push(line);
          if (stderr.length > 20) stderr.shift();
        },
        clientInfo: { name: "compaction-sidecar-pi", version: "0.1.0" },
        // The mirror never reads its own writes back: their replies are enough.
        capabilities: { echo: false },
      });
      try {
        if (o.config) await c.updateConfig(o.config);
        // Both pi and the daemon keep the open turn after a compaction made on a read.
        await c.updateConfig({ compaction: { keepOpenTurn: true } }).catch((err: unknown) => {
          if (!isRpcError(err)) throw err; // a daemon without the key: its default
        });
      } catch (err) {
        void c.dispose().catch(() => undefined);
        throw err;
      }
      client = c;
      void c.onClosed.then(() => {
        if (client === c) drop();
      });
      return c;
    })();
    connecting.catch(() => (connecting = undefined));
    return connecting;
  };

  /** pi's model limits, so the daemon judges overflow by the window pi itself uses. */
  const sendModel = async (c: SidecarClient, ctx: ExtensionContext) => {
    const m = ctx.model;
    if (!m) return;
    const key = `${m.provider}/${m.id}`;
    if (modelsSent.has(key)) return;
    await c.updateConfig({ models: { [key]: { context: m.contextWindow, output: m.maxTokens } } });
    modelsSent.add(key);
  };

  const load = async (c: SidecarClient, sessionID: string): Promise<Held> => {
    const h: Held = { sessionID, entries: [], msgIds: new Map(), tools: new Map() };
    let cursor: string | undefined;
    do {
      const page = await c.messages(sessionID, cursor ? { cursor } : {});
      for (const m of page.messages as unknown as WireMessage[]) {
        const entryId = m.info[ENTRY_FIELD];
        if (!entryId) continue;
        h.entries.push(entryId);
        h.msgIds.set(entryId, m.info.id);
        for (const p of m.parts) {
          if (p.type !== "tool") continue;
          const st = (p.state as { status?: string }).status;
          h.tools.set(String(p.callID), [m.info.id, p.id, st === "completed" || st === "error"]);
        }
      }
      cursor = page.nextCursor ?? undefined;
    } while (cursor);
    held.set(sessionID, h);
    return h;
  };

  const records = (path: SessionEntry[]) =>
    path.filter((e) => e.type === "custom" && e.customType === RECORD) as (SessionEntry & {
      data?: { sessionID?: string; piSession?: string };
    })[];

  /**
   * The daemon session for the current branch, holding exactly a prefix of its entries (forked
   * from the recorded one when the branch left it), and the branch synced into it.
   */
  const sync = async (c: SidecarClient, ctx: ExtensionContext): Promise<Held> => {
    const sm = ctx.sessionManager;
    const piSession = sm.getSessionId();
    const path = sm.getBranch();
    const mirrored = path.filter(isMirrored);
    const rec = records(path).at(-1)?.data;
    let sessionID = rec?.sessionID && rec.piSession === piSession ? rec.sessionID : undefined;
    const source = rec?.sessionID; // another pi session's (pi's /fork copied the record)
    if (!sessionID && !source) sessionID = `ses_pi_${piSession.replace(/-/g, "")}`;
    if (sessionID && current?.sessionID === sessionID && piSessionOfCurrent === piSession) {
      // fast path: the session synced last time
    } else if (sessionID) {
      let h = held.get(sessionID);
      if (!h) {
        try {
          h = await load(c, sessionID);
        } catch (err) {
          if (!isRpcError(err, ErrorCodes.UNKNOWN_SESSION)) throw err;
          await c.createSession({ id: sessionID, title: sm.getSessionName() ?? "pi", directory: sm.getCwd() });
          h = { sessionID, entries: [], msgIds: new Map(), tools: new Map() };
          held.set(sessionID, h);
        }
      }
      current = h;
    }
    if (!sessionID && source) {
      // pi's /fork or /clone: a new pi session whose path was copied with the record.
      current = held.get(source) ?? (await load(c, source));
    }
    piSessionOfCurrent = piSession;
    let h = current!;
    const ids = mirrored.map((e) => e.id);
    let k = 0;
    while (k < h.entries.length && k < ids.length && h.entries[k] === ids[k]) k++;
    if (k < h.entries.length || !sessionID) {
      // The branch left what the session holds (or belongs to another pi session): fork it
      // just before the first entry the branch does not share.
      const at = k < h.entries.length ? h.msgIds.get(h.entries[k]) : undefined;
      const fork = await c.fork(h.sessionID, at);
      h = await load(c, fork.id);
      current = h;
      pi.appendEntry(RECORD, { sessionID: fork.id, piSession });
      k = h.entries.length;
    }
    const results = toolResults(path);
    let parentID = "";
    const model = ctx.model ? { providerID: ctx.model.provider, modelID: ctx.model.id } : undefined;
    for (let i = 0; i < mirrored.length; i++) {
      const e = mirrored[i];
      const isUser = !(e.type === "message" && e.message.role === "assistant");
      if (i < k) {
        if (isUser) parentID = h.msgIds.get(e.id) ?? parentID;
        else if (e.type === "message" && e.message.role === "assistant") {
          // tool results that arrived after the step was mirrored
          for (const c2 of e.message.content) {
            if (c2.type !== "toolCall") continue;
            const t = h.tools.get(c2.id);
            const r = results.get(c2.id);
            if (!t || t[2] || !r) continue;
            await c.updatePart({
              id: t[1],
              sessionID: h.sessionID,
              messageID: t[0],
              type: "tool",
              callID: c2.id,
              tool: c2.name,
              state: toolState(c2.arguments ?? {}, e.message.timestamp, r.msg),
            } as never);
            t[2] = true;
          }
        }
        continue;
      }
      const w = toDaemon(e, { sessionID: h.sessionID, piSession, parentID, model, cwd: sm.getCwd(), results });
      await c.updateMessage(w.message as never);
      for (const p of w.parts) await c.updatePart(p as never);
      const id = w.message.id as string;
      h.entries.push(e.id);
      h.msgIds.set(e.id, id);
      for (const p of w.parts) {
        if (p.type !== "tool") continue;
        const st = (p.state as { status: string }).status;
        h.tools.set(String(p.callID), [id, String(p.id), st !== "running"]);
      }
      if (isUser) parentID = id;
    }
    return h;
  };

  /** Resolves once pi has stored the newest message it is about to send (bounded). */
  const persisted = async (ctx: ExtensionContext, messages: AgentMessage[]): Promise<boolean> => {
    const last = messages.at(-1) as (AgentMessage & { content?: unknown; timestamp?: number }) | undefined;
    if (!last || !["user", "assistant", "toolResult", "custom", "bashExecution"].includes(last.role)) return true;
    // content and, for pi's own messages, the creation time: a prompt repeated word for word
    // is another message
    const want = JSON.stringify(last.content ?? null);
    const until = Date.now() + 5000;
    for (let i = 0; Date.now() < until; i++) {
      const leafPath = ctx.sessionManager.getBranch();
      for (let j = leafPath.length - 1; j >= 0 && j >= leafPath.length - 8; j--) {
        const e = leafPath[j];
        const m =
          e.type === "message"
            ? (e.message as AgentMessage & { content?: unknown; timestamp?: number })
            : e.type === "custom_message"
              ? { role: "custom", content: e.content, timestamp: undefined }
              : undefined;
        const sameTime = e.type !== "message" || m?.timestamp === last.timestamp;
        if (m && m.role === last.role && sameTime && JSON.stringify(m.content ?? null) === want) return true;
      }
      // pi stores messages from its own event queue, a few ticks behind the agent loop
      await new Promise((r) => (i < 100 ? setImmediate(r) : setTimeout(r, 5)));
    }
    return false;
  };

  /**
   * `fn` on the daemon. A connection made before this call can have ended without the
   * extension knowing yet (the daemon stopped between two events, and `connect` exits only
   * once it notices): what that connection took unanswered goes once more, on a new one.
   */
  const withClient = async <T>(what: string, fn: (c: SidecarClient) => Promise<T>): Promise<T> => {
    opts ??= options(pi);
    for (let attempt = 0; ; attempt++) {
      const reused = client !== undefined;
      try {
        const c = await withTimeout(connect(), opts.timeoutMs, "connect");
        return await withTimeout(fn(c), opts.timeoutMs, what);
      } catch (err) {
        if (!(reused && attempt === 0 && err instanceof SidecarExitedError)) throw err;
        drop();
      }
    }
  };

  const guard = async <T>(ctx: ExtensionContext, what: string, fn: (c: SidecarClient) => Promise<T>): Promise<T | undefined> => {
    try {
      const out = await withClient(what, fn);
      healthy = true;
      failed = false;
      return out;
    } catch (err) {
      log(ctx, err);
      drop();
      return undefined;
    }
  };

  pi.on("context", async (event, ctx) => {
    return guard(ctx, "session/context", async (c) => {
      if (!(await persisted(ctx, event.messages))) throw new Error("pi has not stored the newest message yet");
      await sendModel(c, ctx);
      const h = await sync(c, ctx);
      h.window ??= c.window(h.sessionID, "parts");
      const win = await h.window.refresh();
      const path = ctx.sessionManager.getBranch();
      const messages = toPi(
        // Copies: pi's messages may share objects with them (a tool call's arguments), and the
        // window kept for the next step's `since` must stay as the daemon served it.
        structuredClone(win.messages) as WireMessage[],
        new Set(win.truncatedPartIDs ?? []),
        (id) => ctx.sessionManager.getEntry(id),
        toolResults(path),
      );
      if (messages.length === 0) throw new Error("the daemon's window is empty");
      return { messages };
    });
  });

  pi.on("agent_end", async (_event, ctx) => {
    await guard(ctx, "session/idle", async (c) => {
      const h = await sync(c, ctx);
      const piSession = ctx.sessionManager.getSessionId();
      const rec = records(ctx.sessionManager.getBranch()).at(-1)?.data;
      if (rec?.sessionID !== h.sessionID || rec?.piSession !== piSession) {
        // The branch's binding, for a restart and for pi's /fork (which copies the path).
        pi.appendEntry(RECORD, { sessionID: h.sessionID, piSession });
      }
      await c.idle(h.sessionID);
    });
  });

  pi.on("session_before_compact", async (_event, ctx) => {
    // The daemon compacts; pi's own compaction would only duplicate it (and its summary would
    // not reach the daemon's window). Only while the daemon cannot be reached, pi keeps its own.
    // (A new pi session, e.g. after /fork, may compact before its first model call: the
    // branch is mirrored here first.)
    const ok = healthy || (await guard(ctx, "sync", async (c) => (await sync(c, ctx), true)));
    return ok ? { cancel: true } : undefined;
  });

  pi.on("session_shutdown", async () => {
    drop();
  });

  const text = (t: string) => ({ content: [{ type: "text" as const, text: t }], details: {} });
  /** A recall tool on the current branch's session: `run` answers with the text the model reads. */
  const sessionTool = <P extends TSchema>(
    tool: { name: string; label: string; description: string; parameters: P },
    run: (c: SidecarClient, sessionID: string, params: Static<P>) => Promise<string>,
  ) =>
    pi.registerTool({
      ...tool,
      async execute(_id, params, _signal, _onUpdate, ctx) {
        return text(await withClient(tool.name, async (c) => run(c, (await sync(c, ctx)).sessionID, params)));
      },
    });
  /** The stored message a history_search hit names, and optionally one part of it. */
  const messageRef = (partDescription: string) => ({
    messageID: Type.String({ description: "From a history_search hit." }),
    partID: Type.Optional(Type.String({ description: partDescription })),
  });

  // pi's /compact is pi's own compaction (cancelled while the daemon answers); this one is the
  // daemon's, on the current branch's session.
  pi.registerCommand("sidecar-compact", {
    description: "Compact now through the compaction-sidecar daemon (optional instructions for the summary)",
    handler: async (args, ctx) => {
      await ctx.waitForIdle();
      const out = await guard(ctx, "session/compact", async (c) => {
        const h = await sync(c, ctx);
        const model = ctx.model ? { providerID: ctx.model.provider, modelID: ctx.model.id } : undefined;
        return c.compact(h.sessionID, { auto: false, model, instructions: args.trim() || undefined });
      });
      if (!out) return;
      const msg = out.error ? `compaction-sidecar: not compacted: ${out.error}` : "compaction-sidecar: compacted";
      if (ctx.hasUI) ctx.ui.notify(msg, out.error ? "warning" : "info");
      else process.stderr.write(msg + "\n");
    },
  });

  sessionTool(
    {
      name: "history_search",
      label: "History search",
      description:
        "Search this session's full stored history, including tool outputs and messages that compaction removed from the context. Returns hits with messageID/partID, role, tool, time and a snippet; read one whole with history_expand.",
      parameters: Type.Object({
        query: Type.String({ description: 'Words, code terms or a "quoted phrase" to look for.' }),
        limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 50, description: "How many hits to return (default 10)." })),
      }),
    },
    async (c, sessionID, params) => {
      const r = await c.searchHistory(sessionID, params.query, { limit: params.limit ?? 10 });
      if (r.hits.length === 0) return "No matches.";
      const lines = r.hits.map(
        (h) => `- messageID=${h.messageID} partID=${h.partID} ${h.role}${h.tool ? ` tool=${h.tool}` : ""} time=${new Date(h.time).toISOString()}\n  ${h.snippet.replace(/\n/g, " ")}`,
      );
      return lines.join("\n");
    },
  );

  sessionTool(
    {
      name: "history_expand",
      label: "History expand",
      description:
        "Read a stored message or one part in full (original content, even if it was pruned or summarized away), a page at a time; continue with offset=nextOffset.",
      parameters: Type.Object({
        ...messageRef("One part of the message; omit for the whole message."),
        offset: Type.Optional(Type.Integer({ minimum: 0, description: "Character offset to start at (a previous nextOffset)." })),
      }),
    },
    async (c, sessionID, params) => {
      const r = await c.expandHistory(sessionID, params.messageID, { partID: params.partID, offset: params.offset ?? 0 });
      const more = r.nextOffset !== null ? `\n[${r.total - r.nextOffset} more characters: offset=${r.nextOffset}]` : "";
      return r.content + more;
    },
  );

  sessionTool(
    {
      name: "history_pin",
      label: "Pin",
      description:
        "Pin a stored part (or a whole message) so compaction never prunes it and every summary keeps it verbatim; pinned=false unpins. Ids come from history_search.",
      parameters: Type.Object({
        ...messageRef("The part; omit for every part of the message."),
        pinned: Type.Optional(Type.Boolean({ description: "false to unpin (default true)." })),
      }),
    },
    async (c, sessionID, params) => {
      await c.pin(sessionID, params.messageID, params.partID, params.pinned ?? true);
      return params.pinned === false ? "Unpinned." : "Pinned: kept verbatim across compactions.";
    },
  );
}

export { messageId };
