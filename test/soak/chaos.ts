/**
 * Chaos soak (issue 36): a mixed workload held against the real server on the real runtime
 * while faults are injected on a schedule, in two topologies, one after the other:
 *
 *   single: one server (SQLite), its data dir on a small filesystem of the test's own (a
 *     tmpfs `SmallFs`, so "the host disk is full" is real and filled from outside);
 *   fleet:  PostgreSQL, one runner and two api replicas (test/e2e/replicas-support.ts).
 *
 * The workload: `workers` loops, each picking at random one of: exec (`echo <n>`, output
 * checked), a streamed process (ndjson, every line checked), a file transfer (64 KiB random
 * bytes up, then down, compared), a terminal (created, connected, a typed line echoed, closed,
 * deleted), pause + resume, a snapshot (made, then deleted), a create (and a delete of an older
 * sandbox to keep the pool at `pool`). In the fleet each request goes to one of the two api
 * replicas at random.
 *
 * The faults (each one injected, then recovered from, then `gapS` seconds of plain workload):
 *   server-kill    kill -9 of the single server, started again on the same data dir;
 *   disk-fill      a sandbox fills its own root disk (dd to ENOSPC), then frees it;
 *   memory-eat     a sandbox allocates far past its memory limit (the OOM killer's turn);
 *   fork-bomb      a sandbox forks without end (its pids limit's turn), then is deleted;
 *   host-disk-full the data dir's filesystem filled from outside for `fullHoldS`, then drained;
 *   runner-kill    kill -9 of the runner, started again on its data dir and port;
 *   api-kill       kill -9 of api replica B, started again on its port;
 *   pg-kill        kill -9 of PostgreSQL's postmaster, started again on its data dir.
 * "Time to recover" is from the injection to the first success of the probe that fault
 * breaks (an exec in a pool sandbox; for host-disk-full, from the space's return to the first
 * create; for the sandbox-local faults the victim answering again, or, after a fork bomb,
 * being deleted). The fleet's PostgreSQL keeps fsync and synchronous commit (the test
 * default turns them off, and a kill -9 then loses the last commits, which no production
 * server does); every server of the run reconciles every 2 s.
 *
 * The rules, checked on every answer:
 *   - a 2xx whose content is right is `ok`; a 4xx, 503 or 507 whose body is sandboxd's error
 *     shape ({code, kind, message, details}; test/e2e/error-kinds.ts) is a clear refusal,
 *     counted by kind (507 is the documented "data dir full" answer: clear, so allowed);
 *   - any other status (500, 502, ...), an error body not in that shape, wrong content or a
 *     client timeout is an ERROR;
 *   - a connection refused or reset while a fault that stops a process is open (from its
 *     injection to its recovery, plus 2 s for requests already in the air) is a fault window,
 *     counted apart and not an error; outside one it is an ERROR.
 * After each topology's faults: the runtime and the records agree, both read again for up to
 * 90 s while the reconciler repairs what a fault cut short (a started sandbox has its crun
 * state and cgroup; a sandbox no longer listed has nothing left on the host; no crun
 * container is unknown to the records); then every sandbox the records call `started`
 * answers an exec (none is gone); the ledger agrees (its entries sum to the balance,
 * each sandbox has exactly one create debit). Then everything is deleted and stopped, and
 * the host is compared with a snapshot taken before (host-snapshot.sh, lines of this run).
 *
 * Prints a table and `CHAOS {json}`. Every loop is bounded in count and time.
 * Run: node --import tsx test/soak/chaos.ts --help
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';

process.env.SANDBOXD_E2E_RUNTIME ??= 'local';
const { IMAGE, newAccount, startServer } = await import('../e2e/harness.js');
const { assertErrorBody } = await import('../e2e/error-kinds.js');
const { ReplicaPair, replicasSkip, runnerReady } = await import('../e2e/replicas-support.js');
const { TermClient, terminalUrl } = await import('../../packages/server/test/terminals.js');
const fs = await import('../security/faults-support.js');
type Server = Awaited<ReturnType<typeof startServer>>;
type Scope = ReturnType<typeof fs.scopeOf>;

const MiB = 1024 * 1024;
export const SINGLE_FAULTS = ['server-kill', 'disk-fill', 'memory-eat', 'fork-bomb', 'host-disk-full'] as const;
export const FLEET_FAULTS = ['runner-kill', 'api-kill', 'pg-kill'] as const;
export type FaultName = (typeof SINGLE_FAULTS)[number] | (typeof FLEET_FAULTS)[number];
/** Faults that stop a process: connection errors meanwhile are the fault's window, not errors. */
const STOPS_A_PROCESS = new Set<FaultName>(['server-kill', 'runner-kill', 'api-kill', 'pg-kill']);

export interface ChaosOptions {
  /** Seconds of the single topology; its faults are cycled until it is over (each at least once). */
  singleS: number;
  /** Seconds of the fleet topology (0: skip it). */
  fleetS: number;
  workers: number;
  pool: number;
  /** Seconds of plain workload before each fault. */
  gapS: number;
  /** Seconds the host disk is held full. */
  fullHoldS: number;
  singleFaults: FaultName[];
  fleetFaults: FaultName[];
  /** Size of the single server's data dir filesystem (MiB). */
  fsMb: number;
}
export const DEFAULTS: ChaosOptions = {
  singleS: 360,
  fleetS: 240,
  workers: 6,
  pool: 8,
  gapS: 20,
  fullHoldS: 8,
  singleFaults: [...SINGLE_FAULTS],
  fleetFaults: [...FLEET_FAULTS],
  fsMb: 1024,
};
const PLAN = {
  CHAOS: {
    maxLifetimeMs: 86_400_000,
    concurrency: 40,
    maxPaused: 10,
    snapshotBytes: 512 * MiB,
    signupTokens: 0,
    limits: { memoryBytes: 128 * MiB, cpus: 1, pids: 128, rootDiskBytes: 64 * MiB },
  },
};

