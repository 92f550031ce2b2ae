/**
 * Files benchmark: moving a big file in and out of a sandbox through the files routes, against
 * floors measured in the same run, on the same sandbox, the two taking turns round by round.
 * The server is the real one (own process, local runtime, `local/busybox:latest`); the client
 * is node:http (one keep-alive agent), the same for every side.
 *
 *   upload     PUT /files/content?path=/tmp/big, a 1 GiB file streamed from a local temp file
 *              floor: a streamed exec `cat > /dev/null` with stdin, the same file sent as one
 *              POST /processes/{pid}/stdin body, then stdin/close, timed from the exec request
 *              to its `exit` line; also `cat > /tmp/floor` (the same, plus the disk write)
 *   download   GET /files/content?path=/tmp/big, read to the end (SHA-256 checked while reading)
 *              floor: a streamed exec `cat /tmp/big` read to its `exit` line (NDJSON: base64
 *              of the bytes in JSON lines, decoded and hashed as read); and `cat /tmp/big >
 *              /dev/null` by one-shot exec (the sandbox's read alone)
 *   first byte a streamed exec `echo hi` until its first `stdout` line, against the one-shot
 *              exec `echo hi` round trip (the whole JSON answer), interleaved
 *   server RSS VmRSS of the server process sampled every 100 ms during each transfer: the most
 *              it grew over its value just before (a streamed transfer should keep it flat);
 *              also the CPU seconds the server process (and this client) spent on each
 *
 * Before the rounds every path runs once with 64 MiB (warm-up: the server's heap reaches its
 * working size there, not in the first measured transfer). Throughputs are medians of rounds.
 *
 * Targets: upload and download >= 60% of the exec floor; first byte within 2 ms of the one-shot
 * round trip; RSS growth a few tens of MiB at most. Never asserted: reported side by side.
 * Env: BENCH_ROUNDS (default 3), BENCH_RUNS (default 50), BENCH_FILE_MIB (default 1024).
 */
import { createHash, randomFillSync } from 'node:crypto';
import { closeSync, createReadStream, mkdtempSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { Agent, type IncomingMessage, request } from 'node:http';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { newAccount, RUNTIME, startServer } from '../test/e2e/harness.js';
import { percentile, report, timeMs } from './stats.js';

if (RUNTIME !== 'local') throw new Error('run with SANDBOXD_E2E_RUNTIME=local (npm run bench sets it)');
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const RUNS = Number(process.env.BENCH_RUNS ?? 50);
const MiB = 1024 * 1024;
const SIZE = Number(process.env.BENCH_FILE_MIB ?? 1024) * MiB;
const IMAGE = 'local/busybox:latest';
const BIG = '/tmp/big';

type Event = { type: string; pid?: number; data?: string; dataBase64?: string; exitCode?: number };

/** The source file: a 16 MiB random block repeated; its SHA-256. */
function makeSource(path: string): string {
  const block = randomFillSync(Buffer.alloc(Math.min(SIZE, 16 * MiB)));
  const hash = createHash('sha256');
  const fd = openSync(path, 'w');
  try {
    for (let done = 0; done < SIZE; done += block.length) {
      const b = block.subarray(0, Math.min(block.length, SIZE - done));
      writeSync(fd, b);
      hash.update(b);
    }
  } finally {
    closeSync(fd);
  }
  return hash.digest('hex');
}

/** Resident memory of a process, from /proc/<pid>/status. */
function rssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m?.[1] ?? NaN) * 1024;
}

const dir = mkdtempSync(join(tmpdir(), 'sandboxd-bench-files-'));
const src = join(dir, 'big');
const agent = new Agent({ keepAlive: true, maxSockets: 8 });
const server = await startServer({ env: { SANDBOXD_RUNTIME: 'local', SANDBOXD_LOG_LEVEL: 'error' } }).catch((e) => {
  rmSync(dir, { recursive: true, force: true });
  throw e;
});
const serverPid = server.proc.pid!;

/** CPU seconds (user + system) the server process has used so far. */
function cpuSeconds(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) / 100; // utime, stime (fields 14, 15) in USER_HZ ticks
}

/** Samples the server's RSS every 100 ms while `fn` runs: its time, how far RSS grew, its CPU. */
async function measured<T>(
  fn: () => Promise<T>,
): Promise<{ result: T; ms: number; rssBefore: number; rssGrowth: number; cpu: number; clientCpu: number }> {
  const rssBefore = rssBytes(serverPid);
  const cpuBefore = cpuSeconds(serverPid);
  const clientBefore = process.cpuUsage();
  let max = rssBefore;
  const timer = setInterval(() => {
    max = Math.max(max, rssBytes(serverPid));
  }, 100);
  let result: T | undefined;
  try {
    const ms = await timeMs(async () => {
      result = await fn();
    });
    max = Math.max(max, rssBytes(serverPid));
    const client = process.cpuUsage(clientBefore);
    return {
      result: result as T,
      ms,
      rssBefore,
      rssGrowth: max - rssBefore,
      cpu: cpuSeconds(serverPid) - cpuBefore,
      clientCpu: (client.user + client.system) / 1e6,
    };
  } finally {
    clearInterval(timer);
  }
}

