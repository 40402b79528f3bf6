import assert from "node:assert/strict";
import { Readable } from "node:stream";
import { test } from "node:test";

import {
  FrameError,
  FrameReader,
  KINDS,
  MAX_FRAME_BYTES,
  SENTINEL,
  decodeLine,
  encode,
  frame,
} from "../frames.mjs";

const FRAMES = [
  frame("start", { task: "agent", payload: { spec: { input: "hi\nthere" }, secret: "s3cr3t" } }),
  frame("infer", { request: { messages: [{ role: "user", content: "é ✓ \u2028 😀" }] } }),
  frame("infer_result", { generation: { content: "ok" } }),
  frame("infer_result", { error: "engine down" }),
  frame("tool", { tool: "demo.add", arguments: { a: 2, b: 40 } }),
  frame("tool_result", { content: "42", success: true }),
  frame("cancel", { reason: "user" }),
  frame("event", { type: "tool_call_start", data: { tool: "calculator" } }),
  frame("result", { result: { content: "42", turns: 2 } }),
  frame("error", { code: "timeout", message: "took too long" }),
  frame("log", { level: "warning", message: "careful" }),
  frame("approve", { tool: "write out.txt", tool_kind: "edit", arguments: { path: "out.txt" } }),
  frame("approval", { allowed: true, reason: "approved by the user" }),
  frame("ping"),
  frame("pong"),
];

test("every kind has a round-trip case", () => {
  assert.deepEqual(new Set(FRAMES.map((f) => f.kind)), new Set(Object.keys(KINDS)));
});

for (const f of FRAMES) {
  test(`round trip: ${f.kind}`, () => {
    const line = encode(f);
    assert.ok(line.toString("ascii").startsWith(SENTINEL));
    assert.equal(line.indexOf(10), line.length - 1, "exactly one newline, at the end");
    assert.ok([...line].every((b) => b < 0x80), "ASCII only");
    assert.deepEqual(decodeLine(line), f);
  });
}

test("non-ASCII is escaped as Python's ensure_ascii does", () => {
  const line = encode(frame("log", { id: "x", message: "é😀\u007f" })).toString();
  assert.equal(line, `${SENTINEL}{"kind":"log","id":"x","level":"info","message":"\\u00e9\\ud83d\\ude00\\u007f"}\n`);
});

test("lines without the sentinel are not frames", () => {
  assert.equal(decodeLine("warming up..."), null);
  assert.equal(decodeLine(Buffer.from([0xff, 0xfe, 0x0a])), null);
});

const MALFORMED = [
  [`${SENTINEL}{not json`, /not valid JSON/],
  [`${SENTINEL}[1, 2]`, /must be a JSON object/],
  [`${SENTINEL}null`, /must be a JSON object/],
  [`${SENTINEL}${JSON.stringify({ kind: "launch_missiles", id: "x" })}`, /unknown frame kind/],
  [`${SENTINEL}${JSON.stringify({ kind: "constructor", id: "x" })}`, /unknown frame kind/],
  [`${SENTINEL}${JSON.stringify({ kind: "ping" })}`, /non-empty string id/],
  [`${SENTINEL}${JSON.stringify({ kind: "start", id: "x", payload: [1] })}`, /must be an object/],
  [`${SENTINEL}${JSON.stringify({ kind: "event", id: "x", type: 3 })}`, /must be a string/],
  [`${SENTINEL}${JSON.stringify({ kind: "tool", id: "x", tool: "t", arguments: [1] })}`, /tool.arguments must be an object/],
  [`${SENTINEL}${JSON.stringify({ kind: "tool", id: "x", tool: "t", arguments: "" })}`, /tool.arguments must be an object/],
  [`${SENTINEL}${JSON.stringify({ kind: "tool_result", id: "x", content: "c", success: "yes" })}`, /success must be true or false/],
  ["@@jarvis:2@@ {}", /version '2' is not supported/],
];

for (const [line, message] of MALFORMED) {
  test(`malformed frame refused: ${line.slice(0, 60)}`, () => {
    assert.throws(() => decodeLine(line), (err) => err instanceof FrameError && message.test(err.message));
  });
}

test("oversized frames are refused", async () => {
  const big = encode(frame("start", { payload: { blob: "x".repeat(5000) } }));
  assert.throws(() => decodeLine(big, 1000), /exceeds/);
  const reader = new FrameReader(Readable.from([big]), { maxBytes: 1000 });
  await assert.rejects(async () => {
    for await (const _ of reader);
  }, /exceeds/);
  assert.equal(MAX_FRAME_BYTES, 8 * 1024 * 1024);
});

test("the reader separates noise from frames across chunk boundaries", async () => {
  const bytes = Buffer.concat([
    Buffer.from("warming up...\n"),
    encode(frame("ping", { id: "a" })),
    Buffer.from([0xff, 0xfe, 0x0a]),
    encode(frame("pong", { id: "b" })),
    Buffer.from("trailing output without newline"),
  ]);
  const chunks = [];
  for (let i = 0; i < bytes.length; i += 7) chunks.push(bytes.subarray(i, i + 7));
  const reader = new FrameReader(Readable.from(chunks));
  const ids = [];
  for await (const f of reader) ids.push(f.id);
  assert.deepEqual(ids, ["a", "b"]);
  assert.equal(reader.noise[0], "warming up...");
  assert.equal(reader.noise.length, 3);
});

test("noise is bounded", async () => {
  const lines = Array.from({ length: 100 }, () => `${"y".repeat(100)}\n`).join("");
  const reader = new FrameReader(Readable.from([Buffer.from(lines)]), { noiseLimit: 1000 });
  for await (const _ of reader);
  assert.ok(reader.noise.length <= 11);
});

test("encode refuses what it cannot send", () => {
  assert.throws(() => encode({ kind: "nope" }), /unknown frame kind/);
  assert.throws(() => encode({ kind: "ping", id: "" }), /non-empty string id/);
  assert.throws(() => encode({ kind: "start", task: 7 }), /must be a string/);
});