export interface FaultRecord {
  topology: string;
  fault: FaultName;
  atS: number;
  recoverS: number | null;
  note: string;
}
export interface ChaosResult {
  options: ChaosOptions;
  requests: number;
  ok: number;
  byOp: Record<string, { n: number; ok: number }>;
  refusals: Record<string, number>;
  faultWindow: Record<string, number>;
  errors: Record<string, number>;
  errorSamples: string[];
  faults: FaultRecord[];
  violations: string[];
  /** Seconds the runtime took to agree with the records after the faults, per topology (null: never). */
  converge: Record<string, number | null>;
  skipped: string[];
  wallS: number;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const rnd = (n: number) => Math.floor(Math.random() * n);

/** A target of the workload: the api base URLs (one or two), changed when a server restarts. */
interface Target {
  urls: string[];
  key: string;
}
interface Sb {
  id: string;
  /** Held by an exclusive op (pause, snapshot, churn's delete). */
  busy: boolean;
  /** Shared ops using it now (an exclusive op waits for none). */
  users: number;
}

/** The run's counters, and the open fault windows. */
class Tally {
  requests = 0;
  ok = 0;
  byOp: Record<string, { n: number; ok: number }> = {};
  refusals: Record<string, number> = {};
  faultWindow: Record<string, number> = {};
  errors: Record<string, number> = {};
  errorSamples: string[] = [];
  violations: string[] = [];
  /** Open windows: fault name -> end time (performance.now) or Infinity while open. */
  windows = new Map<string, number>();
  /** The open window of a fault that stops a process (or of `only`), if any. */
  inWindow(only?: FaultName): string | null {
    const now = performance.now();
    for (const [f, end] of this.windows)
      if (now <= end && (only ? f === only : STOPS_A_PROCESS.has(f as FaultName))) return f;
    return null;
  }
  /** Seconds the runtime took to agree with the records after the faults, per topology (null: never). */
  converge: Record<string, number | null> = {};
  /** The topology running now (error samples name it). */
  topology = '';
  error(kind: string, detail: string): void {
    this.errors[kind] = (this.errors[kind] ?? 0) + 1;
    if (this.errorSamples.length < 30) this.errorSamples.push(`${this.topology} ${kind}: ${detail.slice(0, 400)}`);
  }
  op(name: string, ok: boolean): void {
    this.byOp[name] ??= { n: 0, ok: 0 };
    const o = this.byOp[name];
    o.n++;
    if (ok) o.ok++;
  }
}

class Bad extends Error {}
/** A clear refusal (4xx/503/507 in the error shape): the op ends, not an error. */
class Refused extends Error {
  constructor(
    message: string,
    /** The answer's body, when there was one. */
    readonly text = '',
  ) {
    super(message);
  }
}

/** One request; classifies its answer (see the header). Returns the answer when it is a 2xx. */
async function call(
  t: Tally,
  op: string,
  url: string,
  key: string,
  method: string,
  path: string,
  o: { body?: unknown; raw?: Buffer; timeoutMs?: number } = {},
): Promise<{ status: number; body: any; text: string; res: Response }> {
  t.requests++;
  let res: Response;
  const headers: Record<string, string> = { authorization: `Bearer ${key}` };
  if (o.body !== undefined) headers['content-type'] = 'application/json';
  try {
    res = await fetch(`${url}${path}`, {
      method,
      headers,
      body: o.raw ? new Uint8Array(o.raw) : o.body === undefined ? undefined : JSON.stringify(o.body),
      signal: AbortSignal.timeout(o.timeoutMs ?? 60_000),
    });
  } catch (e) {
    throw classifyThrown(t, op, e as Error);
  }
  const text = await res.text().catch((e: Error) => {
    throw classifyThrown(t, op, e);
  });
  if (res.status >= 200 && res.status < 300) {
    let body: unknown;
    try {
      body = text && res.headers.get('content-type')?.includes('application/json') ? JSON.parse(text) : undefined;
    } catch {
      body = undefined;
    }
    return { status: res.status, body, text, res };
  }
  return refusal(t, op, res.status, text, `${method} ${path}`);
}

function refusal(t: Tally, op: string, status: number, text: string, where: string): never {
  try {
    assertErrorBody(status, text, where);
  } catch (e) {
    t.error('bad_error_body', (e as Error).message);
    throw new Bad();
  }
  // 507 says the data dir is full: clear, but only true while it is (host-disk-full).
  if (status === 507 && !t.inWindow('host-disk-full')) {
    t.error('http_507_disk_not_full', `${op} ${where}: ${text}`);
    throw new Bad();
  }
  if ((status >= 400 && status < 500) || status === 503 || status === 507) {
    const kind = `${status} ${JSON.parse(text).kind}`;
    t.refusals[kind] = (t.refusals[kind] ?? 0) + 1;
    throw new Refused(`${op}: ${kind}`, text);
  }
  t.error(`http_${status}`, `${op} ${where}: ${text}`);
  throw new Bad();
}

function classifyThrown(t: Tally, op: string, e: Error): Error {
  const msg = `${e.message} ${(e.cause as Error | undefined)?.message ?? ''} ${(e.cause as NodeJS.ErrnoException | undefined)?.code ?? ''}`;
  // The harness's fetch wrapper rejects answers whose error body is not sandboxd's shape.
  if (/: error \d+ /.test(e.message)) {
    t.error('bad_error_body', e.message);
    return new Bad();
  }
  // A refused WebSocket upgrade (TermClient): an answer like any other.
  const up = /^upgrade refused: (\d+) ([\s\S]*)$/.exec(e.message);
  if (up) {
    try {
      refusal(t, op, Number(up[1]), up[2], 'terminal upgrade');
    } catch (r) {
      return r as Error;
    }
  }
  if (e.name === 'TimeoutError' || /timeout/i.test(msg)) {
    t.error('client_timeout', `${op}: ${msg}`);
    return new Bad();
  }
  const w = t.inWindow();
  if (w) {
    t.faultWindow[w] = (t.faultWindow[w] ?? 0) + 1;
    return new Refused(`${op}: connection error in the ${w} window`);
  }
  t.error('network', `${op}: ${msg}`);
  return new Bad();
}

/** The workload over `target` and its pool of sandboxes; `stop()` ends it (bounded). */
class Workload {
  pool: Sb[] = [];
  /** Every sandbox id this workload made (for the host check). */
  all = new Set<string>();
  private running = false;
  private loops: Promise<void>[] = [];
  private n = 0;
  constructor(
    readonly t: Tally,
    readonly target: Target,
    readonly image: string,
  ) {}
  url(): string {
    return this.target.urls[rnd(this.target.urls.length)];
  }
  async create(op = 'create'): Promise<string> {
    const r = await call(this.t, op, this.url(), this.target.key, 'POST', '/api/v1/sandboxes', {
      body: { image: this.image, timeoutMs: 3_600_000 },
      timeoutMs: 120_000,
    });
    const id = r.body?.sandbox?.id as string;
    if (!id) {
      this.t.error('wrong_output', `create answered ${r.status} without a sandbox: ${r.text}`);
      throw new Bad();
    }
    this.all.add(id);
    return id;
  }
  async fill(n: number): Promise<void> {
    for (let i = 0; i < n * 3 && this.pool.length < n; i++) {
      try {
        this.pool.push({ id: await this.create(), busy: false, users: 0 });
      } catch {
        await sleep(500);
      }
    }
    if (this.pool.length < n) throw new Error(`could only create ${this.pool.length}/${n} pool sandboxes`);
  }
  start(workers: number): void {
    this.running = true;
    for (let w = 0; w < workers; w++) this.loops.push(this.loop());
  }
  async stop(): Promise<void> {
    this.running = false;
    // Bounded (a loop stuck on a request gives up with its 120 s client timeout anyway); the
    // timer is cleared, so that it does not keep the process alive once the loops are done.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(this.loops), new Promise<void>((r) => (timer = setTimeout(r, 180_000)))]);
    clearTimeout(timer);
    this.loops = [];
  }
  private pick(exclusive: boolean): Sb | null {
    const free = this.pool.filter((s) => !s.busy && (!exclusive || s.users === 0));
    if (!free.length) return null;
    const s = free[rnd(free.length)];
    if (exclusive) s.busy = true;
    else s.users++;
    return s;
  }
  private async loop(): Promise<void> {
    for (let i = 0; i < 1_000_000 && this.running; i++) {
      const r = Math.random();
      const op =
        r < 0.4
          ? 'exec'
          : r < 0.52
            ? 'stream'
            : r < 0.67
              ? 'file'
              : r < 0.75
                ? 'terminal'
                : r < 0.83
                  ? 'pause'
                  : r < 0.88
                    ? 'snapshot'
                    : 'churn';
      const exclusive = op === 'pause' || op === 'snapshot' || op === 'churn';
      const sb = this.pick(exclusive);
      if (!sb) {
        await sleep(50);
        continue;
      }
      let ok = false;
      try {
        await this.run(op, sb);
        ok = true;
        this.t.ok++;
      } catch (e) {
        if (!(e instanceof Refused) && !(e instanceof Bad)) this.t.error(`${op}_check`, (e as Error).message);
        // A pause that landed while its resume could not (a fault): resume it, as a user would.
        if (e instanceof Refused && e.text.includes('"state":"paused"'))
          await quiet(this.url(), this.target.key, 'POST', `/api/v1/sandboxes/${sb.id}/resume`, {}, 120_000);
        await sleep(100);
      } finally {
        if (exclusive) sb.busy = false;
        else sb.users--;
        this.t.op(op, ok);
      }
    }
  }
  private async run(op: string, sb: Sb): Promise<void> {
    const n = this.n++;
    const key = this.target.key;
    const url = this.url();
    const base = `/api/v1/sandboxes/${sb.id}`;
    const check = (cond: boolean, what: string) => {
      if (!cond) {
        this.t.error('wrong_output', `${op} ${sb.id}: ${what}`);
        throw new Bad();
      }
    };
    if (op === 'exec') {
      const r = await call(this.t, op, url, key, 'POST', `${base}/exec`, { body: { command: `echo ${n}` } });
      check(r.body?.exitCode === 0 && r.body.stdout === `${n}\n`, `exec answered ${r.text.slice(0, 200)}`);
    } else if (op === 'stream') {
      const r = await call(this.t, op, url, key, 'POST', `${base}/exec`, {
        body: { command: `i=0; while [ $i -lt 20 ]; do echo s${n}-$i; i=$((i+1)); done`, options: { stream: true } },
      });
      const evs = r.text
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { type: string; data?: string; exitCode?: number });
      const out = evs
        .filter((e) => e.type === 'stdout')
        .map((e) => e.data)
        .join('');
      const want = Array.from({ length: 20 }, (_, i) => `s${n}-${i}\n`).join('');
      check(out === want && evs.at(-1)?.type === 'exit' && evs.at(-1)?.exitCode === 0, `stream: ${r.text.slice(-200)}`);
    } else if (op === 'file') {
      const data = randomBytes(64 * 1024);
      const p = `/tmp/f${n}`;
      await call(this.t, op, url, key, 'PUT', `${base}/files/content?path=${encodeURIComponent(p)}`, { raw: data });
      const g = await fetchBytes(this.t, op, url, key, `${base}/files/content?path=${encodeURIComponent(p)}`);
      check(Buffer.compare(g, data) === 0, `file came back ${g.length} bytes, not the 65536 sent`);
      await call(this.t, op, url, key, 'DELETE', `${base}/files?path=${encodeURIComponent(p)}`);
    } else if (op === 'terminal') {
      const c = await call(this.t, op, url, key, 'POST', `${base}/terminals`, { body: { shell: 'sh' } });
      const tid = c.body?.terminal?.id as string;
      let tc: Awaited<ReturnType<typeof TermClient.connect>> | undefined;
      let closedIn: string | null = null;
      try {
        tc = await TermClient.connect(terminalUrl(url, sb.id, tid), { authorization: `Bearer ${key}` }, 20_000);
        // A socket cut by a fault is judged by when it was cut, not when the wait gave up.
        void tc.closed.then(() => {
          closedIn = this.t.inWindow();
        });
        tc.type(`echo tm-$((${n}+1))\r`);
        await tc.waitForOutput(new RegExp(`tm-${n + 1}\\r?\\n`), 20_000);
      } catch (e) {
        if (closedIn) {
          this.t.faultWindow[closedIn] = (this.t.faultWindow[closedIn] ?? 0) + 1;
          throw new Refused(`${op}: terminal cut in the ${closedIn} window`);
        }
        throw classifyThrown(this.t, op, e as Error);
      } finally {
        tc?.close();
      }
      await call(this.t, op, url, key, 'DELETE', `${base}/terminals/${tid}`);
    } else if (op === 'pause') {
      try {
        await call(this.t, op, url, key, 'POST', `${base}/pause`);
      } finally {
        // Resume whatever happened to the pause (it may have landed before a fault).
        await call(this.t, op, this.url(), key, 'POST', `${base}/resume`, { body: {}, timeoutMs: 120_000 }).catch(
          (e) => {
            if (!(e instanceof Refused)) throw e;
          },
        );
      }
      const r = await call(this.t, op, this.url(), key, 'POST', `${base}/exec`, { body: { command: 'echo back' } });
      check(r.body?.stdout === 'back\n', `after resume: ${r.text.slice(0, 200)}`);
    } else if (op === 'snapshot') {
      const name = `chaos-${process.pid}-${n}`;
      await call(this.t, op, url, key, 'POST', `${base}/snapshot`, { body: { name }, timeoutMs: 120_000 });
      await call(this.t, op, this.url(), key, 'DELETE', `/api/v1/snapshots/${name}`);
    } else if (op === 'churn') {
      const id = await this.create(op);
      this.pool.push({ id, busy: false, users: 0 });
      // Keep the pool's size: delete the sandbox we hold (the oldest may be someone's).
      await call(this.t, op, this.url(), key, 'DELETE', base, { timeoutMs: 120_000 });
      this.pool = this.pool.filter((s) => s !== sb);
    }
  }
}

