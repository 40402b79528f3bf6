// The jarvis frame protocol, version 1: the Node.js side.
//
// This is the same wire format as jarvisd/protocol/_frames.py, rule for rule, so that
// external agents written for Node (the Claude Agent SDK bridge) speak exactly what the
// sandbox runner and the RLM REPL speak:
//
//   @@jarvis:1@@ {"kind":"...","id":"...",...}\n
//
// * JSON is ASCII-only (every code unit above 0x7e escaped as \uXXXX, as Python's
//   ensure_ascii does), so a frame never holds a raw newline. Both sides produce the
//   same bytes for the same frame, except that JavaScript objects keep integer-like keys
//   ("0", "17") first: the data is equal, the key order may differ.
// * A line without the sentinel is program output ("noise"), kept but never parsed.
// * Oversized frames, bad JSON, unknown kinds, a missing id, fields of the wrong type
//   and other protocol versions raise FrameError with a clear message.
//
// Frames are plain objects: {kind, id, ...fields}. decodeLine() returns every field of
// its kind, defaults filled in, and nothing else.

import { randomUUID } from "node:crypto";

export const PROTOCOL_VERSION = 1;
export const SENTINEL = `@@jarvis:${PROTOCOL_VERSION}@@ `;
export const MAX_FRAME_BYTES = 8 * 1024 * 1024;
const SENTINEL_PREFIX = "@@jarvis:";

export class FrameError extends Error {
  constructor(message) {
    super(message);
    this.name = "FrameError";
  }
}

export function newId() {
  return randomUUID().replaceAll("-", "").slice(0, 16);
}

// Field readers, one per field type; each takes the raw value (undefined when absent).
const text = (name) => (value) => {
  if (value === undefined || value === null) return "";
  if (typeof value !== "string") throw new FrameError(`frame field '${name}' must be a string`);
  return value;
};
const object = (name) => (value) => {
  // Python's `mapping(absent="falsy")`: absent and falsy values are an empty object.
  if (!value) return {};
  if (typeof value !== "object" || Array.isArray(value)) {
    throw new FrameError(`frame field '${name}' must be an object`);
  }
  return value;
};
const loose = (fallback) => (value) =>
  value === undefined || value === null ? fallback : String(value);
const optionalObject = (name) => (value) => {
  if (value === undefined || value === null) return null;
  if (typeof value !== "object" || Array.isArray(value)) {
    throw new FrameError(`${name} must be an object`);
  }
  return Object.keys(value).length ? value : null;
};
// Stricter than `object`: absent or null is an empty object, any other non-object
// (including [], "" and 0) is refused. Python's `mapping()`.
const strictObject = (name) => (value) => {
  if (value === undefined || value === null) return {};
  if (typeof value !== "object" || Array.isArray(value)) {
    throw new FrameError(`${name} must be an object`);
  }
  return value;
};
const flag = (name) => (value) => {
  if (typeof value !== "boolean") throw new FrameError(`${name} must be true or false`);
  return value;
};
const optionalText = (value) => (value === undefined || value === null ? null : String(value));

// kind -> [field, reader] in wire order. Keep in step with KINDS in _frames.py.
export const KINDS = Object.freeze({
  start: [["task", text("task")], ["payload", object("payload")]],
  infer: [["request", object("request")]],
  infer_result: [
    ["generation", optionalObject("infer_result.generation")],
    ["error", optionalText],
  ],
  tool: [["tool", text("tool")], ["arguments", strictObject("tool.arguments")]],
  tool_result: [["content", text("content")], ["success", flag("tool_result.success")]],
  cancel: [["reason", loose("")]],
  event: [["type", text("type")], ["data", object("data")]],
  result: [["result", object("result")]],
  error: [["code", loose("error")], ["message", loose("")]],
  log: [["level", loose("info")], ["message", loose("")]],
  approve: [
    ["tool", text("tool")],
    ["tool_kind", text("tool_kind")],
    ["arguments", (value) => (value === undefined ? null : value)],
  ],
  approval: [["allowed", flag("approval.allowed")], ["reason", text("reason")]],
  ping: [],
  pong: [],
});

function fieldsOf(kind) {
  const fields = Object.hasOwn(KINDS, kind) ? KINDS[kind] : undefined;
  if (fields === undefined) throw new FrameError(`unknown frame kind ${JSON.stringify(kind)}`);
  return fields;
}

