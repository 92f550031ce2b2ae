/**
 * Python SDK benchmark: the Python SDK (`packages/python`, sync and asyncio clients) beside
 * the TypeScript SDK, against one real server (own process, local runtime,
 * `local/busybox:latest`), in the same run, the clients taking turns round by round. The
 * floors are the same HTTP requests without an SDK: node:http from this process and a plain
 * httpx.Client from the Python process, both with keep-alive; and that httpx.Client again with
 * TCP_NODELAY on its sockets, which httpcore before 1.0 leaves off in its sync backend (a
 * POST then waits for the server's delayed ACK, about 40 ms; see the driver).
 *
 *   create -> first exec   Sandbox.create answered, then exec `true` answered (the sandbox is
 *                          deleted afterwards, not timed); each client in turn, each round
 *   exec round trip        exec `true` on one running sandbox shared by every client, in
 *                          blocks of 10 per client in turn (the first block is warm-up)
 *
 * The Python side is bench/python-sdk-driver.py, one long-lived `/usr/bin/python3` process
 * (PYTHONPATH=packages/python) that takes requests as JSON lines and answers with its own
 * timings (perf_counter around the Python calls alone): interpreter start and the pipe
 * between the two processes are outside every figure.
 *
 * Env: BENCH_RUNS (default 30): create -> first exec rounds, and exec round trips per client.
 */
