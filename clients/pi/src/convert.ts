/**
 * pi session entries <-> the daemon's messages and parts, without I/O.
 *
 * Every daemon id is made from a pi entry id (never from a message's position in pi's context),
 * so the same entry always lands on the same stored message, and `/tree` navigation and forks
 * are recognised by comparing entry ids. A tool result is its own pi message; in the daemon
 * (OpenCode's model) it is the `output` of the assistant's tool part, so a toolResult entry
 * updates that part instead of becoming a message.
 */
import type { AgentMessage } from "@mariozechner/pi-agent-core";
import type { AssistantMessage, ToolResultMessage } from "@mariozechner/pi-ai";
import type { SessionEntry } from "@mariozechner/pi-coding-agent";

/** The unknown field, stored and echoed by the daemon, that names a message's pi entry. */
export const ENTRY_FIELD = "piEntryID";

// pi's own wrapping of summaries in the model's context (messages.d.ts); used for the
// messages this package has to write as text.
const BRANCH_SUMMARY_PREFIX =
  "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n";
const BRANCH_SUMMARY_SUFFIX = "</summary>";

type Json = Record<string, unknown>;

/** A daemon message with its parts as `session/context {format: "parts"}` returns them. */
export interface WireMessage {
  info: Json & { id: string; role: string; [ENTRY_FIELD]?: string };
  parts: (Json & { id: string; type: string })[];
}

/** An entry that becomes a daemon message (toolResult entries update a part instead). */
export function isMirrored(entry: SessionEntry): boolean {
  if (entry.type === "custom_message" || entry.type === "branch_summary") return true;
  if (entry.type !== "message") return false;
  const m = entry.message as AgentMessage & { excludeFromContext?: boolean };
  if (m.role === "bashExecution") return !m.excludeFromContext;
  return m.role === "user" || m.role === "assistant" || m.role === "custom";
}

/** The toolResult messages on a path, by tool call id. */
export function toolResults(path: SessionEntry[]): Map<string, { entry: SessionEntry; msg: ToolResultMessage }> {
  const out = new Map<string, { entry: SessionEntry; msg: ToolResultMessage }>();
  for (const e of path) {
    if (e.type === "message" && e.message.role === "toolResult") {
      out.set(e.message.toolCallId, { entry: e, msg: e.message });
    }
  }
  return out;
}

/** Short, unique within the daemon: the pi session id (dashes dropped) and the entry id. */
export function messageId(piSession: string, entryId: string): string {
  return `msg_pi_${piSession.replace(/-/g, "")}_${entryId}`;
}

/** Part ids sort in content order within their message (the daemon orders parts by id). */
export function partId(msgId: string, index: number): string {
  return `prt${msgId.slice(3)}_${String(index).padStart(4, "0")}`;
}

function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .map((c: Json) => (c.type === "text" ? String(c.text ?? "") : c.type === "image" ? `[image ${String(c.mimeType ?? "")}]` : ""))
    .filter((s) => s !== "")
    .join("\n");
}

/** What pi sends the model for a user-side entry, as text (pi's own rendering). */
export function userText(entry: SessionEntry): string {
  if (entry.type === "custom_message") return textOf(entry.content);
  if (entry.type === "branch_summary") return BRANCH_SUMMARY_PREFIX + entry.summary + BRANCH_SUMMARY_SUFFIX;
  if (entry.type !== "message") return "";
  const m = entry.message as AgentMessage & Json;
  if (m.role === "bashExecution") {
    let text = `Ran \`${String(m.command)}\`\n`;
    text += m.output ? "```\n" + String(m.output) + "\n```" : "(no output)";
    if (m.cancelled) text += "\n\n(command cancelled)";
    else if (m.exitCode !== null && m.exitCode !== undefined && m.exitCode !== 0) text += `\n\nCommand exited with code ${String(m.exitCode)}`;
    return text;
  }
  return textOf(m.content);
}