let key = '';
let sandboxId = '';

/** One request over the keep-alive agent; `body` is a string or a stream of `length` bytes. */
function send(
  method: string,
  path: string,
  body?: { json?: unknown; stream?: Readable; length?: number },
): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { authorization: `Bearer ${key}` };
    let payload: string | undefined;
    if (body?.json !== undefined) {
      payload = JSON.stringify(body.json);
      headers['content-type'] = 'application/json';
      headers['content-length'] = String(Buffer.byteLength(payload));
    } else if (body?.stream) {
      headers['content-type'] = 'application/octet-stream';
      if (body.length !== undefined) headers['content-length'] = String(body.length);
    }
    const req = request(`${server.baseUrl}/api/v1/sandboxes/${sandboxId}${path}`, { method, headers, agent });
    req.on('response', resolve);
    req.on('error', reject);
    if (body?.stream) {
      body.stream.on('error', (e) => req.destroy(e));
      body.stream.pipe(req);
    } else req.end(payload);
  });
}

async function text(res: IncomingMessage): Promise<string> {
  const parts: Buffer[] = [];
  for await (const c of res) parts.push(c as Buffer);
  return Buffer.concat(parts).toString('utf8');
}

async function expect(res: IncomingMessage, status: number, what: string): Promise<string> {
  const t = await text(res);
  if (res.statusCode !== status) throw new Error(`${what}: ${res.statusCode} ${t}`);
  return t;
}

/** The lines of an NDJSON body, as Buffers (without the newline). */
async function* lines(res: IncomingMessage): AsyncGenerator<Buffer> {
  let partial: Buffer | null = null;
  for await (const c of res) {
    let chunk = c as Buffer;
    if (partial) {
      chunk = Buffer.concat([partial, chunk]);
      partial = null;
    }
    let start = 0;
    let nl = chunk.indexOf(10, start);
    while (nl >= 0) {
      yield chunk.subarray(start, nl);
      start = nl + 1;
      nl = chunk.indexOf(10, start);
    }
    if (start < chunk.length) partial = chunk.subarray(start);
  }
  if (partial?.length) yield partial;
}

/** Starts a streamed exec; its pid and the rest of its events. */
async function streamExec(command: string, options: Record<string, unknown> = {}) {
  const res = await send('POST', '/exec', { json: { command, options: { stream: true, ...options } } });
  if (res.statusCode !== 200) throw new Error(`streamed exec ${command}: ${res.statusCode} ${await text(res)}`);
  const events = lines(res);
  const first = await events.next();
  const start = first.done ? undefined : (JSON.parse(first.value.toString('utf8')) as Event);
  if (start?.type !== 'start') throw new Error(`streamed exec ${command}: no start line`);
  return { pid: start.pid as number, events };
}

/** Reads events to the `exit` line; throws unless it is exit 0. */
async function untilExit(events: AsyncGenerator<Buffer>, what: string): Promise<void> {
  for await (const line of events) {
    const ev = JSON.parse(line.toString('utf8')) as Event;
    if (ev.type === 'stderr') throw new Error(`${what}: stderr ${ev.data ?? ev.dataBase64}`);
    if (ev.type === 'exit') {
      if (ev.exitCode !== 0) throw new Error(`${what}: exit ${ev.exitCode}`);
      return;
    }
  }
  throw new Error(`${what}: no exit line`);
}

async function oneShot(command: string): Promise<{ stdout: string; exitCode: number }> {
  const r = JSON.parse(await expect(await send('POST', '/exec', { json: { command } }), 200, command));
  if (r.exitCode !== 0) throw new Error(`${command}: exit ${r.exitCode} ${r.stderr}`);
  return r;
}

/** The first `bytes` of the source file. */
const fileStream = (bytes: number) => createReadStream(src, { highWaterMark: MiB, end: bytes - 1 });

/** PUT the first `bytes` of the source file to `path`. */
async function upload(path = BIG, bytes = SIZE): Promise<void> {
  const res = await send('PUT', `/files/content?path=${encodeURIComponent(path)}`, {
    stream: fileStream(bytes),
    length: bytes,
  });
  const entry = JSON.parse(await expect(res, 200, 'upload')).entry;
  if (entry.size !== bytes) throw new Error(`upload: size ${entry.size}, sent ${bytes}`);
}