/** A frame of `kind` with defaults filled in: frame("infer", {request}) */
export function frame(kind, fields = {}) {
  const out = { kind, id: fields.id ?? newId() };
  for (const [name, read] of fieldsOf(kind)) out[name] = read(fields[name]);
  return out;
}

function asciiJson(value) {
  return JSON.stringify(value).replace(
    /[\u007f-\uffff]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

/** One frame as the bytes of one line. */
export function encode(f) {
  const normal = frame(f.kind, f);
  if (typeof normal.id !== "string" || !normal.id) {
    throw new FrameError("frame needs a non-empty string id");
  }
  return Buffer.from(`${SENTINEL}${asciiJson(normal)}\n`, "ascii");
}

const UTF8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Parse one line (string or Buffer): a frame, or null when the line is not a frame.
 * Throws FrameError for a sentinel line that is not a valid frame.
 */
export function decodeLine(line, maxBytes = MAX_FRAME_BYTES) {
  const size = typeof line === "string" ? line.length : line.length;
  if (size > maxBytes) {
    throw new FrameError(`frame of ${size} bytes exceeds the limit of ${maxBytes}`);
  }
  if (typeof line !== "string") {
    try {
      line = UTF8.decode(line);
    } catch {
      return null; // undecodable bytes are program output, not a frame
    }
  }
  line = line.replace(/[\r\n]+$/, "");
  if (!line.startsWith(SENTINEL_PREFIX)) return null;
  if (!line.startsWith(SENTINEL)) {
    const version = line.slice(SENTINEL_PREFIX.length).split("@@", 1)[0];
    throw new FrameError(
      `frame protocol version '${version}' is not supported (this side speaks ${PROTOCOL_VERSION})`,
    );
  }
  let data;
  try {
    data = JSON.parse(line.slice(SENTINEL.length));
  } catch (err) {
    throw new FrameError(`frame is not valid JSON: ${err.message}`);
  }
  if (data === null || typeof data !== "object" || Array.isArray(data)) {
    throw new FrameError("frame must be a JSON object");
  }
  if (typeof data.kind !== "string") {
    throw new FrameError(`unknown frame kind ${JSON.stringify(data.kind ?? null)}`);
  }
  fieldsOf(data.kind);
  if (typeof data.id !== "string" || !data.id) {
    throw new FrameError("frame needs a non-empty string id");
  }
  return frame(data.kind, data);
}

/**
 * Frames from a byte stream (a Readable such as process.stdin), as an async iterator.
 * Lines without the sentinel go to `noise` (bounded by `noiseLimit` characters), so a
 * chatty library cannot corrupt the protocol or exhaust memory.
 */
export class FrameReader {
  constructor(stream, { maxBytes = MAX_FRAME_BYTES, noiseLimit = 65536 } = {}) {
    this.stream = stream;
    this.maxBytes = maxBytes;
    this.noiseLimit = noiseLimit;
    this.noise = [];
    this.noiseSize = 0;
  }

  async *[Symbol.asyncIterator]() {
    let pending = [];
    let pendingSize = 0;
    for await (const chunk of this.stream) {
      let buf = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
      let nl;
      while ((nl = buf.indexOf(10)) !== -1) {
        const line = Buffer.concat([...pending, buf.subarray(0, nl + 1)]);
        pending = [];
        pendingSize = 0;
        buf = buf.subarray(nl + 1);
        const f = this.#line(line);
        if (f !== null) yield f;
      }
      if (buf.length) {
        pending.push(buf);
        pendingSize += buf.length;
        if (pendingSize > this.maxBytes) {
          throw new FrameError(`frame exceeds the limit of ${this.maxBytes} bytes`);
        }
      }
    }
    if (pendingSize) {
      const f = this.#line(Buffer.concat(pending));
      if (f !== null) yield f;
    }
  }

  #line(line) {
    const f = decodeLine(line, this.maxBytes);
    if (f === null && this.noiseSize < this.noiseLimit) {
      const noise = line.toString("utf-8").replace(/\n$/, "");
      this.noise.push(noise);
      this.noiseSize += noise.length;
    }
    return f;
  }
}

/** Write one frame; resolves when the stream has taken it (backpressure respected). */
export function send(stream, f) {
  const bytes = encode(f);
  return new Promise((resolve, reject) => {
    stream.write(bytes, (err) => (err ? reject(err) : resolve()));
  });
}