const FINISH: Record<string, string> = {
  stop: "stop",
  toolUse: "tool-calls",
  length: "length",
  error: "error",
  aborted: "aborted",
};

export interface Written {
  message: Json;
  parts: Json[];
}

/**
 * The daemon message and parts for one mirrored entry. `parentID` is the daemon id of the user
 * message the assistant answers; tool parts are completed from `results` when pi already has
 * the result, else `running` (a later sync completes them).
 */
export function toDaemon(
  entry: SessionEntry,
  ctx: {
    sessionID: string;
    piSession: string;
    parentID: string;
    model?: { providerID: string; modelID: string };
    cwd: string;
    results: Map<string, { entry: SessionEntry; msg: ToolResultMessage }>;
  },
): Written {
  const id = messageId(ctx.piSession, entry.id);
  const base = { id, sessionID: ctx.sessionID, [ENTRY_FIELD]: entry.id };
  if (entry.type === "message" && entry.message.role === "assistant") {
    const m = entry.message as AssistantMessage;
    const message: Json = {
      ...base,
      role: "assistant",
      parentID: ctx.parentID,
      providerID: m.provider,
      modelID: m.model,
      mode: "build",
      agent: "build",
      path: { cwd: ctx.cwd, root: ctx.cwd },
      cost: m.usage?.cost?.total ?? 0,
      tokens: {
        input: m.usage?.input ?? 0,
        output: m.usage?.output ?? 0,
        reasoning: 0,
        cache: { read: m.usage?.cacheRead ?? 0, write: m.usage?.cacheWrite ?? 0 },
      },
      finish: FINISH[m.stopReason] ?? "unknown",
      time: { created: 0, completed: m.timestamp },
    };
    if (m.stopReason === "error" || m.stopReason === "aborted") {
      message.error = {
        name: m.stopReason === "aborted" ? "MessageAbortedError" : "UnknownError",
        data: { message: m.errorMessage ?? m.stopReason },
      };
    }
    const parts: Json[] = [];
    m.content.forEach((c, i) => {
      const pid = partId(id, i);
      const common = { id: pid, sessionID: ctx.sessionID, messageID: id };
      if (c.type === "text") parts.push({ ...common, type: "text", text: c.text });
      else if (c.type === "thinking") parts.push({ ...common, type: "reasoning", text: c.thinking });
      else if (c.type === "toolCall") {
        const done = ctx.results.get(c.id);
        parts.push({
          ...common,
          type: "tool",
          callID: c.id,
          tool: c.name,
          state: toolState(c.arguments ?? {}, m.timestamp, done?.msg),
        });
      }
    });
    return { message, parts };
  }
  const message: Json = { ...base, role: "user", time: { created: 0 }, agent: "build" };
  if (ctx.model) message.model = ctx.model;
  const parts: Json[] = [{ id: partId(id, 0), sessionID: ctx.sessionID, messageID: id, type: "text", text: userText(entry) }];
  return { message, parts };
}

/** A tool part's state: completed/error once pi has the result, running before. */
export function toolState(input: Json, start: number, result?: ToolResultMessage): Json {
  if (!result) return { status: "running", input, time: { start } };
  const output = textOf(result.content);
  if (result.isError) return { status: "error", input, error: output, time: { start, end: result.timestamp } };
  return {
    status: "completed",
    input,
    output,
    title: result.toolName,
    metadata: {},
    time: { start, end: result.timestamp },
  };
}

/**
 * The daemon's window as pi messages. A message pi wrote is given back as pi's own (images,
 * usage and signatures intact) unless the daemon changed what the model sees: a pruned or cut
 * tool output goes out as the daemon's text (its stub). The daemon's summary becomes pi's
 * compaction-summary message; its marker is dropped; anything else it made is a user text.
 */