/** The first `bytes` of the source file through a streamed exec's stdin into `sink`, until its exit line. */
async function stdinFloor(sink: string, bytes = SIZE): Promise<void> {
  const p = await streamExec(`cat > ${sink}`, { stdin: true });
  await expect(
    await send('POST', `/processes/${p.pid}/stdin`, { stream: fileStream(bytes), length: bytes }),
    204,
    'stdin',
  );
  await expect(await send('POST', `/processes/${p.pid}/stdin/close`), 204, 'stdin/close');
  await untilExit(p.events, `cat > ${sink}`);
}

/** GET `path` (of `bytes`), hashing the body; its SHA-256. */
async function download(path = BIG, bytes = SIZE): Promise<string> {
  const res = await send('GET', `/files/content?path=${encodeURIComponent(path)}`);
  if (res.statusCode !== 200) throw new Error(`download: ${res.statusCode} ${await text(res)}`);
  const hash = createHash('sha256');
  let n = 0;
  for await (const c of res) {
    hash.update(c as Buffer);
    n += (c as Buffer).length;
  }
  if (n !== bytes) throw new Error(`download: ${n} bytes, expected ${bytes}`);
  return hash.digest('hex');
}

/** A streamed exec `cat path` (of `bytes`) read to its exit, decoding and hashing stdout; its SHA-256. */
async function catFloor(path = BIG, bytes = SIZE): Promise<string> {
  const p = await streamExec(`cat ${path}`);
  const hash = createHash('sha256');
  let n = 0;
  for await (const line of p.events) {
    const ev = JSON.parse(line.toString('latin1')) as Event;
    if (ev.type === 'stdout') {
      const b = ev.dataBase64 !== undefined ? Buffer.from(ev.dataBase64, 'base64') : Buffer.from(ev.data ?? '', 'utf8');
      hash.update(b);
      n += b.length;
    } else if (ev.type === 'exit') {
      if (ev.exitCode !== 0) throw new Error(`cat ${path}: exit ${ev.exitCode}`);
      if (n !== bytes) throw new Error(`cat ${path}: ${n} bytes, expected ${bytes}`);
      return hash.digest('hex');
    } else if (ev.type === 'stderr') throw new Error(`cat ${path}: stderr ${ev.data ?? ev.dataBase64}`);
  }
  throw new Error(`cat ${path}: no exit line`);
}

/** Milliseconds until the first stdout line of a streamed `echo hi` (then read to its end). */
async function firstByte(): Promise<number> {
  let ms = -1;
  const t = process.hrtime.bigint();
  const p = await streamExec('echo hi');
  for await (const line of p.events) {
    const ev = JSON.parse(line.toString('utf8')) as Event;
    if (ev.type === 'stdout' && ms < 0) {
      ms = Number(process.hrtime.bigint() - t) / 1e6;
      if (ev.data !== 'hi\n') throw new Error(`echo hi: stdout ${JSON.stringify(ev.data)}`);
    }
  }
  if (ms < 0) throw new Error('echo hi: no stdout line');
  return ms;
}

interface Transfer {
  ms: number[];
  rssGrowth: number[];
  rssBefore: number[];
  /** CPU seconds of the server process, and of this one (the client). */
  cpu: number[];
  clientCpu: number[];
}
const transfer = (): Transfer => ({ ms: [], rssGrowth: [], rssBefore: [], cpu: [], clientCpu: [] });
const t = {
  upload: transfer(),
  stdinNull: transfer(),
  stdinDisk: transfer(),
  download: transfer(),
  catStream: transfer(),
  catNull: transfer(),
};
const latency = { stream: [] as number[], oneShot: [] as number[] };

async function timed<T>(into: Transfer, fn: () => Promise<T>): Promise<T> {
  const r = await measured(fn);
  into.ms.push(r.ms);
  into.rssGrowth.push(r.rssGrowth);
  into.rssBefore.push(r.rssBefore);
  into.cpu.push(r.cpu);
  into.clientCpu.push(r.clientCpu);
  return r.result;
}