async function fetchBytes(t: Tally, op: string, url: string, key: string, path: string): Promise<Buffer> {
  t.requests++;
  try {
    const res = await fetch(`${url}${path}`, {
      headers: { authorization: `Bearer ${key}` },
      signal: AbortSignal.timeout(60_000),
    });
    const b = Buffer.from(await res.arrayBuffer());
    if (res.status === 200) return b;
    return refusal(t, op, res.status, b.toString('utf8'), `GET ${path}`);
  } catch (e) {
    if (e instanceof Refused || e instanceof Bad) throw e;
    throw classifyThrown(t, op, e as Error);
  }
}

/** Polls `probe` (at most `ms`) until it resolves true; returns seconds since `from`, or null. */
async function recover(from: number, probe: () => Promise<boolean>, ms = 120_000): Promise<number | null> {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    try {
      if (await probe()) return (performance.now() - from) / 1000;
    } catch {
      /* not yet */
    }
    await sleep(250);
  }
  return null;
}

/** A quiet client (not counted in the workload's figures): status and parsed body. */
async function quiet(url: string, key: string, method: string, path: string, body?: unknown, timeoutMs = 30_000) {
  const res = await fetch(`${url}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  }).catch(() => null);
  if (!res) return { status: 0, body: undefined as any, text: '' };
  const text = await res.text().catch(() => '');
  let parsed: any;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = undefined;
  }
  return { status: res.status, body: parsed, text };
}

/** An exec in some started pool sandbox answers right. */
async function execProbe(w: Workload, url?: string): Promise<boolean> {
  const sb = w.pool.find((s) => !s.busy) ?? w.pool[0];
  if (!sb) return false;
  const r = await quiet(url ?? w.url(), w.target.key, 'POST', `/api/v1/sandboxes/${sb.id}/exec`, {
    command: 'echo probe',
  });
  return r.status === 200 && r.body?.stdout === 'probe\n';
}

/** The sandbox-local faults: a victim sandbox of its own, the hostile command, the rule. */
async function victimFault(
  t: Tally,
  w: Workload,
  fault: FaultName,
): Promise<{ recoverS: number | null; note: string }> {
  const url = w.target.urls[0];
  const key = w.target.key;
  const c = await quiet(url, key, 'POST', '/api/v1/sandboxes', { image: w.image, timeoutMs: 3_600_000 }, 120_000);
  if (c.status !== 201) return { recoverS: null, note: `victim create: ${c.status} ${c.text.slice(0, 200)}` };
  const id = c.body.sandbox.id as string;
  w.all.add(id);
  const base = `/api/v1/sandboxes/${id}`;
  const cmd =
    fault === 'disk-fill'
      ? 'dd if=/dev/zero of=/fill bs=1M count=512 2>&1; echo dd=$?'
      : fault === 'memory-eat'
        ? 'dd if=/dev/zero of=/dev/null bs=400M count=1 2>&1; echo dd=$?'
        : 'f(){ f | f & }; f; sleep 3; echo bombed';
  const t0 = performance.now();
  const r = await quiet(url, key, 'POST', `${base}/exec`, { command: cmd, options: { timeoutMs: 20_000 } }, 60_000);
  t.requests++;
  let note = `hostile exec: ${r.status} exit ${r.body?.exitCode ?? '-'} ${JSON.stringify(
    String(r.body?.stdout ?? r.text)
      .trim()
      .split('\n')
      .slice(-2)
      .join(' | '),
  ).slice(0, 160)}`;
  if (r.status === 200) t.ok++;
  else if (r.status === 0) t.error('network', `${fault}: the hostile exec got no answer`);
  else {
    try {
      refusal(t, fault, r.status, r.text, `${fault} exec`);
    } catch {
      /* counted */
    }
  }
  if (fault === 'disk-fill' && r.status === 200 && !/No space left|dd=1/.test(String(r.body?.stdout)))
    t.violations.push(`disk-fill: dd filled 512 MiB without ENOSPC on a 64 MiB root disk: ${r.body?.stdout}`);
  let recoverS: number | null;
  if (fault === 'fork-bomb') {
    // Recovery from a fork bomb is deleting its sandbox (what a user does): it must work.
    recoverS = await recover(t0, async () => {
      const d = await quiet(url, key, 'DELETE', base, undefined, 60_000);
      return d.status === 204 || d.status === 404;
    });
    note += '; victim deleted';
  } else {
    if (fault === 'disk-fill') await quiet(url, key, 'POST', `${base}/exec`, { command: 'rm -f /fill' });
    recoverS = await recover(t0, async () => {
      const e = await quiet(url, key, 'POST', `${base}/exec`, { command: 'echo alive' });
      if (e.status === 200 && e.body?.stdout === 'alive\n') return true;
      // Not answering: then its record must say so (not `started`).
      const g = await quiet(url, key, 'GET', base);
      if (g.status === 200 && g.body.sandbox.state !== 'started') {
        note += `; victim ${g.body.sandbox.state}`;
        return true;
      }
      return false;
    });
    const d = await quiet(url, key, 'DELETE', base, undefined, 60_000);
    if (d.status !== 204)
      t.violations.push(`${fault}: the victim's delete answered ${d.status} ${d.text.slice(0, 200)}`);
  }
  return { recoverS, note };
}

