/**
 * One transport to one daemon (a spawned program's stdio, or a socket), and what it keeps of
 * the program's stderr for the error an early exit rejects with.
 */
import { spawn, type ChildProcess } from "node:child_process";
import * as net from "node:net";
import {
  CancellationToken,
  createMessageConnection,
  StreamMessageReader,
  StreamMessageWriter,
  type Message,
  type MessageConnection,
} from "vscode-jsonrpc/node";
import { SidecarError, SidecarExitedError } from "./errors";
import type { ProgramOptions } from "./options";

const STDERR_LINES = 20;

/** The last lines a program wrote to stderr, for the error its early exit rejects with. */
export class StderrTail {
  readonly lines: string[] = [];
  private partial = "";
  constructor(private readonly onLine?: (line: string) => void) {}
  write(chunk: string): void {
    const parts = (this.partial + chunk).split(/\r?\n/);
    this.partial = parts.pop() ?? "";
    for (const line of parts) this.push(line);
  }
  end(): void {
    if (this.partial !== "") this.push(this.partial);
    this.partial = "";
  }
  private push(line: string): void {
    this.lines.push(line);
    if (this.lines.length > STDERR_LINES) this.lines.shift();
    this.onLine?.(line);
  }
}

export interface Ended {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
}

/**
 * A writer whose failed write resolves. vscode-jsonrpc 8 rethrows a failed request write inside
 * a promise executor of its own, out of every caller's reach: the user's process would get an
 * unhandledRejection whenever the daemon closes the transport as a request goes out. A write
 * fails only when the transport is gone, and `Link.ended` rejects every pending request then.
 */
class SettledWriter extends StreamMessageWriter {
  override async write(msg: Message): Promise<void> {
    try {
      await super.write(msg);
    } catch {
      // The transport is gone: its end is reported (with the daemon's own words) by `ended`.
    }
  }
}

/** One transport to one daemon; a reconnecting client goes through several. */
export class Link {
  readonly connection: MessageConnection;
  /** Settles once the transport is gone (the process exited, the socket closed). */
  readonly ended: Promise<Ended>;
  private readonly pending = new Set<(err: Error) => void>();
  private endedError: SidecarExitedError | undefined;

  constructor(
    readonly what: string,
    reader: NodeJS.ReadableStream,
    writer: NodeJS.WritableStream,
    ended: Promise<Ended>,
    readonly stderr: StderrTail,
    readonly process?: ChildProcess,
    readonly socket?: net.Socket,
  ) {
    this.connection = createMessageConnection(
      new StreamMessageReader(reader as never),
      new SettledWriter(writer as never),
    );
    this.ended = ended.then((info) => {
      this.endedError = this.error(info, "before replying");
      for (const reject of [...this.pending]) reject(this.endedError);
      this.pending.clear();
      this.connection.dispose();
      return info;
    });
  }

  error(info: Ended, when: string): SidecarExitedError {
    const how =
      this.process === undefined
        ? "closed the connection"
        : info.signal !== null
          ? `was killed by ${info.signal}`
          : `exited with status ${info.exitCode}`;
    const tail = this.stderr.lines.filter((l) => l.trim() !== "");
    const said = tail.length > 0 ? `; its last stderr lines:\n  ${tail.join("\n  ")}` : "";
    return new SidecarExitedError(
      `${this.what} ${how} ${when}${said}`,
      info.exitCode,
      info.signal,
      tail,
    );
  }

  /** A request that rejects when the daemon ends before replying (vscode-jsonrpc would wait). */
  send<R>(method: string, params: unknown, token?: CancellationToken): Promise<R> {
    if (this.endedError !== undefined) return Promise.reject(this.endedError);
    return new Promise<R>((resolve, reject) => {
      const fail = (err: Error): void => {
        if (method === "initialize" && err instanceof SidecarExitedError) {
          reject(
            new SidecarExitedError(
              err.message.replace("before replying", "before answering initialize"),
              err.exitCode,
              err.signal,
              err.stderr,
            ),
          );
        } else {
          reject(err);
        }
      };
      this.pending.add(fail);
      const sent: Promise<R> =
        token === undefined
          ? this.connection.sendRequest(method, params)
          : this.connection.sendRequest(method, params, token);
      sent.then(resolve, reject).finally(() => this.pending.delete(fail));
    });
  }

  get isEnded(): boolean {
    return this.endedError !== undefined;
  }

  kill(): void {
    if (
      this.process !== undefined &&
      this.process.exitCode === null &&
      this.process.signalCode === null
    ) {
      this.process.kill("SIGKILL");
    }
    this.socket?.destroy();
  }
}

/** Start `command args` with its stdio as the transport. */
export async function spawnLink(command: string, args: string[], options: ProgramOptions): Promise<Link> {
  const stderr = new StderrTail(options.onStderr);
  const child = spawn(command, args, {
    stdio: ["pipe", "pipe", "pipe"],
    env: options.env ?? process.env,
    cwd: options.cwd,
  });
  await new Promise<void>((resolve, reject) => {
    child.once("spawn", () => resolve());
    child.once("error", (err) =>
      reject(
        new SidecarError(`cannot start ${JSON.stringify(command)}: ${err.message}`, { cause: err }),
      ),
    );
  });
  child.on("error", () => {}); // after "spawn", a failed kill(); the exit is what counts
  options.onSpawn?.(child);
  // Writes to a daemon that just died fail with EPIPE; its exit is reported instead.
  child.stdin.on("error", () => {});
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (chunk: string) => {
    if ((options.stderr ?? "inherit") === "inherit") process.stderr.write(chunk);
    stderr.write(chunk);
  });
  const ended = new Promise<Ended>((resolve) => {
    const done = (exitCode: number | null, signal: NodeJS.Signals | null): void => {
      stderr.end();
      resolve({ exitCode, signal });
    };
    // "close" comes once stderr is read to its end; "exit" alone could miss the last lines.
    child.once("close", done);
    // A grandchild holding the pipes open would delay "close" for good.
    child.once("exit", (exitCode, signal) =>
      setTimeout(() => done(exitCode, signal), 2000).unref(),
    );
  });
  const what = [command, ...args].map((a) => (/\s/.test(a) ? JSON.stringify(a) : a)).join(" ");
  const shown = what.length > 120 ? `${what.slice(0, 117)}...` : what;
  return new Link(shown, child.stdout, child.stdin, ended, stderr, child);
}

/** Connect to a daemon listening on a unix socket or loopback TCP. */
export async function socketLink(
  address: { socket: string } | { host: string; port: number },
): Promise<Link> {
  const what =
    "socket" in address
      ? `the daemon at unix:${address.socket}`
      : `the daemon at tcp://${address.host}:${address.port}`;
  const socket = await new Promise<net.Socket>((resolve, reject) => {
    const s =
      "socket" in address
        ? net.connect({ path: address.socket })
        : net.connect({ host: address.host, port: address.port });
    s.once("connect", () => {
      s.off("error", onError);
      resolve(s);
    });
    const onError = (err: Error): void =>
      reject(
        new SidecarError(
          `no daemon answers: cannot connect to ${what.slice("the daemon at ".length)}: ${err.message}`,
          { cause: err },
        ),
      );
    s.once("error", onError);
  });
  socket.on("error", () => {}); // a reset shows as "close", reported with the pending requests
  const ended = new Promise<Ended>((resolve) =>
    socket.once("close", () => resolve({ exitCode: null, signal: null })),
  );
  return new Link(what, socket, socket, ended, new StderrTail(), undefined, socket);
}
