// Preloaded into the server by the soak suites (NODE_OPTIONS=--import; test-only, never in the
// product): on SIGWINCH it forces two full garbage collections, then appends one JSON line
// {seq, heapUsed, external, arrayBuffers, rss} (bytes, after the collections) to
// $SOAK_GC_FILE. The server has no terminal, so SIGWINCH means nothing else to it.
// SOAK_LEAK_BYTES_PER_REQUEST=N (default 0) makes the server retain N bytes of JS heap per HTTP
// request it is sent: a deliberate leak, to prove the memory criterion fails one.
import { appendFileSync } from 'node:fs';
import http from 'node:http';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

const file = process.env.SOAK_GC_FILE;
if (file) {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc');
  let seq = 0;
  process.on('SIGWINCH', () => {
    gc();
    gc();
    const m = process.memoryUsage();
    appendFileSync(
      file,
      `${JSON.stringify({ seq: seq++, heapUsed: m.heapUsed, external: m.external, arrayBuffers: m.arrayBuffers, rss: m.rss })}\n`,
    );
  });
}
const leak = Number(process.env.SOAK_LEAK_BYTES_PER_REQUEST ?? 0);
if (leak > 0) {
  const kept = [];
  const emit = http.Server.prototype.emit;
  http.Server.prototype.emit = function (event, ...args) {
    if (event === 'request') kept.push(new Array(Math.ceil(leak / 8)).fill(kept.length)); // 8 bytes a slot
    return emit.call(this, event, ...args);
  };
}
