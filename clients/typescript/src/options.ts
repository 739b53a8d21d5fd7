/** How a client is started: the options of `spawnSidecar` and `connectSidecar`. */
import type { ChildProcess } from "node:child_process";
import type { ClientCapabilities, ClientInfo } from "./protocol";

/** What every way of starting a client shares. */
export interface ClientOptions {
  /** Declared in `initialize`; a daemon sends its requests only to clients that declared them. */
  capabilities?: ClientCapabilities;
  /** A partial config (PROTOCOL.md, "Configuration and isolation"), e.g. `{models: {"p/m": {context, output}}}`. */
  initializationOptions?: Record<string, unknown>;
  clientInfo?: ClientInfo;
  /**
   * Milliseconds the daemon has to answer `initialize` (default 30000); then the start rejects
   * with `SidecarTimeoutError` and a spawned program is killed.
   */
  startTimeout?: number;
}

/** Running a program whose stdio speaks the protocol: `serve`, or the `connect` bridge. */
export interface ProgramOptions {
  /** The program to run (default `compaction-sidecar`). */
  command?: string;
  args?: string[];
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /**
   * Where the daemon's stderr goes besides `onStderr`: `"inherit"` (default) copies it to this
   * process's; `"ignore"` (or `"pipe"`: read `client.process.stderr`) does not. Its last lines
   * are always kept for the error an early exit rejects with.
   */
  stderr?: "inherit" | "ignore" | "pipe";
  /** Each line the program writes to stderr (an editor's output channel). */
  onStderr?: (line: string) => void;
  /** Called with each process started (again after a reconnect). */
  onSpawn?: (child: ChildProcess) => void;
}

export interface SpawnOptions extends ClientOptions, ProgramOptions {
  /** Arguments (default `["serve"]`); `--db DB` is appended when `db` is given. */
  args?: string[];
  /** SQLite file (or `postgresql://` URL) for `--db`. */
  db?: string;
}

export interface ReconnectOptions {
  /** Milliseconds to keep trying before giving up and closing (default 60000). */
  timeout?: number;
  /** Milliseconds before the first attempt; doubled after each failure up to 2 s (default 250). */
  delay?: number;
}

/**
 * The shared daemon: by default through `compaction-sidecar connect` (which starts it when none
 * runs; `command`/`args` change the program, e.g. `python -m sidecar connect`), or directly on
 * a unix socket or loopback TCP.
 */
export type ConnectOptions = ClientOptions & {
  /**
   * After the daemon goes away (restart, crash, idle exit), connect again, re-`initialize` and
   * re-subscribe to the sessions this client followed. Requests made meanwhile wait for it;
   * requests that were in flight reject (the daemon may or may not have applied them).
   */
  reconnect?: boolean | ReconnectOptions;
} & (ProgramOptions | { socket: string } | { host: string; port: number; authToken?: string });
