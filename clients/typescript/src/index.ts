/**
 * Typed client for the compaction-sidecar daemon, on vscode-jsonrpc.
 *
 * `spawnSidecar()` starts a private daemon on stdio; `connectSidecar()` joins a shared one on a
 * unix socket or loopback TCP. Both resolve once the `initialize`/`initialized` handshake is
 * done. Method names, params and results come from ./protocol.ts, which is generated from the
 * daemon's JSON Schema, so a method the daemon does not have, or wrong params, fail to compile.
 */
import { spawn, type ChildProcess } from "node:child_process";
import * as net from "node:net";
import {
  CancellationToken,
  createMessageConnection,
  Disposable,
  ResponseError,
  StreamMessageReader,
  StreamMessageWriter,
  type MessageConnection,
} from "vscode-jsonrpc/node";
import type {
  ClientCapabilities,
  ClientInfo,
  CompactionRecord,
  CompactResult,
  Config,
  ContextResult,
  InitializeParams,
  InitializeResult,
  Message,
  MessagesPage,
  OverflowResult,
  Part,
  Pin,
  Protocol,
  PruneResult,
  Session,
  SessionCompactParams,
  SessionCreateParams,
  SessionList,
  SessionListParams,
} from "./protocol";

export * from "./protocol";
export { CancellationToken, CancellationTokenSource, ResponseError } from "vscode-jsonrpc/node";

type Requests = Protocol["requests"];
type Notifications = Protocol["notifications"];

/** Requests a client sends (`session/create`, ...). */
export type ClientRequest = {
  [M in keyof Requests]: Requests[M]["direction"] extends "client->daemon" ? M : never;
}[keyof Requests];
/** Requests the daemon sends to a capable client: `compaction/compacting`, `summarizer/complete`. */
export type DaemonRequest = Exclude<keyof Requests, ClientRequest>;
/** Notifications the daemon sends (`session/compacted`, `message/updated`, ...). */
export type DaemonNotification = {
  [M in keyof Notifications]: Notifications[M]["direction"] extends "daemon->client" ? M : never;
}[keyof Notifications];
export type ParamsOf<M extends keyof Requests> = Requests[M]["params"];
export type ResultOf<M extends keyof Requests> = Requests[M]["result"];
export type NotificationParams<M extends keyof Notifications> = Notifications[M]["params"];
export type ContextFormat = ContextResult["format"];

/** What every way of starting a client shares. */
export interface ClientOptions {
  /** Declared in `initialize`; a daemon sends its requests only to clients that declared them. */
  capabilities?: ClientCapabilities;
  /** A partial config (PROTOCOL.md, "Configuration and isolation"), e.g. `{models: {"p/m": {context, output}}}`. */
  initializationOptions?: Record<string, unknown>;
  clientInfo?: ClientInfo;
}

export interface SpawnOptions extends ClientOptions {
  /** The program to run (default `compaction-sidecar`). */
  command?: string;
  /** Its arguments (default `["serve"]`); `--db DB` is appended when `db` is given. */
  args?: string[];
  /** SQLite file (or `postgresql://` URL) for `--db`. */
  db?: string;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Where the daemon's stderr goes (default `"inherit"`). */
  stderr?: "inherit" | "ignore" | "pipe";
}

export type ConnectOptions = ClientOptions &
  ({ socket: string } | { host: string; port: number; authToken?: string });

const CLIENT_INFO: ClientInfo = { name: "compaction-sidecar-client", version: "0.1.0" };

/** An initialized connection to one daemon. */
export class SidecarClient {
  /** What the daemon answered to `initialize`. */
  initializeResult!: InitializeResult;
  private closed = false;
  private readonly handlers = new Map<string, Set<(params: unknown) => void>>();
  private readonly closedPromise: Promise<void>;

  constructor(
    /** The underlying vscode-jsonrpc connection, for anything this class does not wrap. */
    readonly connection: MessageConnection,
    /** The daemon's process when this client spawned it. */
    readonly process?: ChildProcess,
    private readonly socket?: net.Socket,
  ) {
    this.closedPromise = new Promise<void>((resolve) => {
      connection.onClose(() => {
        this.closed = true;
        resolve();
      });
    });
  }

  /** Send a request; params and result are typed by the method name. */
  request<M extends ClientRequest>(
    method: M,
    params: ParamsOf<M>,
    token?: CancellationToken,
  ): Promise<ResultOf<M>> {
    return token === undefined
      ? this.connection.sendRequest(method, params)
      : this.connection.sendRequest(method, params, token);
  }

