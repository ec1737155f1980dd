// otelguard for OpenCode: each tool call is asked of the otelguard sidecar (otelguard serve) before
// it runs, and reported after. A refusal is thrown: OpenCode does not run the call and the model
// reads the message as the call's error. A stop also aborts the session's run (no further model
// request) and says why on stderr. Fail open: a sidecar that is down, slow or answers anything but
// 200 lets the call go ahead, and the user is told once.
// Printed by `otelguard hook opencode --print-plugin`; save it as .opencode/plugin/otelguard.js.

const WRITTEN_URL = __OTELGUARD_URL__;
const TIMEOUT_MS = __OTELGUARD_TIMEOUT_MS__;
const URL_ENV = __OTELGUARD_URL_ENV__;
const TOKEN_ENV = __OTELGUARD_TOKEN_ENV__;
const DEFAULT_URL = "http://127.0.0.1:9464";

function endpoint() {
  const base = (WRITTEN_URL || process.env[URL_ENV] || DEFAULT_URL).replace(/\/+$/, "");
  return base + "/v1/hooks/opencode";
}

let told = false;

function tellOnce(reason) {
  if (told) return;
  told = true;
  const line =
    "otelguard is not guarding this session: " + reason + ". Tool calls go ahead unchecked until " +
    "the sidecar (otelguard serve) answers again; this is shown once.";
  try {
    process.stderr.write(line + "\n");
  } catch {
    // nothing more can be said: the call goes ahead all the same
  }
}

async function ask(body) {
  const headers = { "Content-Type": "application/json" };
  const token = process.env[TOKEN_ENV];
  if (token) headers.Authorization = "Bearer " + token;
  const url = endpoint();
  try {
    const response = await fetch(url, {
      method: "POST",
      headers,
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(TIMEOUT_MS),
    });
    const text = await response.text();
    if (response.status !== 200) {
      tellOnce("the sidecar at " + url + " answered HTTP " + response.status);
      return null;
    }
    told = false; // answering again: a later outage is told again
    return text.trim() ? JSON.parse(text) : null;
  } catch (error) {
    const kind = error && error.name === "TimeoutError" ? "did not answer in time" : "unreachable";
    tellOnce("the sidecar at " + url + " " + kind);
    return null;
  }
}

async function stop(client, sessionID, message) {
  try {
    process.stderr.write(message + "\n");
  } catch {
    // the abort below still ends the run
  }
  try {
    await client.session.abort({ path: { id: sessionID } });
  } catch {
    // an older OpenCode: every later call of the turn is refused all the same
  }
}

export const Otelguard = async ({ client }) => ({
  "chat.message": async (input) => {
    await ask({ event: "chat.message", session_id: input.sessionID });
  },
  "tool.execute.before": async (input, output) => {
    const answer = await ask({
      event: "tool.execute.before",
      session_id: input.sessionID,
      tool: input.tool,
      call_id: input.callID,
      args: output.args,
    });
    if (answer && answer.action === "deny") {
      if (answer.stop) await stop(client, input.sessionID, String(answer.message));
      throw new Error(String(answer.message));
    }
  },
  "tool.execute.after": async (input, output) => {
    const metadata = (output && output.metadata) || {};
    const answer = await ask({
      event: "tool.execute.after",
      session_id: input.sessionID,
      tool: input.tool,
      call_id: input.callID,
      args: input.args,
      output: output ? output.output : null,
      exit: typeof metadata.exit === "number" ? metadata.exit : null,
    });
    if (answer && answer.message && output && typeof output.output === "string") {
      output.output += "\n\n" + String(answer.message);
    }
  },
  event: async ({ event }) => {
    if (event.type === "session.idle" || event.type === "session.deleted") {
      const id = event.properties && (event.properties.sessionID || (event.properties.info || {}).id);
      if (id) await ask({ event: event.type, session_id: id });
    }
  },
});
