// A conformance peer for tests: reads frames on stdin and writes each one back,
// re-encoded, on stdout. A malformed frame becomes an `error` frame (code "protocol")
// and the peer goes on with the next line; noise lines come back as one `log` frame at
// the end. Python's tests compare its bytes with jarvisd.protocol's own encoding.
import { createInterface } from "node:readline";
import { FrameError, decodeLine, encode, frame } from "./frames.mjs";

const out = (f) => process.stdout.write(encode(f));
const maxBytes = Number(process.env.JARVIS_MAX_FRAME_BYTES) || undefined;
const noise = [];

for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  let f;
  try {
    f = decodeLine(Buffer.from(line, "utf-8"), maxBytes);
  } catch (err) {
    if (!(err instanceof FrameError)) throw err;
    out(frame("error", { code: "protocol", message: err.message }));
    continue;
  }
  if (f === null) noise.push(line);
  else out(f);
}
if (noise.length) out(frame("log", { level: "info", message: noise.join("\n") }));