/**
 * The lines of the servers' logs (`server-<pid>.stderr.log` in `dirs`, every process that
 * ran there) that name `id`, the last 60, each cut at 400 characters.
 */
function logLinesAbout(dirs: string[], id: string): string {
  const out: string[] = [];
  for (const dir of dirs) {
    if (!existsSync(dir)) continue;
    for (const f of readdirSync(dir)
      .filter((x) => /^server-\d+\.stderr\.log$/.test(x))
      .sort())
      for (const line of readFileSync(join(dir, f), 'utf8').split('\n'))
        if (line.includes(id)) out.push(`  ${f.slice(7, -11)}: ${line.slice(0, 400)}`);
  }
  return out.slice(-60).join('\n') || '  (nothing)';
}

/** The after-checks of one topology (see the header); violations go to `t`. */
async function agreement(
  t: Tally,
  w: Workload,
  url: string,
  scope: Scope,
  topology: string,
  logDirs: string[],
): Promise<void> {
  const key = w.target.key;
  const before = t.violations.length;
  // The records and the runtime converge: a create or delete cut short by a fault leaves an
  // orphan, or a record that still says started (a delete that removed the sandbox before the
  // database went), which the reconciler repairs on its next pass (every 2 s here, 30 s by
  // default). So both are read again until they agree, for up to 90 s (how long it took is
  // reported); then every sandbox the records call started must answer an exec.
  const crunDir = join(scope.instanceRunDir, 'crun');
  let recs: Array<{ id: string; state: string }> = [];
  const disagreements = async (): Promise<string[]> => {
    const list = await quiet(url, key, 'GET', '/api/v1/sandboxes?limit=1000');
    if (list.status !== 200) return [`${topology}: list answered ${list.status}`];
    recs = list.body.sandboxes as Array<{ id: string; state: string }>;
    const listed = new Set(recs.map((x) => x.id));
    const started = recs.filter((x) => x.state === 'started').map((x) => x.id);
    const gone = [...w.all].filter((id) => !listed.has(id));
    const out: string[] = [];
    const traces = fs.sandboxTraces(scope, [...started, ...gone]);
    for (const id of started) {
      const tr = (traces.get(id) ?? []).join('\n');
      // (Network namespaces come from a pool under other names: sandboxTraces cannot name them.)
      for (const need of ['crun state', 'cgroup'])
        if (!tr.includes(need)) out.push(`${topology}: ${id} is started in the records but has no ${need}`);
    }
    for (const id of gone) {
      const tr = traces.get(id) ?? [];
      if (tr.length) out.push(`${topology}: deleted ${id} left ${tr.join('; ')}`);
    }
    if (existsSync(crunDir))
      for (const c of readdirSync(crunDir))
        if (c.startsWith('sbx_') && !listed.has(c)) out.push(`${topology}: crun container ${c} not in the records`);
    return out;
  };
  const c0 = performance.now();
  let d = await disagreements();
  for (let i = 0; i < 90 && d.length; i++) {
    await sleep(1000);
    d = await disagreements();
  }
  t.violations.push(...d);
  t.converge[topology] = d.length ? null : +((performance.now() - c0) / 1000).toFixed(1);
  for (const s of recs.filter((x) => x.state === 'started')) {
    const e = await quiet(url, key, 'POST', `/api/v1/sandboxes/${s.id}/exec`, { command: 'echo here' });
    if (!(e.status === 200 && e.body?.stdout === 'here\n'))
      t.violations.push(
        `${topology}: ${s.id} is started in the records but its exec answered ${e.status} ${e.text.slice(0, 200)}`,
      );
  }
  const listed = new Set(recs.map((x) => x.id));
  // What the servers logged about each sandbox a violation names (CI keeps no data dir).
  const named = new Set(t.violations.slice(before).flatMap((v) => v.match(/sbx_[a-z0-9]+/g) ?? []));
  for (const id of named) t.violations.push(`${topology}: logged about ${id}:\n${logLinesAbout(logDirs, id)}`);
  const ledger = await fs.ledgerOf({ api: (m: string, p: string) => quiet(url, key, m, p) } as unknown as Server, key);
  const sum = ledger.entries.reduce((a, e) => a + e.delta, 0);
  if (sum !== ledger.balance)
    t.violations.push(`${topology}: the ledger sums to ${sum}, the balance is ${ledger.balance}`);
  const charges = fs.chargesById(ledger.entries);
  for (const id of listed)
    if ((charges.get(id)?.debits.length ?? 0) !== 1)
      t.violations.push(`${topology}: ${id} has ${charges.get(id)?.debits.length ?? 0} create debits`);
  for (const [id, c] of charges)
    if (c.debits.length > 1) t.violations.push(`${topology}: ${id} was charged ${c.debits.length} times`);
}

