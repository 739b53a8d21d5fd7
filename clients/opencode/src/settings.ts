/**
 * Where the daemon comes from: plugin options first, then environment variables, then the
 * default (`compaction-sidecar connect`, the shared daemon, started when none runs).
 */

export interface Settings {
  /** The program (`command`, `$COMPACTION_SIDECAR_COMMAND`; default `compaction-sidecar`). */
  command: string;
  /** Its arguments (`args`, `$COMPACTION_SIDECAR_ARGS` as a JSON array; default `["connect"]`). */
  args: string[];
  /** A daemon config file, passed as `--config PATH` (`config`, `$COMPACTION_SIDECAR_CONFIG`). */
  config?: string;
  /** Milliseconds the daemon has to answer `initialize` (`startTimeout`; default 30000). */
  startTimeout: number;
}

export class SettingsError extends Error {}

function stringList(value: unknown, name: string): string[] {
  if (!Array.isArray(value) || !value.every((v) => typeof v === "string")) {
    throw new SettingsError(`${name} must be an array of strings`);
  }
  return value;
}

function envList(raw: string): string[] {
  const text = raw.trim();
  if (text.startsWith("[")) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new SettingsError("COMPACTION_SIDECAR_ARGS is not a JSON array of strings");
    }
    return stringList(parsed, "COMPACTION_SIDECAR_ARGS");
  }
  return text.split(/\s+/).filter(Boolean);
}

export function resolveSettings(
  options: Record<string, unknown>,
  env: Record<string, string | undefined>,
): Settings {
  const command = options.command ?? env.COMPACTION_SIDECAR_COMMAND ?? "compaction-sidecar";
  if (typeof command !== "string" || !command) {
    throw new SettingsError("command must be a non-empty string");
  }
  let args: string[] = ["connect"];
  if (options.args !== undefined) args = stringList(options.args, "args");
  else if (env.COMPACTION_SIDECAR_ARGS) args = envList(env.COMPACTION_SIDECAR_ARGS);
  const config = options.config ?? env.COMPACTION_SIDECAR_CONFIG;
  if (config !== undefined && typeof config !== "string") {
    throw new SettingsError("config must be a path (string)");
  }
  const startTimeout = options.startTimeout ?? 30_000;
  if (typeof startTimeout !== "number" || !(startTimeout > 0)) {
    throw new SettingsError("startTimeout must be a positive number of milliseconds");
  }
  return { command, args, config: config || undefined, startTimeout };
}

/** The program's full argument list: `args`, then `--config PATH` when a config file is set. */
export function programArgs(settings: Settings): string[] {
  return settings.config ? [...settings.args, "--config", settings.config] : [...settings.args];
}
