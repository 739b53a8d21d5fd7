/** The errors this client raises itself (error replies are vscode-jsonrpc's `ResponseError`). */
import { ResponseError } from "vscode-jsonrpc/node";

/** Anything this client raises itself (not an error reply: those are `ResponseError`). */
export class SidecarError extends Error {
  override name = "SidecarError";
}

/**
 * The daemon (or the connection to it) ended: before answering `initialize`, or with requests
 * pending. `exitCode`/`signal` are the process's (null on a socket), `stderr` its last lines.
 */
export class SidecarExitedError extends SidecarError {
  override name = "SidecarExitedError";
  constructor(
    message: string,
    readonly exitCode: number | null,
    readonly signal: NodeJS.Signals | null,
    readonly stderr: string[],
  ) {
    super(message);
  }
}

/** The daemon did not answer `initialize` within `startTimeout`. */
export class SidecarTimeoutError extends SidecarError {
  override name = "SidecarTimeoutError";
  constructor(
    message: string,
    readonly stderr: string[],
  ) {
    super(message);
  }
}

/** The daemon speaks another major protocol version than this client. */
export class ProtocolVersionError extends SidecarError {
  override name = "ProtocolVersionError";
  constructor(
    message: string,
    readonly daemonVersion: string | undefined,
    readonly clientVersion: string,
  ) {
    super(message);
  }
}

/** True when `err` is an error reply with `code` (see `ErrorCodes`). */
export function isRpcError(err: unknown, code?: number): err is ResponseError<unknown> {
  return err instanceof ResponseError && (code === undefined || err.code === code);
}