import { spawn } from 'node:child_process';
import { Agent, request } from 'node:http';
import { resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { HttpClient, Sandbox } from '../packages/sdk/src/index.js';
import { newAccount, RUNTIME, startServer } from '../test/e2e/harness.js';
import { report, summarize, timeMs } from './stats.js';

if (RUNTIME !== 'local') throw new Error('run with SANDBOXD_E2E_RUNTIME=local (npm run bench sets it)');
const RUNS = Number(process.env.BENCH_RUNS ?? 30);
const IMAGE = 'local/busybox:latest';
const LIFETIME_MS = 600_000;
const PYTHON = '/usr/bin/python3';
const ROOT = resolve(fileURLToPath(import.meta.url), '../..');

type Client = 'ts' | 'node' | 'sync' | 'async' | 'httpx' | 'httpx-nodelay';
const PY_CLIENTS: readonly Client[] = ['sync', 'async', 'httpx', 'httpx-nodelay'];
const CLIENTS: { id: Client; label: string }[] = [
  { id: 'ts', label: 'TypeScript SDK' },
  { id: 'sync', label: 'Python SDK, Sandboxd (sync)' },
  { id: 'async', label: 'Python SDK, AsyncSandboxd' },
  { id: 'node', label: 'raw HTTP, node:http (floor)' },
  { id: 'httpx', label: 'raw HTTP, httpx (Python floor)' },
  { id: 'httpx-nodelay', label: 'raw HTTP, httpx + TCP_NODELAY' },
];

const server = await startServer({ env: { SANDBOXD_RUNTIME: 'local', SANDBOXD_LOG_LEVEL: 'error' } });
let py: ReturnType<typeof spawn> | undefined;
try {
  const { key } = await newAccount(server, { plan: 'PRO', tokens: 100_000 });
  const sdk = { http: new HttpClient({ apiUrl: server.baseUrl, apiKey: key }) };

  /** node:http with one keep-alive agent: the request alone, JSON in and out. */
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const raw = (method: string, path: string, body?: unknown): Promise<any> =>
    new Promise((res, rej) => {
      const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
      const req = request(
        `${server.baseUrl}${path}`,
        {
          method,
          agent,
          headers: {
            authorization: `Bearer ${key}`,
            ...(data ? { 'content-type': 'application/json', 'content-length': String(data.length) } : {}),
          },
        },
        (r) => {
          const chunks: Buffer[] = [];
          r.on('data', (c) => chunks.push(c));
          r.on('end', () => {
            const text = Buffer.concat(chunks).toString();
            if ((r.statusCode ?? 0) >= 300) return rej(new Error(`${method} ${path}: ${r.statusCode} ${text}`));
            res(text ? JSON.parse(text) : undefined);
          });
          r.on('error', rej);
        },
      );
      req.on('error', rej);
      req.end(data);
    });

  // The Python driver: one request line in, one answer line out, in order.
  py = spawn(PYTHON, [resolve(ROOT, 'bench/python-sdk-driver.py')], {
    env: {
      ...process.env,
      PYTHONPATH: resolve(ROOT, 'packages/python'),
      SANDBOX_API_URL: server.baseUrl,
      SANDBOX_API_KEY: key,
      BENCH_IMAGE: IMAGE,
    },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const answers = createInterface({ input: py.stdout! })[Symbol.asyncIterator]();
  const ask = async (req: Record<string, unknown>): Promise<any> => {
    py!.stdin!.write(`${JSON.stringify(req)}\n`);
    const a = await answers.next();
    if (a.done) throw new Error(`the Python driver exited (${JSON.stringify(req)})`);
    const v = JSON.parse(a.value);
    if (v.error) throw new Error(`Python driver: ${v.error}`);
    return v;
  };

  const tti = async (c: Client): Promise<number> => {
    if (PY_CLIENTS.includes(c)) return (await ask({ op: 'tti', client: c })).ms;
    if (c === 'ts') {
      let sb: Sandbox | undefined;
      const ms = await timeMs(async () => {
        sb = await Sandbox.create({ image: IMAGE, timeoutMs: LIFETIME_MS }, sdk);
        const r = await sb.exec('true');
        if (r.exitCode !== 0) throw new Error(`exec true exited ${r.exitCode}`);
      });
      await sb!.delete();
      return ms;
    }
    let id = '';
    const ms = await timeMs(async () => {
      id = (await raw('POST', '/api/v1/sandboxes', { image: IMAGE, timeoutMs: LIFETIME_MS })).sandbox.id;
      const r = await raw('POST', `/api/v1/sandboxes/${id}/exec`, { command: 'true' });
      if (r.exitCode !== 0) throw new Error(`exec true exited ${r.exitCode}`);
    });
    await raw('DELETE', `/api/v1/sandboxes/${id}`);
    return ms;
  };

  const execs = async (c: Client, sb: Sandbox, n: number): Promise<number[]> => {
    if (PY_CLIENTS.includes(c)) return (await ask({ op: 'exec', client: c, id: sb.id, n })).ms;
    const out: number[] = [];
    for (let i = 0; i < n; i++)
      out.push(
        await timeMs(() =>
          c === 'ts' ? sb.exec('true') : raw('POST', `/api/v1/sandboxes/${sb.id}/exec`, { command: 'true' }),
        ),
      );
    return out;
  };

  const ttiMs = new Map<Client, number[]>(CLIENTS.map((c) => [c.id, []]));
  const execMs = new Map<Client, number[]>(CLIENTS.map((c) => [c.id, []]));
  // Round 0 of each is warm-up (first imports, connections, the image's first use).
  for (let round = 0; round <= RUNS; round++)
    for (const c of CLIENTS) {
      const ms = await tti(c.id);
      if (round > 0) ttiMs.get(c.id)!.push(ms);
    }
  const target = await Sandbox.create({ image: IMAGE, timeoutMs: LIFETIME_MS }, sdk);
  try {
    const BLOCK = 10;
    for (let block = 0; block <= Math.ceil(RUNS / BLOCK); block++)
      for (const c of CLIENTS) {
        const ms = await execs(c.id, target, BLOCK);
        if (block > 0) execMs.get(c.id)!.push(...ms);
      }
  } finally {
    await target.delete();
  }
  await ask({ op: 'quit' }).catch(() => {}); // it answers by exiting

  const rows = CLIENTS.map((c) => {
    const t = summarize(ttiMs.get(c.id)!);
    const e = summarize(execMs.get(c.id)!);
    return {
      client: c.label,
      'create->exec p50 ms': t.p50,
      'create->exec p95 ms': t.p95,
      'exec true p50 ms': e.p50,
      'exec true p95 ms': e.p95,
    };
  });
  report(
    'python-sdk',
    rows,
    Object.fromEntries(
      CLIENTS.map((c) => [c.id, { tti: summarize(ttiMs.get(c.id)!), exec: summarize(execMs.get(c.id)!) }]),
    ),
  );
} finally {
  if (py && py.exitCode === null && py.signalCode === null) {
    py.stdin?.end();
    await new Promise<void>((res) => {
      const t = setTimeout(() => {
        py!.kill('SIGKILL');
        res();
      }, 10_000);
      py!.once('exit', () => {
        clearTimeout(t);
        res();
      });
    });
  }
  await server.stop();
}
