/**
 * Typed client for the compaction-sidecar daemon, on vscode-jsonrpc.
 *
 * `spawnSidecar()` starts a private daemon on stdio; `connectSidecar()` joins the shared one
 * (through `compaction-sidecar connect`, or on a unix socket or loopback TCP). Both resolve once
 * the `initialize`/`initialized` handshake is done and the daemon's protocol version matches,
 * and reject (never hang) when the daemon exits first or does not answer within `startTimeout`:
 * an editor's `activate()` must settle. Method names, params and results come from
 * ./protocol.ts, which is generated from the daemon's JSON Schema, so a method the daemon does
 * not have, or wrong params, fail to compile.
 */
import type { ChildProcess } from "node:child_process";
import {
  CancellationToken,
  Disposable,
  Emitter,
  type MessageConnection,
} from "vscode-jsonrpc/node";
import type {
  ClientInfo,
  ContextResult,
  InitializeParams,
  InitializeResult,
  Part,
  Protocol,
  Session,
} from "./protocol";
import { PROTOCOL_VERSION } from "./protocol";
import { Methods, type ClientRequest, type ParamsOf, type ResultOf } from "./methods";
import {
  isRpcError,
  ProtocolVersionError,
  SidecarError,
  SidecarExitedError,
  SidecarTimeoutError,
} from "./errors";
import { Link, socketLink, spawnLink, type Ended } from "./link";
import type { ClientOptions, ConnectOptions, ProgramOptions, ReconnectOptions, SpawnOptions } from "./options";
import { ContextWindow } from "./window";

export * from "./protocol";
export * from "./errors";
export * from "./options";
export { ContextWindow, type ContextReader } from "./window";
export { Methods, type ClientRequest, type ParamsOf, type ResultOf } from "./methods";
export { CancellationToken, CancellationTokenSource, ResponseError } from "vscode-jsonrpc/node";

type Requests = Protocol["requests"];
type Notifications = Protocol["notifications"];

/** Requests the daemon sends to a capable client: `compaction/compacting`, `summarizer/complete`. */
export type DaemonRequest = Exclude<keyof Requests, ClientRequest>;
/** Notifications the daemon sends (`session/compacted`, `message/updated`, ...). */
export type DaemonNotification = {
  [M in keyof Notifications]: Notifications[M]["direction"] extends "daemon->client" ? M : never;
}[keyof Notifications];
export type NotificationParams<M extends keyof Notifications> = Notifications[M]["params"];
export type ContextFormat = ContextResult["format"];
/** The stored part of the same `type` as `T`: every state its type has (not `T`'s narrowed one). */
export type PartOf<T extends Part> = Extract<Part, { type: T["type"] }>;

const CLIENT_INFO: ClientInfo = { name: "compaction-sidecar-client", version: "0.1.0" };
const DEFAULT_START_TIMEOUT = 30_000;

type State = "connected" | "reconnecting" | "closed";

/** An initialized connection to one daemon (to its successors, with `reconnect`). */
export class SidecarClient extends Methods {
  /** What the daemon answered to `initialize` (the latest one, after a reconnect). */
  initializeResult!: InitializeResult;
  private link!: Link;
  private state: State = "connected";
  private closedError: Error | undefined;
  private regained: Promise<void> | undefined;
  private readonly handlers = new Map<string, Set<(params: unknown) => void>>();
  private readonly requestHandlers = new Map<
    string,
    (params: never, token: CancellationToken) => unknown
  >();
  /** The current link's registration of each request handler (to dispose it). */
  private readonly requestRegistrations = new Map<string, Disposable>();
  /** Sessions the daemon sends this client notifications for, to subscribe to again. */
  private readonly subscriptions = new Set<string>();
  private readonly disconnectEmitter = new Emitter<SidecarExitedError>();
  private readonly reconnectEmitter = new Emitter<InitializeResult>();
  private readonly closeEmitter = new Emitter<void>();
  private readonly closedPromise: Promise<void>;

  /** Use `spawnSidecar`/`connectSidecar`. */
  private constructor(
    private readonly open: () => Promise<Link>,
    private readonly options: ClientOptions,
    private readonly authToken: string | undefined,
    private readonly reconnect: Required<ReconnectOptions> | undefined,
  ) {
    super();
    this.closedPromise = new Promise((resolve) => this.closeEmitter.event(() => resolve()));
  }

  /** @internal */
  static async start(
    open: () => Promise<Link>,
    options: ClientOptions,
    authToken?: string,
    reconnect?: Required<ReconnectOptions>,
  ): Promise<SidecarClient> {
    const client = new SidecarClient(open, options, authToken, reconnect);
    await client.attach(await open());
    return client;
  }