/** Runs the fault schedule of one topology for `seconds` (each fault at least once). */
async function schedule(
  t: Tally,
  faults: FaultName[],
  seconds: number,
  gapS: number,
  t0: number,
  topology: string,
  inject: (f: FaultName) => Promise<{ recoverS: number | null; note: string }>,
  say: (s: string) => void,
  out: FaultRecord[],
): Promise<void> {
  const end = performance.now() + seconds * 1000;
  for (let i = 0; i < 200 && (i < faults.length || performance.now() < end); i++) {
    await sleep(gapS * 1000);
    const f = faults[i % faults.length];
    const atS = (performance.now() - t0) / 1000;
    t.windows.set(f, Number.POSITIVE_INFINITY);
    let r: { recoverS: number | null; note: string };
    try {
      r = await inject(f);
    } catch (e) {
      r = { recoverS: null, note: `injection failed: ${(e as Error).message}` };
    }
    t.windows.set(f, performance.now() + 2000);
    if (r.recoverS === null) t.violations.push(`${topology} ${f}: no recovery (${r.note})`);
    out.push({ topology, fault: f, atS, recoverS: r.recoverS, note: r.note });
    say(`# ${topology} ${f} at ${atS.toFixed(0)} s: recovered in ${r.recoverS?.toFixed(2) ?? 'NEVER'} s (${r.note})`);
  }
}