export function toPi(
  window: WireMessage[],
  truncated: Set<string>,
  entryOf: (id: string) => SessionEntry | undefined,
  results: Map<string, { entry: SessionEntry; msg: ToolResultMessage }>,
): AgentMessage[] {
  const out: AgentMessage[] = [];
  for (const { info, parts } of window) {
    const created = Number((info.time as Json | undefined)?.created ?? Date.now());
    if (info.role === "assistant" && info.summary === true) {
      const summary = parts.filter((p) => p.type === "text").map((p) => String(p.text ?? "")).join("\n");
      out.push({ role: "compactionSummary", summary, tokensBefore: 0, timestamp: created } as AgentMessage);
      continue;
    }
    if (parts.some((p) => p.type === "compaction")) continue; // the marker: the summary stands for it
    const entryId = info[ENTRY_FIELD];
    const entry = entryId ? entryOf(entryId) : undefined;
    if (info.role === "user") {
      const cut = parts.some((p) => truncated.has(p.id));
      if (entry && !cut && entry.type === "message") out.push(entry.message);
      else if (entry && !cut && entry.type === "custom_message") {
        out.push({
          role: "custom",
          customType: entry.customType,
          content: entry.content,
          display: entry.display,
          details: entry.details,
          timestamp: new Date(entry.timestamp).getTime(),
        } as AgentMessage);
      } else {
        const text = parts.filter((p) => p.type === "text" && p.ignored !== true).map((p) => String(p.text ?? "")).join("\n");
        if (text !== "") out.push({ role: "user", content: [{ type: "text", text }], timestamp: created });
      }
      continue;
    }
    // An assistant step: pi's own message when the daemon has every part pi wrote, else rebuilt.
    const original = entry?.type === "message" && entry.message.role === "assistant" ? (entry.message as AssistantMessage) : undefined;
    const assistant: AssistantMessage = original
      ? { ...original }
      : ({
          role: "assistant",
          content: [],
          api: "openai-completions",
          provider: String(info.providerID ?? ""),
          model: String(info.modelID ?? ""),
          usage: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, totalTokens: 0, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } },
          stopReason: "stop",
          timestamp: created,
        } as AssistantMessage);
    const same = original !== undefined && parts.length === original.content.length && !parts.some((p) => truncated.has(p.id) && p.type !== "tool");
    if (!same) {
      assistant.content = [];
      for (const p of parts) {
        if (p.type === "text") assistant.content.push({ type: "text", text: String(p.text ?? "") });
        else if (p.type === "reasoning") assistant.content.push({ type: "thinking", thinking: String(p.text ?? "") });
        else if (p.type === "tool") {
          const st = p.state as Json;
          assistant.content.push({ type: "toolCall", id: String(p.callID), name: String(p.tool), arguments: (st.input as Json) ?? {} });
        }
      }
      if (assistant.content.length === 0) continue;
    }
    out.push(assistant);
    for (const p of parts) {
      if (p.type !== "tool") continue;
      const st = p.state as Json;
      const callID = String(p.callID);
      const mine = results.get(callID)?.msg;
      const changed = truncated.has(p.id) || (st.time as Json | undefined)?.compacted !== undefined;
      if (mine && !changed) {
        out.push(mine);
        continue;
      }
      const text = st.status === "completed" ? String(st.output ?? "") : st.status === "error" ? String(st.error ?? "") : "";
      if (!mine && st.status !== "completed" && st.status !== "error") {
        // No result anywhere (an interrupted step): the model still needs one for its call.
        out.push({ role: "toolResult", toolCallId: callID, toolName: String(p.tool), content: [{ type: "text", text: "[no result: the call was interrupted]" }], isError: true, timestamp: created } as ToolResultMessage);
        continue;
      }
      out.push({
        role: "toolResult",
        toolCallId: callID,
        toolName: String(p.tool),
        content: [{ type: "text", text }],
        details: mine?.details,
        isError: st.status === "error",
        timestamp: mine?.timestamp ?? created,
      } as ToolResultMessage);
    }
  }
  return out;
}