  /** The current vscode-jsonrpc connection, for anything this class does not wrap. */
  get connection(): MessageConnection {
    return this.link.connection;
  }

  /** The daemon's (or the `connect` bridge's) process when this client started it. */
  get process(): ChildProcess | undefined {
    return this.link.process;
  }

  /** Fires when the daemon goes away (with `reconnect`, before trying again). */
  get onDidDisconnect(): (listener: (err: SidecarExitedError) => void) => Disposable {
    return this.disconnectEmitter.event;
  }

  /** Fires once a reconnect has re-initialized and re-subscribed. */
  get onDidReconnect(): (listener: (result: InitializeResult) => void) => Disposable {
    return this.reconnectEmitter.event;
  }

  /** Resolves when the client is closed for good (disposed, or the daemon gone for good). */
  get onClosed(): Promise<void> {
    return this.closedPromise;
  }

  /** Send a request; params and result are typed by the method name. */
  request<M extends ClientRequest>(
    method: M,
    params: ParamsOf<M>,
    token?: CancellationToken,
  ): Promise<ResultOf<M>> {
    if (this.state === "closed") {
      return Promise.reject(this.closedError ?? new SidecarError("the client is disposed"));
    }
    if (this.state === "reconnecting" && this.regained !== undefined) {
      return this.regained.then(() => this.request(method, params, token));
    }
    return this.link.send<ResultOf<M>>(method, params, token).then((result) => {
      this.track(method, params, result);
      return result;
    });
  }

  /** Remember which sessions the daemon subscribed this client to (PROTOCOL.md). */
  private track(method: string, params: unknown, result: unknown): void {
    const p = params as {
      sessionID?: string;
      message?: { sessionID?: string };
      part?: { sessionID?: string };
    };
    switch (method) {
      case "session/create":
      case "session/fork":
        this.subscriptions.add((result as Session).id);
        break;
      case "session/subscribe":
      case "session/compact":
        if (p.sessionID !== undefined) this.subscriptions.add(p.sessionID);
        break;
      case "message/update":
        if (p.message?.sessionID !== undefined) this.subscriptions.add(p.message.sessionID);
        break;
      case "part/update":
        if (p.part?.sessionID !== undefined) this.subscriptions.add(p.part.sessionID);
        break;
      case "session/unsubscribe":
      case "session/delete":
        if (p.sessionID !== undefined) this.subscriptions.delete(p.sessionID);
        break;
    }
  }

  /** Handle a daemon notification; `$/progress` included. */
  onNotification<M extends DaemonNotification>(
    method: M,
    handler: (params: NotificationParams<M>) => void,
  ): Disposable {
    // vscode-jsonrpc keeps one handler per method: fan out to every one registered here.
    let handlers = this.handlers.get(method);
    if (handlers === undefined) {
      handlers = new Set();
      this.handlers.set(method, handlers);
      // While reconnecting, the next link takes it on (attach).
      if (this.state === "connected") this.listen(this.link.connection, method, handlers);
    }
    const h = handler as (params: unknown) => void;
    const set = handlers;
    set.add(h);
    return Disposable.create(() => set.delete(h));
  }

  private listen(
    connection: MessageConnection,
    method: string,
    set: Set<(params: unknown) => void>,
  ): void {
    const fanOut = (params: unknown): void => {
      for (const h of [...set]) h(params);
    };
    if (method === "$/progress") {
      // vscode-jsonrpc routes $/progress to registered progress tokens; ours are not registered.
      connection.onUnhandledProgress(fanOut);
    } else {
      connection.onNotification(method, fanOut);
    }
  }

  /** The next notification of `method` whose params satisfy `predicate`. */
  waitFor<M extends DaemonNotification>(
    method: M,
    predicate: (params: NotificationParams<M>) => boolean = () => true,
  ): Promise<NotificationParams<M>> {
    if (this.state === "closed") {
      return Promise.reject(
        this.closedError ?? new SidecarError(`the client is closed: no ${method} will come`),
      );
    }
    return new Promise((resolve, reject) => {
      const sub = this.onNotification(method, (params) => {
        if (predicate(params)) {
          sub.dispose();
          closed.dispose();
          resolve(params);
        }
      });
      const closed = this.closeEmitter.event(() => {
        sub.dispose();
        reject(
          this.closedError ?? new SidecarError(`the client closed while waiting for ${method}`),
        );
      });
    });
  }