export async function runChaos(
  opt: Partial<ChaosOptions> = {},
  say: (s: string) => void = (s) => console.log(s),
): Promise<ChaosResult> {
  const o: ChaosOptions = { ...DEFAULTS, ...opt };
  const t = new Tally();
  const faults: FaultRecord[] = [];
  const skipped: string[] = [];
  const wall0 = performance.now();
  const base = mkdtempSync(join(tmpdir(), 'sandboxd-chaos-'));
  const config = join(base, 'config.json');
  writeFileSync(config, JSON.stringify({ plans: PLAN }));
  const env = { SANDBOXD_CONFIG: config };
  // Every server of the run (also the fleet's, which take the harness's env) reconciles every
  // 2 s, so that the runtime's agreement with the records after a fault is seen in seconds.
  const reconcileWas = process.env.SANDBOXD_RECONCILE_INTERVAL_MS;
  process.env.SANDBOXD_RECONCILE_INTERVAL_MS = '2000';
  // At info, the servers' logs say what happened to a sandbox a violation names (logLinesAbout).
  const logLevelWas = process.env.SANDBOXD_E2E_LOG_LEVEL;
  process.env.SANDBOXD_E2E_LOG_LEVEL = 'info';
  const hostBefore = fs.hostSnapshot();
  const scopes: Array<{ scope: Scope; ids: Set<string> }> = [];
  try {
    // Single server on SQLite, data dir on a small filesystem.
    if (o.singleS > 0) {
      const small = new fs.SmallFs(o.fsMb);
      let s: Server | undefined;
      let harnessDir = '';
      let w: Workload | undefined;
      try {
        // The floors: 16 MiB for the server's writes, 32 for creates (what host-disk-full trips).
        const senv = {
          ...env,
          SANDBOXD_DATA_DIR: small.dir,
          SANDBOXD_MIN_FREE_MB: '16',
          SANDBOXD_CREATE_MIN_FREE_MB: '32',
        };
        s = await startServer({ dataDir: fs.freshDataDir(), env: senv });
        harnessDir = s.dataDir;
        const scope = fs.scopeOf(harnessDir, small.dir);
        const acct = await newAccount(s, { tokens: 10_000_000 });
        const p = await s.api('PATCH', `/api/v1/admin/accounts/${acct.id}`, { body: { plan: 'CHAOS' } });
        if (p.status !== 200) throw new Error(`plan: ${p.status} ${p.text}`);
        const target: Target = { urls: [s.baseUrl], key: acct.key };
        w = new Workload(t, target, IMAGE);
        scopes.push({ scope, ids: w.all });
        t.topology = 'single';
        await w.fill(o.pool);
        say(
          `# single: server ${s.baseUrl}, data dir on a ${o.fsMb} MiB tmpfs, ${o.pool} sandboxes, ${o.workers} workers`,
        );
        w.start(o.workers);
        const wl = w;
        await schedule(
          t,
          o.singleFaults,
          o.singleS,
          o.gapS,
          wall0,
          'single',
          async (f) => {
            if (f === 'server-kill') {
              const t0 = performance.now();
              await s!.kill('SIGKILL');
              s = await startServer({ dataDir: harnessDir, env: senv });
              target.urls = [s.baseUrl];
              return { recoverS: await recover(t0, () => execProbe(wl)), note: 'restarted on its data dir' };
            }
            if (f === 'host-disk-full') {
              small.fill(0);
              const free = small.freeBytes();
              await sleep(o.fullHoldS * 1000);
              small.drain();
              const t0 = performance.now(); // recovery counts from the space's return
              let last = '';
              let tries = 0;
              const recoverS = await recover(t0, async () => {
                const c = await quiet(
                  target.urls[0],
                  target.key,
                  'POST',
                  '/api/v1/sandboxes',
                  { image: IMAGE },
                  120_000,
                );
                tries++;
                if (c.status !== 201) {
                  last = `${c.status} ${c.text.slice(0, 160)}`;
                  return false;
                }
                wl.all.add(c.body.sandbox.id);
                await quiet(target.urls[0], target.key, 'DELETE', `/api/v1/sandboxes/${c.body.sandbox.id}`);
                return true;
              });
              return {
                recoverS,
                note: `${free} bytes free for ${o.fullHoldS} s, then drained; ${tries} create probes${last ? `, the last refused: ${last}` : ''}`,
              };
            }
            return victimFault(t, wl, f);
          },
          say,
          faults,
        );
        await w.stop();
        await agreement(t, w, s.baseUrl, scope, 'single', [harnessDir]);
      } finally {
        await w?.stop();
        if (s) {
          await s.cleanup().catch(() => {});
          await s.kill('SIGTERM');
        }
        if (harnessDir) {
          const scope = fs.scopeOf(harnessDir, small.dir);
          const sc = scopes.find((x) => x.scope.cgroupParent === scope.cgroupParent);
          if (sc) sc.scope = scope;
          await fs.destroyScope(harnessDir, small.dir).catch((e) => t.violations.push(`single teardown: ${e}`));
        }
        small.remove();
        // SANDBOXD_E2E_KEEP=1 keeps its server logs (server-<pid>.stderr.log), as the harness does.
        if (harnessDir && !process.env.SANDBOXD_E2E_KEEP) rmSync(harnessDir, { recursive: true, force: true });
      }
    }

    // The fleet: PostgreSQL, a runner, two api replicas.
    if (o.fleetS > 0 && replicasSkip) skipped.push(`fleet: ${replicasSkip}`);
    else if (o.fleetS > 0) {
      const pair = new ReplicaPair();
      let w: Workload | undefined;
      let runnerDir = '';
      try {
        const started = await pair.start({ nodeName: 'chaos-node', image: IMAGE, durable: true });
        runnerDir = started.runner.dataDir;
        const scope = fs.scopeOf(runnerDir);
        // The pair's account is on PRO; its first sandbox joins the pool.
        const target: Target = { urls: [started.apiA.baseUrl, started.apiB.baseUrl], key: started.key };
        w = new Workload(t, target, IMAGE);
        w.all.add(started.id);
        w.pool.push({ id: started.id, busy: false, users: 0 });
        scopes.push({ scope, ids: w.all });
        t.topology = 'fleet';
        await w.fill(Math.min(o.pool, 6));
        say(`# fleet: PostgreSQL, runner ${started.runner.baseUrl}, api ${target.urls.join(' ')}`);
        w.start(o.workers);
        const wl = w;
        const runnerEnv = {
          SANDBOXD_ROLE: 'runner',
          SANDBOXD_RUNNER_TOKEN: pair.token,
          SANDBOXD_NODE_NAME: 'chaos-node',
        };
        await schedule(
          t,
          o.fleetFaults,
          o.fleetS,
          o.gapS,
          wall0,
          'fleet',
          async (f) => {
            const t0 = performance.now();
            if (f === 'runner-kill') {
              const old = pair.runner!;
              await old.kill('SIGKILL');
              pair.runner = await startServer({
                dataDir: runnerDir,
                port: old.port,
                env: runnerEnv,
                ready: runnerReady(pair.token),
              });
              return { recoverS: await recover(t0, () => execProbe(wl)), note: 'restarted on its data dir and port' };
            }
            if (f === 'api-kill') {
              const old = pair.apiB!;
              await old.kill('SIGKILL');
              pair.apiB = await startServer({ dataDir: old.dataDir, port: old.port, env: pair.apiEnv });
              return {
                recoverS: await recover(t0, () => execProbe(wl, pair.apiB!.baseUrl)),
                note: 'replica B restarted on its port',
              };
            }
            // pg-kill
            const pid = pair.pg!.crash();
            await sleep(1000);
            await pair.pg!.restart();
            const recoverS = await recover(t0, async () => {
              for (const u of target.urls) if (!(await execProbe(wl, u))) return false;
              const l = await quiet(target.urls[0], target.key, 'GET', '/api/v1/sandboxes?limit=5');
              return l.status === 200;
            });
            return { recoverS, note: `postmaster ${pid} killed, restarted after 1 s` };
          },
          say,
          faults,
        );
        await w.stop();
        await agreement(t, w, pair.apiA!.baseUrl, scope, 'fleet', [pair.apiA!.dataDir, pair.apiB!.dataDir, runnerDir]);
      } finally {
        await w?.stop();
        await pair.stop().catch((e) => t.violations.push(`fleet teardown: ${e}`));
      }
    }
  } finally {
    rmSync(base, { recursive: true, force: true });
    if (reconcileWas === undefined) delete process.env.SANDBOXD_RECONCILE_INTERVAL_MS;
    else process.env.SANDBOXD_RECONCILE_INTERVAL_MS = reconcileWas;
    if (logLevelWas === undefined) delete process.env.SANDBOXD_E2E_LOG_LEVEL;
    else process.env.SANDBOXD_E2E_LOG_LEVEL = logLevelWas;
  }
  // The host as found: lines of this run's scopes or sandboxes are leaks.
  const hostAfter = fs.hostSnapshot();
  for (const { scope, ids } of scopes) {
    for (const l of fs.scopeDiff(hostBefore, hostAfter, scope, ids)) t.violations.push(`host left: ${l}`);
    // Sandbox processes killed by the teardown may take a moment to be gone: up to 30 s.
    await fs.eventually(() => fs.scopeProcesses(scope).length === 0, 150, 200);
    for (const p of fs.scopeProcesses(scope)) t.violations.push(`process left: ${p}`);
  }
  return {
    options: o,
    requests: t.requests,
    ok: t.ok,
    byOp: t.byOp,
    refusals: t.refusals,
    faultWindow: t.faultWindow,
    errors: t.errors,
    errorSamples: t.errorSamples,
    faults,
    violations: t.violations,
    converge: t.converge,
    skipped,
    wallS: (performance.now() - wall0) / 1000,
  };
}

