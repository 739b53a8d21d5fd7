// One agent turn, written through any client with `updateMessage`/`updatePart`: the tests of
// this client and of the sample VS Code extension (clients/vscode/test) share it, so it imports
// nothing.

/**
 * A user message and its text, then the assistant's reply (a long text part), finished with
 * `tokens`, as a frontend writes them; resolves to the finished assistant message.
 */
export async function turn(client, sessionID, model, text, tokens) {
  const user = await client.updateMessage({ role: "user", sessionID, model });
  await client.updatePart({ type: "text", sessionID, messageID: user.id, text });
  const assistant = await client.updateMessage({
    role: "assistant",
    sessionID,
    parentID: user.id,
    providerID: model.providerID,
    modelID: model.modelID,
  });
  await client.updatePart({
    type: "text",
    sessionID,
    messageID: assistant.id,
    text: `Answer to: ${text}. ` + "Details of the work done. ".repeat(200),
  });
  return client.updateMessage({ ...assistant, finish: "stop", tokens });
}
