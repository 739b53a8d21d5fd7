/** A session's window kept assembled from `session/context` deltas (`since`). */
import type { ParamsOf } from "./methods";
import type { ContextResult } from "./protocol";

type ContextFormat = ContextResult["format"];

/** What a window needs of a client: its `context` read. */
export interface ContextReader {
  context(
    sessionID: string,
    format: ContextFormat,
    options: Omit<ParamsOf<"session/context">, "sessionID" | "format">,
  ): Promise<ContextResult>;
}

/**
 * One session's window in one format, kept assembled: each `refresh` asks `session/context` with
 * `since` the last `revision` and applies a delta reply (keep the first `start` messages, append
 * the rest), so only what changed crosses the wire.
 */
export class ContextWindow {
  /** The whole window, as the last `refresh` assembled it. */
  messages: ContextResult["messages"] = [];
  /** The last reply's `revision`: what the next `refresh` asks changes since. */
  revision: string | undefined;

  constructor(
    readonly client: ContextReader,
    readonly sessionID: string,
    readonly format: ContextFormat = "parts",
  ) {}

  /** The current window; the returned result's `messages` is the whole window. */
  async refresh(
    options: Omit<ParamsOf<"session/context">, "sessionID" | "format" | "since"> = {},
  ): Promise<ContextResult> {
    // The window `since` names: a refresh that lands meanwhile must not become its base.
    const since = this.revision;
    const base = this.messages;
    const result = await this.client.context(this.sessionID, this.format, { ...options, since });
    this.messages = result.delta
      ? [...base.slice(0, result.start ?? 0), ...result.messages]
      : [...result.messages];
    this.revision = result.revision || undefined;
    return { ...result, messages: this.messages };
  }
}
