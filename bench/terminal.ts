/**
 * Terminal benchmark: keystroke echo latency and output throughput of a sandbox terminal
 * over its WebSocket (real server process on the local runtime, real `ws` client), beside
 * the same commands on a bare host PTY (util-linux `script`), in the same run.
 *
 *   echo cat  = one key typed, its echo by the tty line discipline (`cat` waits for Enter)
 *   echo bash = one key typed, its echo by bash's readline
 *   yes|head  = `yes | head -c BYTES` to the terminal, until the end marker / exit
 *
 * Image: local/debian:bookworm (GNU coreutils, like the host). Needs root, crun, script.
 * Env: BENCH_TERM_KEYS (default 300), BENCH_TERM_BYTES (default 100000000),
 * BENCH_TERM_ROLE (`all`, default: one server process; `split`: an api process in front of
 * a runner process, where the terminals live).
 * Run: node --import tsx bench/terminal.ts
 */
import { spawn } from 'node:child_process';
import type { TermClient as Client } from '../packages/server/test/terminals.js';
import { report, summarize, timeMs } from './stats.js';

process.env.SANDBOXD_E2E_RUNTIME ??= 'local';
const { ADMIN_KEY, startServer } = await import('../test/e2e/harness.js');
const { TermClient, terminalUrl } = await import('../packages/server/test/terminals.js');

const KEYS = Number(process.env.BENCH_TERM_KEYS ?? 300);
const BYTES = Number(process.env.BENCH_TERM_BYTES ?? 100_000_000);
const IMAGE = 'local/debian:bookworm';
const ROLE = process.env.BENCH_TERM_ROLE ?? 'all';
const WARMUP = 20;
const auth = { authorization: `Bearer ${ADMIN_KEY}` };

/** What both kinds of terminal offer the measurements. */
interface Term {
  write(s: string): void;
  onData(f: (b: Buffer) => void): void;
  stop(): Promise<void>;
}

const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A bare host PTY: `script` runs `cmd` with `sh -c` on a new PTY and relays it over pipes. */
function hostTerm(cmd: string): Term & { exited: Promise<void> } {
  const c = spawn('script', ['-qfc', cmd, '/dev/null'], {
    stdio: ['pipe', 'pipe', 'ignore'],
    env: { PATH: '/usr/bin:/bin', TERM: 'xterm-256color', HOME: '/tmp' },
  });
  const exited = new Promise<void>((r) => c.once('close', () => r()));
  return {
    write: (s) => c.stdin.write(s),
    onData: (f) => c.stdout.on('data', f),
    exited,
    async stop() {
      if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
      await exited;
    },
  };
}

/** Types one key at a time and waits for its echo; per-key ms after a warm-up. */
async function echoLatency(t: Term, keys: number): Promise<number[]> {
  let want = -1;
  let got: (() => void) | null = null;
  t.onData((b) => {
    if (got && b.includes(want)) {
      const g = got;
      got = null;
      g();
    }
  });
  await wait(300); // prompt and start-up output
  const out: number[] = [];
  for (let i = 0; i < keys + WARMUP; i++) {
    want = 97 + (i % 26);
    let timer: NodeJS.Timeout | undefined;
    const echoed = new Promise<void>((resolve, reject) => {
      got = resolve;
      timer = setTimeout(() => reject(new Error(`no echo of key ${i} within 5 s`)), 5000);
    });
    const ms = await timeMs(async () => {
      t.write(String.fromCharCode(want));
      await echoed;
    });
    clearTimeout(timer);
    if (i >= WARMUP) out.push(ms);
    if (i % 50 === 49) {
      t.write('\x15'); // ^U keeps the line short
      await wait(20);
    }
  }
  return out;
}

type Server = Awaited<ReturnType<typeof startServer>>;

