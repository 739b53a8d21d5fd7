// Compile-time tests (`tsc -p tsconfig.test.json` in `npm test`): the request map is keyed by
// method name, params are checked, and the result type is inferred. Never run.
import type {
  SidecarClient,
  Session,
  ContextResult,
  CompactingHookResult,
  BreakdownResult,
  ToolPart,
} from "../src/index";

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
function expectType<T extends true>(): T | undefined {
  return undefined;
}

export async function typed(client: SidecarClient): Promise<void> {
  const session = await client.request("session/create", { title: "t" });
  expectType<Equal<typeof session, Session>>();
  const ctx = await client.request("session/context", { sessionID: session.id, format: "openai" });
  expectType<Equal<typeof ctx, ContextResult>>();
  const none = await client.request("session/idle", { sessionID: session.id });
  expectType<Equal<typeof none, null>>();

  // The wrappers: every param of the row (`since` included), the row's result type.
  const delta = await client.context(session.id, "parts", { since: ctx.revision, fit: false });
  expectType<Equal<typeof delta, ContextResult>>();
  const parts = await client.breakdown(session.id, { overheadTokens: 9_300 });
  expectType<Equal<typeof parts, BreakdownResult>>();
  // updatePart answers with the stored part's type: a pending tool part can then complete.
  const tool = await client.updatePart({
    type: "tool",
    sessionID: session.id,
    messageID: "msg_1",
    callID: "c1",
    tool: "read",
    state: { status: "pending", input: {}, raw: "" },
  });
  expectType<Equal<typeof tool, ToolPart & { id: string }>>();
  tool.state = {
    status: "completed",
    input: {},
    output: "done",
    title: "read",
    metadata: {},
    time: { start: 1, end: 2 },
  };

  // @ts-expect-error: not a method of the protocol
  await client.request("session/nope", {});
  // @ts-expect-error: sessionID is required
  await client.request("session/get", {});
  // @ts-expect-error: not a context format
  await client.request("session/context", { sessionID: "s", format: "xml" });
  // @ts-expect-error: daemon->client requests are not sent by the client
  await client.request("compaction/compacting", { sessionID: "s" });

  client.onNotification("session/compacted", (p) => {
    expectType<Equal<typeof p.auto, boolean>>();
  });
  // @ts-expect-error: a client->daemon notification is not received
  client.onNotification("initialized", () => {});
  client.onRequest("compaction/compacting", (p): CompactingHookResult => ({ context: [p.sessionID] }));
  // @ts-expect-error: the result must be the method's result type
  client.onRequest("summarizer/complete", () => ({ nope: 1 }));
}