  /**
   * Answer the daemon's requests: `compaction/compacting` (declare `compactingHook`) and
   * `summarizer/complete` (declare `summarizer`, config `summarizer.provider: "client"`).
   */
  onRequest<M extends DaemonRequest>(
    method: M,
    handler: (params: ParamsOf<M>, token: CancellationToken) => ResultOf<M> | Promise<ResultOf<M>>,
  ): Disposable {
    const h = handler as (params: never, token: CancellationToken) => unknown;
    this.requestHandlers.set(method, h);
    // While reconnecting, the next link takes it on (attach).
    if (this.state === "connected") this.registerRequest(this.link.connection, method, h);
    return Disposable.create(() => {
      if (this.requestHandlers.get(method) !== h) return; // replaced by a later handler
      this.requestHandlers.delete(method);
      this.requestRegistrations.get(method)?.dispose();
      this.requestRegistrations.delete(method);
    });
  }

  private registerRequest(
    connection: MessageConnection,
    method: string,
    h: (params: never, token: CancellationToken) => unknown,
  ): void {
    this.requestRegistrations.set(method, connection.onRequest(method, h));
  }

  /** Take `link` as the transport: handlers, listen, `initialize` (bounded), version check. */
  private async attach(link: Link): Promise<void> {
    const connection = link.connection;
    connection.listen();
    const ms = this.options.startTimeout ?? DEFAULT_START_TIMEOUT;
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const tail = link.stderr.lines.filter((l) => l.trim() !== "");
        const said = tail.length > 0 ? `; its last stderr lines:\n  ${tail.join("\n  ")}` : "";
        reject(
          new SidecarTimeoutError(
            `${link.what} did not answer initialize within ${ms / 1000} s${said}`,
            tail,
          ),
        );
      }, ms);
    });
    try {
      const result = await Promise.race([this.handshake(link), timedOut]);
      checkProtocol(result, link.what);
      // The daemon sends nothing before `initialized`; handlers added meanwhile are included.
      for (const [method, set] of this.handlers) this.listen(connection, method, set);
      for (const [method, h] of this.requestHandlers) this.registerRequest(connection, method, h);
      await connection.sendNotification("initialized", {});
      this.link = link;
      this.initializeResult = result;
    } catch (err) {
      link.kill();
      await link.ended;
      throw err;
    } finally {
      clearTimeout(timer);
    }
    void link.ended.then((info) => this.lost(link, info));
  }

  private handshake(link: Link): Promise<InitializeResult> {
    const params: InitializeParams & { authToken?: string } = {
      processId: process.pid,
      clientInfo: this.options.clientInfo ?? CLIENT_INFO,
      capabilities: this.options.capabilities ?? {},
      initializationOptions: this.options.initializationOptions ?? null,
    };
    if (this.authToken !== undefined) params.authToken = this.authToken;
    return link.send<InitializeResult>("initialize", params);
  }

  /** The link in use ended: reconnect when asked to, else close for good. */
  private lost(link: Link, info: Ended): void {
    // A link that dies while the reconnect loop still sets it up is the loop's to retry.
    if (this.link !== link || this.state !== "connected") return;
    const gone = link.error(info, "while connected");
    if (this.reconnect === undefined) {
      this.close(gone);
      this.disconnectEmitter.fire(gone);
      return;
    }
    this.state = "reconnecting";
    this.regained = this.reconnectLoop(this.reconnect, gone);
    this.regained.catch(() => {}); // settled through close()
    this.disconnectEmitter.fire(gone);
  }

  private async reconnectLoop(
    options: Required<ReconnectOptions>,
    gone: SidecarExitedError,
  ): Promise<void> {
    const deadline = Date.now() + options.timeout;
    let delay = options.delay;
    let last: unknown = gone;
    while (this.state === "reconnecting" && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, delay));
      if (this.state !== "reconnecting") break;
      delay = Math.min(delay * 2, 2000);
      let link: Link;
      try {
        link = await this.open();
      } catch (err) {
        last = err;
        continue;
      }
      try {
        await this.attach(link);
      } catch (err) {
        if (err instanceof ProtocolVersionError) {
          this.close(err);
          throw err;
        }
        last = err;
        continue;
      }
      if (this.state !== "reconnecting") {
        link.kill(); // disposed meanwhile
        break;
      }
      try {
        for (const sessionID of [...this.subscriptions]) {
          try {
            await link.send("session/subscribe", { sessionID });
          } catch (err) {
            if (!isRpcError(err)) throw err;
            this.subscriptions.delete(sessionID); // deleted meanwhile: no longer followed
          }
        }
      } catch (err) {
        last = err; // the new daemon went too
        continue;
      }
      if (link.isEnded) continue;
      this.state = "connected";
      this.regained = undefined;
      this.reconnectEmitter.fire(this.initializeResult);
      return;
    }
    if (this.state === "closed")
      throw this.closedError ?? new SidecarError("the client is disposed");
    const why = last instanceof Error ? last.message : String(last);
    const err = new SidecarExitedError(
      `the daemon did not come back within ${options.timeout / 1000} s: ${why}`,
      gone.exitCode,
      gone.signal,
      gone.stderr,
    );
    this.close(err);
    throw err;
  }

  private close(err?: Error): void {
    if (this.state === "closed") return;
    this.state = "closed";
    this.closedError = err;
    this.closeEmitter.fire();
  }

  /** The generated wrappers (./methods.ts) send through `request`. */
  protected call<M extends ClientRequest>(method: M, params: ParamsOf<M>): Promise<ResultOf<M>> {
    return this.request(method, params);
  }

  /** A `ContextWindow` of one session in one format. */
  window(sessionID: string, format: ContextFormat = "parts"): ContextWindow {
    return new ContextWindow(this, sessionID, format);
  }

  /** `shutdown`, `exit`, then close the connection (and wait for a spawned program to end). */
  async dispose(): Promise<void> {
    const live = this.state === "connected";
    this.close();
    const link = this.link;
    if (live) {
      try {
        await link.send("shutdown", {});
        await link.connection.sendNotification("exit");
      } catch {
        // The daemon is already gone: nothing left to shut down.
      }
    }
    const proc = link.process;
    if (proc !== undefined && proc.exitCode === null && proc.signalCode === null) {
      // `exit` ends a stdio daemon; closing its stdin is the fallback LSP servers honour.
      proc.stdin?.end();
      const timer = setTimeout(() => proc.kill("SIGKILL"), 5000);
      await link.ended;
      clearTimeout(timer);
    }
    link.socket?.end();
    link.connection.dispose();
  }
}