async function main(s: Server) {
  const c = await s.api('POST', '/api/v1/sandboxes', { body: { image: IMAGE, timeoutMs: 1_800_000 } });
  if (c.status !== 201) throw new Error(`create sandbox: ${c.status} ${c.text}`);
  const sb = c.body.sandbox.id as string;
  const createMs: number[] = [];
  const readyMs: number[] = [];

  /** A new terminal over the WebSocket; records create and connect-to-ready times. */
  async function wsTerm(): Promise<Term & { client: Client }> {
    let id = '';
    createMs.push(
      await timeMs(async () => {
        const r = await s.api('POST', `/api/v1/sandboxes/${sb}/terminals`, { body: { shell: 'bash' } });
        if (r.status !== 201) throw new Error(`create terminal: ${r.status} ${r.text}`);
        id = r.body.terminal.id;
      }),
    );
    let client!: Client;
    readyMs.push(
      await timeMs(async () => {
        client = await TermClient.connect(terminalUrl(s.baseUrl, sb, id), auth);
        await client.control('ready');
      }),
    );
    return {
      client,
      write: (x) => client.type(x),
      onData: (f) => client.ws.on('message', (d: Buffer, binary: boolean) => binary && f(d)),
      async stop() {
        await s.api('DELETE', `/api/v1/sandboxes/${sb}/terminals/${id}`);
        await client.closed;
      },
    };
  }

  for (let i = 0; i < 10; i++) await (await wsTerm()).stop(); // create/connect samples

  const lat: Record<string, number[]> = {};
  for (const [name, cmd] of [
    ['cat', 'exec cat'],
    ['bash', 'exec bash --norc --noprofile'],
  ] as const) {
    const w = await wsTerm();
    w.write(`${cmd}\r`);
    lat[`websocket echo ${name}`] = await echoLatency(w, KEYS);
    await w.stop();
    const h = hostTerm(cmd);
    lat[`host pty echo ${name}`] = await echoLatency(h, KEYS);
    await h.stop();
  }

  const tp: Record<string, { bytes: number; s: number }> = {};
  {
    const w = await wsTerm();
    await w.client.waitForOutput(/[$#] $/, 20_000);
    let bytes = 0;
    w.onData((b) => (bytes += b.length));
    const ms = await timeMs(async () => {
      w.write(`yes | head -c ${BYTES}; echo END-$TERM\r`);
      await w.client.waitForOutput(/END-xterm-256color/, 600_000);
    });
    tp['websocket yes|head'] = { bytes, s: ms / 1000 };
    await w.stop();
    const h = hostTerm(`yes | head -c ${BYTES}`);
    let hb = 0;
    h.onData((b) => (hb += b.length));
    const hms = await timeMs(() => h.exited);
    tp['host pty yes|head'] = { bytes: hb, s: hms / 1000 };
  }

  const rows: Record<string, string | number>[] = [];
  const row = (measure: string, s?: ReturnType<typeof summarize>, t?: { bytes: number; s: number }) =>
    rows.push({
      measure,
      n: s?.n ?? '',
      'p50 ms': s ? s.p50.toFixed(3) : '',
      'p99 ms': s ? s.p99.toFixed(3) : '',
      'MB/s': t ? (t.bytes / 1e6 / t.s).toFixed(1) : '',
      'bytes out': t ? t.bytes : '',
      s: t ? t.s.toFixed(2) : '',
    });
  row('terminal create (POST, bash)', summarize(createMs));
  row('connect to ready', summarize(readyMs));
  for (const [k, v] of Object.entries(lat)) row(k, summarize(v));
  for (const [k, v] of Object.entries(tp)) row(k, undefined, v);
  report('terminal', rows, {
    role: ROLE,
    image: IMAGE,
    keys: KEYS,
    payloadBytes: BYTES,
    createMs: summarize(createMs),
    readyMs: summarize(readyMs),
    echoMs: Object.fromEntries(Object.entries(lat).map(([k, v]) => [k, summarize(v)])),
    throughput: Object.fromEntries(
      Object.entries(tp).map(([k, v]) => [
        k,
        { bytes: v.bytes, s: v.s, mbPerS: v.bytes / 1e6 / v.s, payloadMbPerS: BYTES / 1e6 / v.s },
      ]),
    ),
  });
}

let runner: Server | null = null;
let server: Server;
if (ROLE === 'split') {
  const token = `bench-terminal-${process.pid}-${Date.now()}`;
  runner = await startServer({
    env: { SANDBOXD_ROLE: 'runner', SANDBOXD_RUNNER_TOKEN: token },
    ready: { path: '/runner/v1/health', headers: { authorization: `Bearer ${token}` } },
  });
  server = await startServer({
    env: { SANDBOXD_ROLE: 'api', SANDBOXD_RUNNERS: runner.baseUrl, SANDBOXD_RUNNER_TOKEN: token },
  });
} else server = await startServer();
try {
  await main(server);
} finally {
  await server.stop();
  await runner?.stop();
}
