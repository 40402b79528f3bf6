// The claude_code bridge: runs the Claude Agent SDK (@anthropic-ai/claude-agent-sdk,
// pinned in package.json, installed by jarvis into its cache dir) and speaks frame
// protocol v1 on stdin/stdout.
//
// stdin: one `start` frame (task "claude_code") whose payload says what to run:
//   prompt, cwd, allowed_tools, permission_mode, max_turns, system_prompt, resume,
//   model, env (the SDK's environment: ANTHROPIC_BASE_URL and the key, chosen by the
//   host; the key travels here, never in argv or in this process's environment),
//   tools_url and tools_token (the run's tools: the host gateway's MCP endpoint).
// stdout: frames only. Tool uses and their results become tool_call_start/_end events
// (not those of the run's tools: the host runs them, and publishes their events);
// the end is one `result` frame (answer, session_id, turns, tool_results, subtype) or
// one `error` frame. Everything else the SDK or its CLI print goes to stderr.
//
// JARVIS_CLAUDE_SDK_DIR names the directory whose node_modules holds the SDK.
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { FrameReader, frame, send } from "./frames.mjs";

// Anything the SDK logs must not reach stdout: that is the frame channel.
console.log = console.info = console.debug = (...args) => console.error(...args);

const MAX_TEXT = 4000;
// The run's tools, as one HTTP MCP server: the model sees them as mcp__jarvis__NAME.
const JARVIS = "jarvis";
const JARVIS_PREFIX = `mcp__${JARVIS}__`;
const out = process.stdout;

function clip(text) {
  const s = typeof text === "string" ? text : JSON.stringify(text ?? "");
  return s.length > MAX_TEXT ? s.slice(0, MAX_TEXT) : s;
}

function resultText(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content.map((b) => (b && b.type === "text" ? b.text : `[${b?.type ?? "?"}]`)).join("\n");
  }
  return JSON.stringify(content ?? "");
}

async function loadSdk() {
  const dir = process.env.JARVIS_CLAUDE_SDK_DIR;
  if (!dir) throw new Error("JARVIS_CLAUDE_SDK_DIR is not set");
  const require = createRequire(join(dir, "package.json"));
  return import(pathToFileURL(require.resolve("@anthropic-ai/claude-agent-sdk")).href);
}

async function run(start) {
  const p = start.payload ?? {};
  const { query } = await loadSdk();
  const options = {
    cwd: p.cwd,
    env: { ...(p.env ?? {}) },
    maxTurns: p.max_turns ?? 10,
    permissionMode: p.permission_mode ?? "default",
    stderr: (data) => process.stderr.write(data),
    settingSources: [], // no user or project settings files: the host decides
  };
  if (p.model) options.model = p.model;
  if (Array.isArray(p.allowed_tools) && p.allowed_tools.length) options.allowedTools = p.allowed_tools;
  if (p.system_prompt) options.systemPrompt = p.system_prompt;
  if (p.resume) options.resume = p.resume;
  if (p.tools_url) {
    options.mcpServers = {
      [JARVIS]: {
        type: "http",
        url: String(p.tools_url),
        headers: { Authorization: `Bearer ${p.tools_token}` },
        alwaysLoad: true, // in the first prompt, never deferred behind a tool search
      },
    };
    // The run gave them: its calls are not questions for a person who is not there.
    options.allowedTools = [...(options.allowedTools ?? []), `mcp__${JARVIS}`];
  }

  const toolResults = [];
  const names = new Map();
  let sessionId = p.resume || "";
  let final = null;
  for await (const message of query({ prompt: String(p.prompt ?? ""), options })) {
    if (message.session_id) sessionId = message.session_id;
    if (message.type === "assistant") {
      for (const block of message.message?.content ?? []) {
        if (block.type !== "tool_use") continue;
        names.set(block.id, block.name);
        if (block.name.startsWith(JARVIS_PREFIX)) continue;
        const args = block.input && typeof block.input === "object" ? block.input : {};
        await send(out, frame("event", { type: "tool_call_start",
          data: { tool: block.name, call_id: block.id, arguments: args } }));
      }
    } else if (message.type === "user") {
      const content = message.message?.content;
      for (const block of Array.isArray(content) ? content : []) {
        if (block.type !== "tool_result") continue;
        const tool = names.get(block.tool_use_id) ?? "";
        const text = clip(resultText(block.content));
        const success = !block.is_error;
        toolResults.push({ tool_name: tool, content: text, success, call_id: block.tool_use_id });
        if (tool.startsWith(JARVIS_PREFIX)) continue;
        await send(out, frame("event", { type: "tool_call_end",
          data: { tool, call_id: block.tool_use_id, success, content: text } }));
      }
    } else if (message.type === "result") {
      final = message;
    }
  }
  if (final === null) throw new Error("the SDK ended without a result message");
  return frame("result", {
    id: start.id,
    result: {
      answer: typeof final.result === "string" ? final.result : "",
      subtype: String(final.subtype ?? ""),
      is_error: Boolean(final.is_error),
      session_id: sessionId,
      turns: Number(final.num_turns ?? 0),
      tool_results: toolResults,
    },
  });
}

const reader = new FrameReader(process.stdin);
let start = null;
for await (const f of reader) {
  start = f;
  break;
}
if (start === null || start.kind !== "start" || start.task !== "claude_code") {
  await send(out, frame("error", { code: "protocol", message: "expected a start frame for task claude_code" }));
  process.exit(0);
}
try {
  await send(out, await run(start));
} catch (err) {
  console.error(err?.stack ?? String(err));
  await send(out, frame("error", { id: start.id, code: "agent", message: clip(String(err?.message ?? err)) }));
}
process.exit(0);