try {
  const sourceSha = makeSource(src);
  key = (await newAccount(server, { tokens: 1_000_000 })).key;
  const c = await server.api('POST', '/api/v1/sandboxes', { key, body: { image: IMAGE, timeoutMs: 1_800_000 } });
  if (c.status !== 201) throw new Error(`create: ${c.status} ${c.text}`);
  sandboxId = c.body.sandbox.id;
  const df = await oneShot('df -k / /tmp | tail -n +2');
  const loadBefore = loadavg()[0];
  // Warm-up: every path once with 64 MiB, so no round pays a first-use cost (the server's
  // heap grows to its working size here, not in the first measured transfer).
  const WARM = Math.min(SIZE, 64 * MiB);
  await oneShot('echo warm');
  await firstByte();
  await upload('/tmp/warm', WARM);
  await stdinFloor('/dev/null', WARM);
  await download('/tmp/warm', WARM);
  await catFloor('/tmp/warm', WARM);
  await oneShot('rm -f /tmp/warm');

  for (let round = 0; round < ROUNDS; round++) {
    // Sides take turns, which one goes first alternating by round.
    const up = [
      () => timed(t.upload, () => upload()),
      () => timed(t.stdinNull, () => stdinFloor('/dev/null')),
      () => timed(t.stdinDisk, () => stdinFloor('/tmp/floor')),
    ];
    for (const f of round % 2 ? up.reverse() : up) await f();
    await oneShot('rm -f /tmp/floor');
    const down = [
      async () => {
        const sha = await timed(t.download, () => download());
        if (sha !== sourceSha) throw new Error(`download: SHA-256 ${sha}, source ${sourceSha}`);
      },
      async () => {
        const sha = await timed(t.catStream, () => catFloor());
        if (sha !== sourceSha) throw new Error(`cat ${BIG}: SHA-256 ${sha}, source ${sourceSha}`);
      },
      () => timed(t.catNull, () => oneShot(`cat ${BIG} > /dev/null`)),
    ];
    for (const f of round % 2 ? down.reverse() : down) await f();
  }

  for (let i = 0; i < RUNS + 5; i++) {
    const pair = [
      async () => {
        const ms = await firstByte();
        if (i >= 5) latency.stream.push(ms);
      },
      async () => {
        const ms = await timeMs(() => oneShot('echo hi'));
        if (i >= 5) latency.oneShot.push(ms);
      },
    ];
    for (const f of i % 2 ? pair.reverse() : pair) await f();
  }

  const median = (xs: number[]) =>
    percentile(
      [...xs].sort((a, b) => a - b),
      50,
    );
  const mbs = (x: Transfer) => SIZE / 1e6 / (median(x.ms) / 1000);
  const maxMiB = (xs: number[]) => Math.max(...xs) / MiB;
  const throughputRow = (step: string, x: Transfer, floor: Transfer) => ({
    step,
    'MB/s': mbs(x),
    'floor MB/s': mbs(floor),
    '% of floor': (100 * mbs(x)) / mbs(floor),
    'server RSS growth MiB': maxMiB(x.rssGrowth),
    'floor RSS growth MiB': maxMiB(floor.rssGrowth),
    'server CPU s': median(x.cpu),
    'floor server CPU s': median(floor.cpu),
  });
  const rows = [
    throughputRow(`upload ${SIZE / MiB} MiB vs stdin -> cat > /dev/null`, t.upload, t.stdinNull),
    throughputRow(`upload ${SIZE / MiB} MiB vs stdin -> cat > /tmp/floor`, t.upload, t.stdinDisk),
    throughputRow(`download ${SIZE / MiB} MiB vs streamed cat (NDJSON)`, t.download, t.catStream),
    throughputRow(`download ${SIZE / MiB} MiB vs cat > /dev/null (in sandbox)`, t.download, t.catNull),
  ];
  report('files throughput', rows, {
    rounds: ROUNDS,
    bytes: SIZE,
    loadAverage: { before: loadBefore, after: loadavg()[0] },
    sandboxDisk: df.stdout.trim(),
    ...Object.fromEntries(
      Object.entries(t).map(([k, v]) => [
        k,
        {
          mbPerSec: mbs(v),
          ms: v.ms,
          serverCpuSeconds: v.cpu,
          clientCpuSeconds: v.clientCpu,
          rssGrowthMiB: v.rssGrowth.map((b) => b / MiB),
          rssBeforeMiB: v.rssBefore.map((b) => b / MiB),
        },
      ]),
    ),
  });
  const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
  const s = sorted(latency.stream);
  const o = sorted(latency.oneShot);
  report(
    'files first byte',
    [
      {
        measure: 'echo hi: streamed exec first stdout line vs one-shot exec round trip',
        'stream p50 ms': percentile(s, 50),
        'stream p90 ms': percentile(s, 90),
        'one-shot p50 ms': percentile(o, 50),
        'one-shot p90 ms': percentile(o, 90),
        'diff p50 ms': percentile(s, 50) - percentile(o, 50),
        'diff p90 ms': percentile(s, 90) - percentile(o, 90),
      },
    ],
    {
      runs: RUNS,
      stream: { p50: percentile(s, 50), p90: percentile(s, 90) },
      oneShot: { p50: percentile(o, 50), p90: percentile(o, 90) },
    },
  );
} finally {
  agent.destroy();
  rmSync(dir, { recursive: true, force: true });
  // Deletes the sandbox (and every other one of the bench's account), stops the server by its
  // pid, removes its host set-up and data dir.
  await server.stop();
}
