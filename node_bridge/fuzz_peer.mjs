// A fuzzing peer for tests: reads a JSON array of base64 inputs on stdin and runs each
// through decodeLine and through a FrameReader (chunked at random-looking but fixed
// points). Each input must end in a frame, null (noise) or a FrameError: anything else
// (a TypeError, a RangeError, a hang) is a bug. Writes one JSON line of counts.
import { Readable } from "node:stream";
import { FrameError, FrameReader, decodeLine } from "./frames.mjs";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const inputs = JSON.parse(Buffer.concat(chunks).toString("utf-8"));
const counts = { frames: 0, noise: 0, refused: 0 };

function split(buf) {
  const parts = [];
  for (let at = 0, step = 1; at < buf.length; at += step, step = (step * 7 + 3) % 61 + 1) {
    parts.push(buf.subarray(at, at + step));
  }
  return parts;
}

for (const encoded of inputs) {
  const buf = Buffer.from(encoded, "base64");
  try {
    const f = decodeLine(buf, 4096);
    if (f === null) counts.noise += 1;
    else counts.frames += 1;
  } catch (err) {
    if (!(err instanceof FrameError)) throw err;
    counts.refused += 1;
  }
  try {
    for await (const f of new FrameReader(Readable.from(split(buf)), { maxBytes: 4096 })) {
      if (f) counts.frames += 1;
    }
  } catch (err) {
    if (!(err instanceof FrameError)) throw err;
    counts.refused += 1;
  }
}
process.stdout.write(JSON.stringify(counts) + "\n");