  /** Handle a daemon notification; `$/progress` included. */
  onNotification<M extends DaemonNotification>(
    method: M,
    handler: (params: NotificationParams<M>) => void,
  ): Disposable {
    if (method === "$/progress") {
      // vscode-jsonrpc routes $/progress to registered progress tokens; ours are not registered.
      return this.connection.onUnhandledProgress((p) =>
        handler(p as unknown as NotificationParams<M>),
      );
    }
    // vscode-jsonrpc keeps one handler per method: fan out to every one registered here.
    let handlers = this.handlers.get(method);
    if (handlers === undefined) {
      const set = new Set<(params: unknown) => void>();
      handlers = set;
      this.handlers.set(method, set);
      this.connection.onNotification(method, (params: unknown) => {
        for (const h of [...set]) h(params);
      });
    }
    const h = handler as (params: unknown) => void;
    handlers.add(h);
    return Disposable.create(() => handlers.delete(h));
  }

  /** The next notification of `method` whose params satisfy `predicate`. */
  waitFor<M extends DaemonNotification>(
    method: M,
    predicate: (params: NotificationParams<M>) => boolean = () => true,
  ): Promise<NotificationParams<M>> {
    return new Promise((resolve, reject) => {
      const sub = this.onNotification(method, (params) => {
        if (predicate(params)) {
          sub.dispose();
          closed.dispose();
          resolve(params);
        }
      });
      const closed = this.connection.onClose(() => {
        sub.dispose();
        reject(new Error(`connection closed while waiting for ${method}`));
      });
    });
  }

  /**
   * Answer the daemon's requests: `compaction/compacting` (declare `compactingHook`) and
   * `summarizer/complete` (declare `summarizer`, config `summarizer.provider: "client"`).
   */
  onRequest<M extends DaemonRequest>(
    method: M,
    handler: (
      params: ParamsOf<M>,
      token: CancellationToken,
    ) => ResultOf<M> | Promise<ResultOf<M>>,
  ): Disposable {
    return this.connection.onRequest(method, (params: ParamsOf<M>, token) =>
      handler(params, token),
    );
  }

  // -- convenience -----------------------------------------------------------------------------

  createSession(params: SessionCreateParams = {}): Promise<Session> {
    return this.request("session/create", params);
  }
  getSession(sessionID: string): Promise<Session> {
    return this.request("session/get", { sessionID });
  }
  listSessions(params: SessionListParams = {}): Promise<SessionList> {
    return this.request("session/list", params);
  }
  deleteSession(sessionID: string): Promise<null> {
    return this.request("session/delete", { sessionID });
  }
  messages(sessionID: string, page: { limit?: number; cursor?: string } = {}): Promise<MessagesPage> {
    return this.request("session/messages", { sessionID, ...page });
  }
  /** The filtered context window, ready to send to a model. */
  context(sessionID: string, format: ContextFormat = "parts"): Promise<ContextResult> {
    return this.request("session/context", { sessionID, format });
  }
  /** Resolves once the automatic work caused by earlier writes has finished. */
  idle(sessionID: string): Promise<null> {
    return this.request("session/idle", { sessionID });
  }
  overflow(sessionID: string): Promise<OverflowResult> {
    return this.request("session/overflow", { sessionID });
  }
  prune(sessionID: string): Promise<PruneResult> {
    return this.request("session/prune", { sessionID });
  }
  compact(
    sessionID: string,
    options: Omit<SessionCompactParams, "sessionID"> = {},
  ): Promise<CompactResult> {
    return this.request("session/compact", { sessionID, ...options });
  }
  /** Pin (or unpin) a part, or every part of the message without `partID`: never pruned, kept
   * verbatim in every summary (`compaction.keep.pinned`). */
  pin(sessionID: string, messageID: string, partID?: string, pinned = true): Promise<null> {
    return this.request("part/pin", { sessionID, messageID, partID, pinned });
  }
  async pins(sessionID: string): Promise<Pin[]> {
    return (await this.request("session/pins", { sessionID })).pins;
  }
  /** Each compaction's diagnostics, oldest first. */
  async compactions(sessionID: string): Promise<CompactionRecord[]> {
    return (await this.request("session/compactions", { sessionID })).compactions;
  }
  /** Undo the newest compaction (or `messageID`'s and every later one); the removed ids. */
  async uncompact(
    sessionID: string,
    options: { messageID?: string; restorePruned?: boolean } = {},
  ): Promise<string[]> {
    return (await this.request("session/uncompact", { sessionID, ...options })).removed;
  }
  fork(sessionID: string, messageID?: string): Promise<Session> {
    return this.request("session/fork", { sessionID, messageID });
  }
  revert(sessionID: string, messageID: string, partID?: string): Promise<Session> {
    return this.request("session/revert", { sessionID, messageID, partID });
  }
  unrevert(sessionID: string): Promise<Session> {
    return this.request("session/unrevert", { sessionID });
  }
  subscribe(sessionID: string): Promise<null> {
    return this.request("session/subscribe", { sessionID });
  }
  unsubscribe(sessionID: string): Promise<null> {
    return this.request("session/unsubscribe", { sessionID });
  }
  /** Upsert a message; the reply is the stored message (with any id the daemon made). */
  updateMessage<T extends Message>(message: T): Promise<T & { id: string }> {
    return this.request("message/update", { message }) as Promise<T & { id: string }>;
  }
  updatePart<T extends Part>(part: T): Promise<T & { id: string }> {
    return this.request("part/update", { part }) as Promise<T & { id: string }>;
  }
  removeMessage(sessionID: string, messageID: string): Promise<null> {
    return this.request("message/remove", { sessionID, messageID });
  }
  removePart(sessionID: string, messageID: string, partID: string): Promise<null> {
    return this.request("part/remove", { sessionID, messageID, partID });
  }
  getConfig(): Promise<Config> {
    return this.request("config/get", {});
  }
  updateConfig(config: Record<string, unknown>): Promise<Config> {
    return this.request("config/update", { config });
  }