/** The table and the `CHAOS {json}` line. */
export function printChaos(r: ChaosResult, say: (s: string) => void = (s) => console.log(s)): void {
  const rows: string[][] = [['measure', 'value']];
  const add = (k: string, v: string) => rows.push([k, v]);
  add('wall s (single / fleet planned)', `${r.wallS.toFixed(0)} (${r.options.singleS} / ${r.options.fleetS})`);
  add('requests / ok ops', `${r.requests} / ${r.ok}`);
  for (const [op, x] of Object.entries(r.byOp).sort()) add(`  op ${op} ok/n`, `${x.ok}/${x.n}`);
  add('clear refusals by status+kind', JSON.stringify(r.refusals));
  add('connection errors in fault windows', JSON.stringify(r.faultWindow));
  add('ERRORS by kind', Object.keys(r.errors).length ? JSON.stringify(r.errors) : 'none');
  add('runtime = records after (s, per topology)', JSON.stringify(r.converge));
  add('VIOLATIONS', String(r.violations.length));
  for (const f of r.faults)
    add(
      `  fault ${f.topology} ${f.fault} @${f.atS.toFixed(0)} s`,
      `recover ${f.recoverS?.toFixed(2) ?? 'NEVER'} s: ${f.note}`,
    );
  if (r.skipped.length) add('skipped', r.skipped.join('; '));
  const w = rows[0].map((_, i) => Math.max(...rows.map((x) => x[i].length)));
  say(
    `\n## chaos\n${rows
      .map(
        (x, j) =>
          x.map((c, i) => c.padEnd(w[i])).join('  ') + (j === 0 ? `\n${w.map((n) => '-'.repeat(n)).join('  ')}` : ''),
      )
      .join('\n')}`,
  );
  if (r.errorSamples.length) say(`\nerror samples:\n  ${r.errorSamples.join('\n  ')}`);
  if (r.violations.length) say(`\nviolations:\n  ${r.violations.join('\n  ')}`);
  const recov: Record<string, number[]> = {};
  for (const f of r.faults) {
    if (f.recoverS === null) continue;
    recov[f.fault] ??= [];
    recov[f.fault].push(+f.recoverS.toFixed(2));
  }
  say(
    `CHAOS ${JSON.stringify({
      wallS: +r.wallS.toFixed(1),
      requests: r.requests,
      ok: r.ok,
      byOp: r.byOp,
      faults: r.faults.length,
      faultsByKind: Object.fromEntries(
        [...new Set(r.faults.map((f) => f.fault))].map((k) => [k, r.faults.filter((f) => f.fault === k).length]),
      ),
      recoverS: recov,
      refusals: r.refusals,
      faultWindow: r.faultWindow,
      errors: r.errors,
      violations: r.violations.length,
      converge: r.converge,
      skipped: r.skipped,
    })}`,
  );
}

