/**
 * Recall and pin as OpenCode tools, bound to the session the model is working in: what
 * compaction took out of the window stays in the daemon's store, and the model can find it
 * (`history_search`), read it back whole (`history_expand`) and keep a part (`history_pin`).
 *
 * `args` are plain JSON Schema properties (OpenCode 1.18 accepts them beside Zod shapes), so
 * the plugin needs nothing installed at run time. OpenCode marks every such property required.
 */
import type { SidecarClient } from "compaction-sidecar-client";
import type { Bridge } from "./bridge.js";

type Ctx = { sessionID: string };
type Tool = {
  description: string;
  args: Record<string, unknown>;
  execute(args: Record<string, unknown>, ctx: Ctx): Promise<string>;
};

const UNAVAILABLE = "The compaction-sidecar daemon is not reachable; no history is available.";

function text(value: unknown): string {
  return typeof value === "string" ? value : "";
}

/** Runs `run` with the daemon's client: a notice when the daemon is unreachable, an `error:`
 * line instead of a throw, so the model always gets text back. */
async function withClient(bridge: Bridge, run: (client: SidecarClient) => Promise<string>): Promise<string> {
  try {
    const client = await bridge.client();
    if (!client) return UNAVAILABLE;
    return await run(client);
  } catch (err) {
    return `error: ${err instanceof Error ? err.message : String(err)}`;
  }
}

export function recallTools(bridge: Bridge): Record<string, Tool> {
  return {
    history_search: {
      description:
        "Search this session's full history, including what compaction removed from the " +
        "context (old tool outputs, earlier messages). Every term must match. Returns hits as " +
        "`messageID partID role tool: snippet`; read one in full with history_expand.",
      args: {
        query: { type: "string", description: "words, identifiers, paths or a quoted phrase" },
      },
      execute: (args, ctx) =>
        withClient(bridge, async (client) => {
          const { hits } = await client.searchHistory(ctx.sessionID, text(args.query), {
            limit: 10,
          });
          if (hits.length === 0) return "No match in this session's history.";
          return hits
            .map((h) => `${h.messageID} ${h.partID} ${h.role}${h.tool ? ` ${h.tool}` : ""}: ${h.snippet}`)
            .join("\n");
        }),
    },
    history_expand: {
      description:
        "Read a message or one of its parts from this session's history in full (a pruned " +
        "tool output included), as found by history_search. partID may be empty for the " +
        "whole message; offset pages through long content (0 for the start).",
      args: {
        messageID: { type: "string", description: "the hit's messageID" },
        partID: { type: "string", description: "the hit's partID, or empty for every part" },
        offset: { type: "number", description: "character offset to start from (0)" },
      },
      execute: (args, ctx) =>
        withClient(bridge, async (client) => {
          const partID = text(args.partID) || undefined;
          const offset = typeof args.offset === "number" && args.offset > 0 ? args.offset : 0;
          const out = await client.expandHistory(ctx.sessionID, text(args.messageID), {
            partID,
            offset,
          });
          const more =
            out.nextOffset === null || out.nextOffset === undefined
              ? ""
              : `\n[${out.total - out.nextOffset} more characters: offset ${out.nextOffset}]`;
          return out.content + more;
        }),
    },
    history_pin: {
      description:
        "Pin a part of this session's history (or every part of a message when partID is " +
        "empty): it is never pruned and every later summary keeps it verbatim.",
      args: {
        messageID: { type: "string", description: "the message to pin" },
        partID: { type: "string", description: "the part to pin, or empty for the whole message" },
      },
      execute: (args, ctx) =>
        withClient(bridge, async (client) => {
          const partID = text(args.partID) || undefined;
          await client.pin(ctx.sessionID, text(args.messageID), partID);
          return `Pinned ${partID ?? `every part of ${text(args.messageID)}`}.`;
        }),
    },
  };
}