  /** `shutdown`, `exit`, then close the connection (and wait for a spawned daemon to end). */
  async dispose(): Promise<void> {
    if (!this.closed) {
      try {
        await this.request("shutdown", {});
        await this.connection.sendNotification("exit");
      } catch {
        // The daemon is already gone: nothing left to shut down.
      }
    }
    const proc = this.process;
    if (proc !== undefined && proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
      // `exit` ends a stdio daemon; closing its stdin is the fallback LSP servers honour.
      proc.stdin?.end();
      const timer = setTimeout(() => proc.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(timer);
    }
    this.socket?.end();
    this.connection.dispose();
  }

  /** Resolves when the connection closes (the daemon exited or the socket closed). */
  get onClosed(): Promise<void> {
    return this.closedPromise;
  }

  async handshake(options: ClientOptions, authToken?: string): Promise<this> {
    const params: InitializeParams & { authToken?: string } = {
      processId: process.pid,
      clientInfo: options.clientInfo ?? CLIENT_INFO,
      capabilities: options.capabilities ?? {},
      initializationOptions: options.initializationOptions ?? null,
    };
    if (authToken !== undefined) params.authToken = authToken;
    this.initializeResult = await this.request("initialize", params);
    await this.connection.sendNotification("initialized", {});
    return this;
  }
}

/** Start a private daemon on stdio (`compaction-sidecar serve [--db DB]`) and initialize it. */
export async function spawnSidecar(options: SpawnOptions = {}): Promise<SidecarClient> {
  const command = options.command ?? "compaction-sidecar";
  const args = [...(options.args ?? ["serve"])];
  if (options.db !== undefined) args.push("--db", options.db);
  const child = spawn(command, args, {
    stdio: ["pipe", "pipe", options.stderr ?? "inherit"],
    env: options.env ?? process.env,
    cwd: options.cwd,
  });
  const started = new Promise<void>((resolve, reject) => {
    child.once("spawn", () => resolve());
    child.once("error", reject);
  });
  await started;
  const connection = createMessageConnection(
    new StreamMessageReader(child.stdout!),
    new StreamMessageWriter(child.stdin!),
  );
  const client = new SidecarClient(connection, child);
  connection.listen();
  return handshakeOrClose(client, options);
}

/** Join a shared daemon (`serve --listen unix:PATH` or `tcp://127.0.0.1:PORT`). */
export async function connectSidecar(options: ConnectOptions): Promise<SidecarClient> {
  const socket = await new Promise<net.Socket>((resolve, reject) => {
    const s =
      "socket" in options
        ? net.connect({ path: options.socket })
        : net.connect({ host: options.host, port: options.port });
    s.once("connect", () => {
      s.off("error", reject);
      resolve(s);
    });
    s.once("error", reject);
  });
  const connection = createMessageConnection(
    new StreamMessageReader(socket),
    new StreamMessageWriter(socket),
  );
  const client = new SidecarClient(connection, undefined, socket);
  connection.listen();
  return handshakeOrClose(client, options, "authToken" in options ? options.authToken : undefined);
}

async function handshakeOrClose(
  client: SidecarClient,
  options: ClientOptions,
  authToken?: string,
): Promise<SidecarClient> {
  try {
    return await client.handshake(options, authToken);
  } catch (err) {
    client.process?.kill();
    client.connection.dispose();
    throw err;
  }
}

/** True when `err` is an error reply with `code` (see `ErrorCodes`). */
export function isRpcError(err: unknown, code?: number): err is ResponseError<unknown> {
  return err instanceof ResponseError && (code === undefined || err.code === code);
}