const HELP = `Usage: node --import tsx test/soak/chaos.ts [options]
  --single S     seconds of the single-server topology (default ${DEFAULTS.singleS}; 0 skips it)
  --fleet S      seconds of the fleet topology (default ${DEFAULTS.fleetS}; 0 skips it)
  --workers N    workload loops (default ${DEFAULTS.workers})
  --pool N       sandboxes the workload keeps (default ${DEFAULTS.pool})
  --gap S        seconds of plain workload before each fault (default ${DEFAULTS.gapS})
  --full-hold S  seconds the host disk stays full (default ${DEFAULTS.fullHoldS})
  --faults a,b   only these faults (of ${[...SINGLE_FAULTS, ...FLEET_FAULTS].join(', ')})
Exit status 0 when there were no errors and no violations. Needs root, crun, the test images
and PostgreSQL (scripts/setup.sh --test).`;

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const o: Partial<ChaosOptions> = {};
  const argv = process.argv.slice(2);
  const num = (v: string | undefined, a: string) => {
    const n = Number(v);
    if (v === undefined || !Number.isFinite(n) || n < 0) {
      console.error(`${a}: not a number >= 0: ${v}`);
      process.exit(2);
    }
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--help' || a === '-h') {
      console.log(HELP);
      process.exit(0);
    }
    const v = argv[++i];
    if (a === '--single') o.singleS = num(v, a);
    else if (a === '--fleet') o.fleetS = num(v, a);
    else if (a === '--workers') o.workers = Math.max(1, num(v, a));
    else if (a === '--pool') o.pool = Math.max(1, num(v, a));
    else if (a === '--gap') o.gapS = num(v, a);
    else if (a === '--full-hold') o.fullHoldS = num(v, a);
    else if (a === '--faults') {
      const want = String(v).split(',');
      const bad = want.filter((f) => ![...SINGLE_FAULTS, ...FLEET_FAULTS].includes(f as FaultName));
      if (bad.length) {
        console.error(`--faults: unknown ${bad.join(', ')} (see --help)`);
        process.exit(2);
      }
      o.singleFaults = want.filter((f) => (SINGLE_FAULTS as readonly string[]).includes(f)) as FaultName[];
      o.fleetFaults = want.filter((f) => (FLEET_FAULTS as readonly string[]).includes(f)) as FaultName[];
      if (!o.singleFaults.length) o.singleS = 0;
      if (!o.fleetFaults.length) o.fleetS = 0;
    } else {
      console.error(`unknown option ${a} (see --help)`);
      process.exit(2);
    }
  }
  const r = await runChaos(o);
  printChaos(r);
  process.exit(Object.keys(r.errors).length === 0 && r.violations.length === 0 ? 0 : 1);
}