/**
 * The daemon must speak this client's major protocol version (minor versions only add);
 * without this check a mismatch shows up later as puzzling invalid-params errors.
 */
function checkProtocol(result: InitializeResult, what: string): void {
  const theirs = (result as { protocolVersion?: unknown }).protocolVersion;
  const major = (v: string): string => v.split(".")[0] ?? v;
  if (typeof theirs === "string" && major(theirs) === major(PROTOCOL_VERSION)) return;
  const said =
    typeof theirs === "string" ? `speaks protocol ${theirs}` : "reports no protocol version";
  throw new ProtocolVersionError(
    `${what} ${said}; this client speaks ${PROTOCOL_VERSION}: install a compaction-sidecar ` +
      `and a compaction-sidecar-client of the same protocol major version`,
    typeof theirs === "string" ? theirs : undefined,
    PROTOCOL_VERSION,
  );
}

function reconnectOptions(
  r: boolean | ReconnectOptions | undefined,
): Required<ReconnectOptions> | undefined {
  if (r === undefined || r === false) return undefined;
  const given = r === true ? {} : r;
  return { timeout: given.timeout ?? 60_000, delay: given.delay ?? 250 };
}

/** Start a private daemon on stdio (`compaction-sidecar serve [--db DB]`) and initialize it. */
export async function spawnSidecar(options: SpawnOptions = {}): Promise<SidecarClient> {
  const command = options.command ?? "compaction-sidecar";
  const args = [...(options.args ?? ["serve"])];
  if (options.db !== undefined) args.push("--db", options.db);
  return SidecarClient.start(() => spawnLink(command, args, options), options);
}

/**
 * Join the shared daemon: by default run `compaction-sidecar connect` (which starts the daemon
 * when none runs) and speak over its stdio; or connect to `{socket}` / `{host, port}` directly.
 */
export async function connectSidecar(options: ConnectOptions = {}): Promise<SidecarClient> {
  const reconnect = reconnectOptions(options.reconnect);
  if ("socket" in options) {
    const socket = options.socket;
    return SidecarClient.start(() => socketLink({ socket }), options, undefined, reconnect);
  }
  if ("host" in options) {
    const { host, port, authToken } = options;
    return SidecarClient.start(() => socketLink({ host, port }), options, authToken, reconnect);
  }
  const program = options as ProgramOptions & ClientOptions;
  const command = program.command ?? "compaction-sidecar";
  const args = [...(program.args ?? ["connect"])];
  return SidecarClient.start(
    () => spawnLink(command, args, program),
    program,
    undefined,
    reconnect,
  );
}

