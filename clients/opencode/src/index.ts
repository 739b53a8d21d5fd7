/**
 * compaction-sidecar-opencode: an OpenCode plugin that hands the context window to the
 * compaction-sidecar daemon.
 *
 * OpenCode keeps its own history; this plugin mirrors it into the daemon (the `event` hook),
 * turns OpenCode's automatic compaction and prune off (`config`), and right before every model
 * step replaces what OpenCode is about to send with the daemon's window for that session
 * (`experimental.chat.messages.transform`). The daemon's compaction config (zero-wait
 * `prepare`, `method: "collapse"`, pins, overrides, its summarizer) applies unchanged.
 *
 * Only the module's default export is a plugin: OpenCode calls every exported function.
 */
import type { Hooks, Plugin, PluginInput, PluginOptions } from "@opencode-ai/plugin";
import { Bridge, type Logger, type WireMessage } from "./bridge.js";
import { resolveSettings, type Settings } from "./settings.js";
import { recallTools } from "./tools.js";

const SERVICE = "compaction-sidecar";

function makeLogger(input: PluginInput): Logger {
  return (level, message) => {
    // OpenCode's own log (`service=compaction-sidecar`); never let logging fail a hook.
    try {
      void Promise.resolve(
        input.client.app.log({ body: { service: SERVICE, level, message } }),
      ).catch(() => undefined);
    } catch {
      // the SDK client is unavailable: nothing else to tell
    }
  };
}

const CompactionSidecar: Plugin = async (input: PluginInput, options?: PluginOptions) => {
  const log = makeLogger(input);
  let settings: Settings;
  try {
    settings = resolveSettings(options ?? {}, process.env);
  } catch (err) {
    // Misconfigured: OpenCode goes on exactly as without the plugin (its own compaction on).
    log("error", `not loaded: ${err instanceof Error ? err.message : String(err)}`);
    return {};
  }
  const bridge = new Bridge(settings, log);
  const hooks: Hooks = {
    config: async (config) => bridge.configure(config as Record<string, unknown>),
    event: async ({ event }) => bridge.onEvent(event as { type: string; properties?: unknown }),
    "experimental.session.compacting": async ({ sessionID }) => bridge.onCompacting(sessionID),
    "experimental.chat.messages.transform": async (_input, output) =>
      bridge.transform(output as { messages: WireMessage[] }),
    tool: recallTools(bridge) as Hooks["tool"],
    dispose: async () => bridge.dispose(),
  };
  return hooks;
};

export default CompactionSidecar;
