/**
 * Load suite (issue 8): many sandboxes alive, an open-loop exec load spread across them and
 * terminals streaming at once, against the real server process on the local runtime.
 *
 *   1. starts the server on its own data dir (temp), bridge, subnet, uid range and cgroup
 *      folder (a "slot", below), with a plan LOAD from a config file; one account is moved
 *      to that plan and granted tokens through the admin API;
 *   2. creates the sandboxes (bounded parallelism), then opens the terminals on the first
 *      ones: each runs a shell loop printing numbered lines in bursts, once a second;
 *   3. runs execs (`echo <n>`, output checked) on a fixed schedule: exec n is due at
 *      t0 + n / rate, whatever happened to the others (open loop). A start sent more than
 *      `lateMs` after it was due is counted late; when `maxInFlight` requests are already
 *      waiting, the start is dropped and counted missed (never queued, so the load never turns
 *      into a closed loop). Latency counts from the time the exec was due;
 *   4. samples the server's VmRSS (/proc/<pid>/status), heap and fds (/metrics), the CPU of
 *      the server, of the sandboxes' cgroups, of this client and of the host;
 *   4b. the memory criterion. Raw RSS is not one: V8 sizes its old space to the allocation
 *      rate and gives pages back only at major collections, so under 500 exec/s RSS rose
 *      ~210 -> ~323 MiB in two minutes with the live heap flat (~60-66 MiB), and in a 7-minute
 *      run fell back to ~163 MiB at a major collection. So the server is started with
 *      test/soak/gc-probe.mjs preloaded (test-only; never in the product): every `gcEveryS`
 *      (15) seconds of the load it is sent SIGWINCH, forces two full collections and reports
 *      what survives them: the live set (heapUsed + external, i.e. JS objects and Buffers)
 *      and RSS. Memory is "flat" when, from the first three post-GC samples after the
 *      half-minute of warm-up to the last three (medians), the live set grew less than
 *      `liveGrowthMiB` (8) and post-GC RSS less than `rssGcGrowthMiB` (48). A leak grows the
 *      live set without bound and no collection gives it back: 8 MiB over 90 s at 500 exec/s
 *      is ~190 bytes per exec, so a leak of a few hundred bytes per request fails. The RSS bar
 *      is looser (malloc arenas and V8's page pool keep what they were given) and catches
 *      native leaks the heap does not see. Proof that a leak fails it: `--leak-bytes N` makes
 *      the server retain N bytes of heap per request (gc-probe.mjs). Measured (40 sandboxes,
 *      300 exec/s for 2 minutes, 10 terminals, a collection every 10 s): N = 0 grew the live
 *      set 2.6 MiB and post-GC RSS 14 MiB (flat); N = 1024 grew them 24.7 and 46.2 MiB (NOT
 *      flat, exit 1). Raw RSS and its slope are still printed, as figures, not judged;
 *   5. checks every terminal got every line, in order, and its end marker; deletes the
 *      terminals and sandboxes, stops the server, removes its host set-up and compares the
 *      host with a snapshot taken before (lines naming this run's bridge, subnet, data
 *      dir, cgroup, veths or sandboxes are leaks; other lines are other processes' activity).
 *
 * Prints a table and one line `SOAK load {json}`. Every loop is bounded in count and time.
 * Run: node --import tsx test/soak/load.ts --help
 */
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import WebSocket from 'ws';
import { LocalDriver, type LocalDriverOptions } from '../../packages/server/src/runtime/local/driver.js';
import { hostVethName } from '../../packages/server/src/runtime/local/network/addr.js';
import { hostTicks } from '../../bench/stats.js';

process.env.SANDBOXD_E2E_RUNTIME ??= 'local';
const { ADMIN_KEY, newAccount, startServer } = await import('../e2e/harness.js');
const { releaseSlot } = await import('../e2e/local-runtime.js');
type Server = Awaited<ReturnType<typeof startServer>>;

const ROOT = resolve(import.meta.dirname, '../..');
const IMAGE_DIR = process.env.SANDBOXD_TEST_IMAGE_DIR ?? join(ROOT, '.sandboxd-test/images');
const MiB = 1024 * 1024;

/** What a run does. */
export interface LoadOptions {
  sandboxes: number;
  /** Exec starts per second, spread round-robin over the sandboxes. */
  rate: number;
  durationS: number;
  terminals: number;
  /** Lines each terminal prints per second (in one burst a second). */
  termLinesPerS: number;
  createParallel: number;
  /** Requests waiting at once before a start is dropped (missed). */
  maxInFlight: number;
  /** A start sent later than this after it was due counts as late. */
  lateMs: number;
  sampleEveryS: number;
  /** Largest RSS growth from minute 1 to the last minute (raw, printed only). */
  rssFlatMiB: number;
  /** Seconds between forced full collections during the load (gc-probe.mjs). */
  gcEveryS: number;
  /** Largest growth of the post-GC live set (heapUsed + external) still called flat. */
  liveGrowthMiB: number;
  /** Largest growth of post-GC RSS still called flat. */
  rssGcGrowthMiB: number;
  /** Test-only deliberate leak: bytes the server retains per HTTP request (0 = none). */
  leakBytesPerRequest: number;
  image: string;
  logLevel: string;
  /** NODE_OPTIONS of the server process only (e.g. `--max-old-space-size=512`). */
  serverNodeOptions: string;
  /** Writes a CPU profile of the server over the load phase to this directory ('' = none). */
  cpuProfileDir: string;
  /** Extra SANDBOXD_* env of the server. */
  serverEnv: Record<string, string>;
}

export const DEFAULTS: LoadOptions = {
  sandboxes: 200,
  rate: 500,
  durationS: 120,
  terminals: 50,
  termLinesPerS: 20,
  createParallel: 8,
  maxInFlight: 1000,
  lateMs: 10,
  sampleEveryS: 5,
  rssFlatMiB: 16,
  gcEveryS: 15,
  liveGrowthMiB: 8,
  rssGcGrowthMiB: 48,
  leakBytesPerRequest: 0,
  image: 'local/busybox:latest',
  logLevel: 'warn',
  serverNodeOptions: '',
  cpuProfileDir: '',
  serverEnv: {},
};

export interface Pcts {
  n: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}
export interface MinuteRow {
  minute: number;
  due: number;
  started: number;
  late: number;
  missed: number;
  ok: number;
  errors: number;
  /** ms from due time to answer. */
  latency: Pcts;
  /** ms from send to answer. */
  service: Pcts;
  completedPerS: number;
  serverCpuPct: number;
  sandboxCpuPct: number;
  clientCpuPct: number;
  hostCpuPct: number;
  rssMiB: number;
  /** Smallest heap in use sampled in the minute: the floor after collections, where a leak shows. */
  heapFloorMiB: number;
  /** CPU ms per answered exec in the server process and in the sandboxes (terminal loops included). */
  serverCpuMsPerExec: number;
  sandboxCpuMsPerExec: number;
}
export interface TerminalResult {
  sandboxId: string;
  linesExpected: number;
  linesOk: number;
  badLines: number;
  ended: boolean;
  bytes: number;
  error?: string;
}
export interface Sample {
  runS: number;
  tS: number;
  phase: string;
  rssMiB: number;
  heapUsedMiB: number | null;
  fds: number | null;
  lagP99Ms: number | null;
  /** CPU since the previous sample, % of one core: the server process, every process in the sandboxes' cgroups, this client. */
  serverCpuPct: number;
  sandboxCpuPct: number | null;
  clientCpuPct: number;
  /** Busy share of all the host's CPUs, %. */
  hostCpuPct: number;
}
export interface LoadResult {
  options: Omit<LoadOptions, 'serverEnv'>;
  slot: number;
  requestedPerS: number;
  /** Starts sent per second over the schedule's span. */
  startedPerS: number;
  /** Successful answers per second, from t0 to the last answer. */
  achievedPerS: number;
  execs: { due: number; started: number; ok: number; late: number; missed: number; lateness: Pcts };
  errors: Record<string, number>;
  errorSamples: string[];
  latency: Pcts;
  service: Pcts;
  minutes: MinuteRow[];
  terminals: {
    count: number;
    ok: number;
    bytes: number;
    linesExpected: number;
    linesOk: number;
    failures: TerminalResult[];
    createMs: Pcts;
  };
  memory: {
    minute1MiB: number | null;
    lastMinuteMiB: number | null;
    growthMiB: number | null;
    thresholdMiB: number;
    /** Raw RSS growth below rssFlatMiB (printed, not judged). */
    rawFlat: boolean | null;
    slopeMiBPerMin: number | null;
    /** Post-GC samples: [tS, liveMiB, rssMiB]. */
    postGc: [number, number, number][];
    liveStartMiB: number | null;
    liveEndMiB: number | null;
    liveGrowthMiB: number | null;
    rssGcStartMiB: number | null;
    rssGcEndMiB: number | null;
    rssGcGrowthMiB: number | null;
    /** The criterion: post-GC live set and RSS growth under their bars (null: too few samples). */
    flat: boolean | null;
    samples: Sample[];
  };
  create: { ms: Pcts; totalS: number; failed: number };
  delete: { ms: Pcts; totalS: number; failed: number };
  client: { cpuPct: number };
  host: { leaks: string[]; others: string[]; leftProcesses: string[] };
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export function pcts(xs: ArrayLike<number>): Pcts {
  const s = Float64Array.from(xs).sort();
  const at = (p: number) =>
    s.length ? s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))] : NaN;
  return { n: s.length, p50: at(50), p90: at(90), p99: at(99), max: s.length ? s[s.length - 1] : NaN };
}

/**
 * A host slot for this run: bridge `sbxl<k>`, subnet 10.93.<4k>.0/22 (1021 sandbox
 * addresses), uids from 1.65e9 + k * 36.7e6 (560 ranges of 65536, clear of the e2e, unit
 * and proxy test slots), cgroup `sandboxd-load-<k>`. The first k whose bridge is absent.
 */
function pickSlot(dataDir: string): { k: number; opts: LocalDriverOptions } {
  for (let i = 0; i < 4; i++) {
    const k = (process.pid + i) % 4;
    if (existsSync(`/sys/class/net/sbxl${k}`)) continue;
    return {
      k,
      opts: {
        dataDir,
        imageDir: IMAGE_DIR,
        runDir: join(dataDir, 'run'),
        bridge: `sbxl${k}`,
        subnet: `10.93.${4 * k}.0/22`,
        uidRangeStart: 1_650_000_000 + k * 36_700_000,
        cgroupParent: `sandboxd-load-${k}`,
      },
    };
  }
  throw new Error('all 4 load slots are in use (bridges sbxl0-3 exist): is another load run going on?');
}
export const MAX_SANDBOXES = 550;

/** Keep-alive HTTP JSON client (node:http; lighter than fetch at hundreds of requests a second). */
class Http {
  readonly agent: Agent;
  constructor(
    private readonly base: URL,
    private readonly key: string,
    maxSockets: number,
  ) {
    // Idle sockets are closed after 30 s, as clients should (below the server's keep-alive timeout).
    this.agent = new Agent({ keepAlive: true, maxSockets, maxFreeSockets: maxSockets, timeout: 30_000 });
  }
  call(
    method: string,
    path: string,
    body?: unknown,
    timeoutMs = 90_000,
  ): Promise<{ status: number; body: any; text: string }> {
    return new Promise((res, rej) => {
      const data = body === undefined ? undefined : JSON.stringify(body);
      const headers: Record<string, string | number> = { authorization: `Bearer ${this.key}` };
      if (data !== undefined) {
        headers['content-type'] = 'application/json';
        headers['content-length'] = Buffer.byteLength(data);
      }
      const req = request(
        { host: this.base.hostname, port: this.base.port, method, path, headers, agent: this.agent },
        (r) => {
          const chunks: Buffer[] = [];
          r.on('data', (c: Buffer) => chunks.push(c));
          r.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            let parsed: unknown;
            try {
              parsed = text ? JSON.parse(text) : undefined;
            } catch {
              parsed = undefined;
            }
            res({ status: r.statusCode ?? 0, body: parsed, text });
          });
          r.on('error', rej);
        },
      );
      req.setTimeout(timeoutMs, () => req.destroy(new Error(`client timeout after ${timeoutMs} ms`)));
      req.on('error', rej);
      req.end(data);
    });
  }
}

/** Runs `fn` over `items` with at most `n` at once; returns per-item ms and failures. */
async function bounded<T>(
  items: T[],
  n: number,
  fn: (x: T, i: number) => Promise<void>,
): Promise<{ ms: number[]; failed: string[] }> {
  const ms: number[] = [];
  const failed: string[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(n, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        const t = performance.now();
        try {
          await fn(items[i], i);
          ms.push(performance.now() - t);
        } catch (e) {
          failed.push(`${i}: ${(e as Error).message}`);
        }
      }
    }),
  );
  return { ms, failed };
}

const STREAM_SCRIPT = `k=$1; secs=$2; rate=$3; i=0; s=0; pad=abcdefghijklmnopqrstuvwxyz0123456789
while [ $s -lt $secs ]; do
  j=0
  while [ $j -lt $rate ]; do echo "T$k:$i:$pad"; i=$((i+1)); j=$((j+1)); done
  s=$((s+1)); sleep 1
done
echo "T$k:END:$i"
`;
const PAD = 'abcdefghijklmnopqrstuvwxyz0123456789';

/** One terminal client: counts bytes and checks the numbered lines as they stream in. */
class StreamCheck {
  bytes = 0;
  linesOk = 0;
  badLines = 0;
  ended = false;
  endCount = -1;
  ready = false;
  closed: { code: number; reason: string } | null = null;
  private partial = '';
  private readonly done: Promise<void>;
  private resolveDone!: () => void;
  constructor(
    readonly k: number,
    readonly ws: WebSocket,
  ) {
    this.done = new Promise((r) => (this.resolveDone = r));
    ws.on('message', (d: Buffer, binary: boolean) => {
      if (!binary) {
        try {
          if (JSON.parse(d.toString()).type === 'ready') this.ready = true;
        } catch {
          /* counted below */
        }
        return;
      }
      this.bytes += d.length;
      const lines = (this.partial + d.toString('latin1')).split('\n');
      this.partial = lines.pop()!;
      if (this.partial.length > 65536) {
        this.badLines++;
        this.partial = '';
      }
      for (const raw of lines) this.line(raw.replace(/\r$/, ''));
    });
    ws.on('close', (code, reason) => {
      this.closed = { code, reason: reason.toString() };
      this.resolveDone();
    });
    ws.on('error', () => {});
  }
  private line(l: string): void {
    const end = /^T(\d+):END:(\d+)$/.exec(l);
    if (end) {
      if (Number(end[1]) !== this.k) {
        this.badLines++;
        return;
      }
      this.ended = true;
      this.endCount = Number(end[2]);
      this.resolveDone();
      return;
    }
    const m = /^T(\d+):(\d+):(.*)$/.exec(l);
    if (!m) return; // prompt, echo of the typed command
    if (Number(m[1]) === this.k && Number(m[2]) === this.linesOk && m[3] === PAD) this.linesOk++;
    else this.badLines++;
  }
  /** Resolves at the end marker or close, or after `ms`. */
  async wait(ms: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.done, new Promise<void>((r) => (timer = setTimeout(r, ms)))]);
    clearTimeout(timer);
  }
}

function cpuTicks(pid: number): number {
  const st = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
  return Number(f[11]) + Number(f[12]);
}
const TICK = 100; // USER_HZ
/** ns of CPU used by every process under cgroup folder `parent` (v1 cpuacct, else v2 cpu.stat), or null. */
function cgroupCpuNs(parent: string): number | null {
  try {
    return Number(readFileSync(`/sys/fs/cgroup/cpuacct/${parent}/cpuacct.usage`, 'utf8'));
  } catch {
    /* v2? */
  }
  try {
    const m = /^usage_usec (\d+)$/m.exec(readFileSync(`/sys/fs/cgroup/${parent}/cpu.stat`, 'utf8'));
    return m ? Number(m[1]) * 1000 : null;
  } catch {
    return null;
  }
}
const NCPU =
  readFileSync('/proc/cpuinfo', 'utf8')
    .split('\n')
    .filter((l) => l.startsWith('processor')).length || 1;

function vmRssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}
function metric(text: string, name: string): number | null {
  const m = new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.eE+-]+)$`, 'm').exec(text);
  return m ? Number(m[1]) : null;
}

/** Mount points under `dir`, deepest first (from /proc/self/mountinfo, octal escapes decoded). */
function mountsUnder(dir: string): string[] {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4])
    .filter((m): m is string => !!m)
    .map((m) => m.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))))
    .filter((m) => m.startsWith(`${dir}/`))
    .sort((x, y) => y.length - x.length);
}

function hostSnapshot(): string[] {
  return execFileSync('bash', [join(ROOT, 'scripts/host-snapshot.sh')], { encoding: 'utf8', maxBuffer: 64 * MiB })
    .split('\n')
    .filter(Boolean);
}

/** Processes left that belong to this run: in its cgroup folder, or naming its data dir. */
function leftProcesses(dataDir: string, cgroupParent: string): string[] {
  const out: string[] = [];
  for (const p of readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
    if (Number(p) === process.pid) continue;
    try {
      const cg = readFileSync(`/proc/${p}/cgroup`, 'utf8');
      const cmd = readFileSync(`/proc/${p}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
      if (cg.includes(`/${cgroupParent}/`) || cmd.includes(dataDir)) out.push(`${p} ${cmd.slice(0, 200)}`);
    } catch {
      /* gone */
    }
  }
  return out;
}

/** Runs the load; never throws for load errors (they are in the result), only for set-up failures. */
export async function runLoad(
  opt: Partial<LoadOptions> = {},
  say: (s: string) => void = (s) => console.log(s),
): Promise<LoadResult> {
  const o: LoadOptions = { ...DEFAULTS, ...opt };
  if (o.sandboxes < 1 || o.sandboxes > MAX_SANDBOXES) throw new Error(`sandboxes must be 1..${MAX_SANDBOXES}`);
  if (o.terminals > o.sandboxes) throw new Error('terminals must be <= sandboxes (one per sandbox)');
  if (!(o.rate > 0) || !(o.durationS > 0)) throw new Error('rate and duration must be positive');
  const before = hostSnapshot();
  const base = mkdtempSync(join(tmpdir(), 'sandboxd-load-'));
  chmodSync(base, 0o711);
  const dataDir = join(base, 'data');
  const { k: slot, opts: drv } = pickSlot(dataDir);
  const leaseMs = (o.durationS + 900) * 1000;
  writeFileSync(
    join(base, 'config.json'),
    JSON.stringify({
      plans: {
        LOAD: {
          maxLifetimeMs: 86_400_000,
          concurrency: o.sandboxes + 5,
          signupTokens: 0,
          limits: { memoryBytes: 512 * MiB, cpus: 1, pids: 256, rootDiskBytes: 256 * MiB },
        },
      },
    }),
  );
  mkdirSync(dataDir);
  chmodSync(dataDir, 0o711);
  const sbIds: string[] = [];
  const errors: Record<string, number> = {};
  const errorSamples: string[] = [];
  const err = (kind: string, detail: string) => {
    errors[kind] = (errors[kind] ?? 0) + 1;
    if (errorSamples.length < 20) errorSamples.push(`${kind}: ${detail.slice(0, 300)}`);
  };
  let server: Server | undefined;
  let pid = 0;
  const samples: Sample[] = [];
  let phase = 'start';
  let t0 = 0;
  const clientCpu0 = process.cpuUsage();
  const wall0 = performance.now();
  let sampler: NodeJS.Timeout | undefined;
  let veths: string[] = [];
  let result: Partial<LoadResult> = {};
  const gcFile = join(base, 'gc-probe.jsonl');
  const postGc: [number, number, number][] = [];
  let gcTimer: NodeJS.Timeout | undefined;
  try {
    say(`# load: slot ${slot} (bridge ${drv.bridge}, subnet ${drv.subnet}), data ${dataDir}`);
    server = await startServer({
      dataDir,
      env: {
        SANDBOXD_RUNTIME: 'local',
        SANDBOXD_CONFIG: join(base, 'config.json'),
        SANDBOXD_LOG_LEVEL: o.logLevel,
        SANDBOXD_IMAGE_DIR: drv.imageDir,
        SANDBOXD_RUN_DIR: drv.runDir!,
        SANDBOXD_BRIDGE: drv.bridge!,
        SANDBOXD_SUBNET: drv.subnet!,
        SANDBOXD_UID_RANGE_START: String(drv.uidRangeStart),
        SANDBOXD_CGROUP_PARENT: drv.cgroupParent!,
        NODE_OPTIONS: [
          o.serverNodeOptions,
          `--import ${pathToFileURL(join(import.meta.dirname, 'gc-probe.mjs')).href}`,
          o.cpuProfileDir ? `--import ${pathToFileURL(join(import.meta.dirname, 'cpu-profile.mjs')).href}` : '',
        ]
          .join(' ')
          .trim(),
        ...(o.cpuProfileDir ? { SOAK_PROFILE_DIR: resolve(o.cpuProfileDir) } : {}),
        SOAK_GC_FILE: gcFile,
        SOAK_LEAK_BYTES_PER_REQUEST: String(o.leakBytesPerRequest),
        ...o.serverEnv,
      },
    });
    pid = server.proc.pid!;
    const admin = new Http(new URL(server.baseUrl), ADMIN_KEY, 4);
    const acct = await newAccount(server);
    const patch = await admin.call('PATCH', `/api/v1/admin/accounts/${acct.id}`, { plan: 'LOAD' });
    if (patch.status !== 200) throw new Error(`admin plan change: ${patch.status} ${patch.text}`);
    const grant = await admin.call('POST', `/api/v1/admin/accounts/${acct.id}/tokens`, {
      tokens: o.sandboxes * Math.ceil(leaseMs / 60_000) + 100,
      reason: 'load test',
    });
    if (grant.status !== 200) throw new Error(`admin grant: ${grant.status} ${grant.text}`);
    admin.agent.destroy();
    const http = new Http(new URL(server.baseUrl), acct.key, o.maxInFlight + 64);

    // Sampler: RSS from /proc, heap/fds/lag from /metrics, CPU of the server and the host.
    const cpuNow = () => ({
      t: performance.now(),
      server: cpuTicks(pid),
      host: hostTicks(),
      sandboxes: cgroupCpuNs(drv.cgroupParent!),
      client: process.cpuUsage(),
    });
    let lastCpu = cpuNow();
    let sampling = false;
    const sample = async () => {
      if (sampling || !server || server.proc.exitCode !== null) return;
      sampling = true;
      try {
        const now = performance.now();
        const cpu = cpuNow();
        const dt = (cpu.t - lastCpu.t) / 1000;
        const serverCpuPct = dt > 0 ? ((cpu.server - lastCpu.server) / TICK / dt) * 100 : 0;
        const sandboxCpuPct =
          dt > 0 && cpu.sandboxes !== null && lastCpu.sandboxes !== null
            ? ((cpu.sandboxes - lastCpu.sandboxes) / 1e9 / dt) * 100
            : null;
        const cu = process.cpuUsage(lastCpu.client);
        const clientCpuPct = dt > 0 ? ((cu.user + cu.system) / 1e6 / dt) * 100 : 0;
        const hostCpuPct =
          cpu.host.total > lastCpu.host.total
            ? ((cpu.host.busy - lastCpu.host.busy) / (cpu.host.total - lastCpu.host.total)) * 100
            : 0;
        lastCpu = cpu;
        const rssMiB = vmRssMiB(pid);
        let text = '';
        try {
          text = (await http.call('GET', '/metrics', undefined, 10_000)).text;
        } catch {
          /* sample without it */
        }
        const heap = metric(text, 'sandboxd_process_nodejs_heap_size_used_bytes');
        const lag = metric(text, 'sandboxd_process_nodejs_eventloop_lag_p99_seconds');
        samples.push({
          runS: (now - wall0) / 1000,
          tS: t0 ? (now - t0) / 1000 : NaN,
          phase,
          rssMiB,
          heapUsedMiB: heap === null ? null : heap / MiB,
          fds: metric(text, 'sandboxd_process_process_open_fds'),
          lagP99Ms: lag === null ? null : lag * 1000,
          serverCpuPct,
          sandboxCpuPct,
          clientCpuPct,
          hostCpuPct,
        });
      } catch {
        /* the server may be exiting */
      } finally {
        sampling = false;
      }
    };
    sampler = setInterval(() => void sample(), o.sampleEveryS * 1000);

    // Create.
    phase = 'create';
    const createT = performance.now();
    const created = await bounded(Array.from({ length: o.sandboxes }), o.createParallel, async () => {
      const r = await http.call('POST', '/api/v1/sandboxes', { image: o.image, timeoutMs: leaseMs });
      if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`);
      sbIds.push(r.body.sandbox.id);
    });
    const createS = (performance.now() - createT) / 1000;
    for (const f of created.failed) err('create', f);
    say(
      `# created ${sbIds.length}/${o.sandboxes} sandboxes in ${createS.toFixed(1)} s (p50 ${pcts(created.ms).p50.toFixed(0)} ms)`,
    );
    result.create = { ms: pcts(created.ms), totalS: createS, failed: created.failed.length };
    if (sbIds.length === 0) throw new Error(`no sandbox could be created: ${created.failed[0]}`);

    // Terminals, ready but idle until the load starts.
    phase = 'terminals';
    const checks: StreamCheck[] = [];
    const termIds = new Map<StreamCheck, string>();
    const termSetup = await bounded(sbIds.slice(0, o.terminals), Math.min(o.createParallel, 8), async (sb, k) => {
      const w = await http.call('POST', `/api/v1/sandboxes/${sb}/exec`, {
        command: `cat > /tmp/stream.sh <<'EOF'\n${STREAM_SCRIPT}EOF`,
      });
      if (w.status !== 200 || w.body?.exitCode !== 0) throw new Error(`write stream script: ${w.status} ${w.text}`);
      const t = await http.call('POST', `/api/v1/sandboxes/${sb}/terminals`, { shell: 'sh', cols: 200, rows: 50 });
      if (t.status !== 201) throw new Error(`create terminal: ${t.status} ${t.text}`);
      const url = `${server!.baseUrl.replace(/^http/, 'ws')}/api/v1/sandboxes/${sb}/terminals/${t.body.terminal.id}/ws`;
      const ws = new WebSocket(url, { headers: { authorization: `Bearer ${acct.key}` }, handshakeTimeout: 20_000 });
      const c = new StreamCheck(k, ws);
      await new Promise<void>((res, rej) => {
        ws.once('open', () => res());
        ws.once('error', rej);
        ws.once('unexpected-response', (_q, r) => rej(new Error(`upgrade ${r.statusCode}`)));
      });
      for (let i = 0; i < 200 && !c.ready; i++) await sleep(25);
      if (!c.ready) throw new Error('no ready message within 5 s');
      checks[k] = c;
      termIds.set(c, t.body.terminal.id);
    });
    for (const f of termSetup.failed) err('terminal_setup', f);
    const termCreateMs = pcts(termSetup.ms);
    say(`# ${termIds.size}/${o.terminals} terminals ready`);

    // The load.
    phase = 'load';
    const total = Math.round(o.rate * o.durationS);
    const dueAt = (n: number) => t0 + (n * 1000) / o.rate;
    const lat = new Float64Array(total).fill(NaN);
    const svc = new Float64Array(total).fill(NaN);
    const lateness = new Float64Array(total).fill(NaN);
    const doneAt = new Float64Array(total).fill(NaN);
    const status = new Uint8Array(total); // 0 not started, 1 missed, 2 in flight, 3 ok, 4 error
    let inFlight = 0;
    let next = 0;
    const fire = (n: number) => {
      const sb = sbIds[n % sbIds.length];
      const sent = performance.now();
      lateness[n] = sent - dueAt(n);
      status[n] = 2;
      inFlight++;
      http
        .call('POST', `/api/v1/sandboxes/${sb}/exec`, { command: `echo ${n}` })
        .then(
          (r) => {
            const end = performance.now();
            if (r.status !== 200) err(`http_${r.status}`, `${sb}: ${r.text}`);
            else if (r.body?.exitCode !== 0) err('exit_code', `${sb}: ${r.text}`);
            else if (r.body.stdout !== `${n}\n`)
              err('wrong_output', `${sb}: ${JSON.stringify(r.body.stdout)} for ${n}`);
            else {
              status[n] = 3;
              lat[n] = end - dueAt(n);
              svc[n] = end - sent;
              doneAt[n] = end;
              return;
            }
            status[n] = 4;
            doneAt[n] = end;
          },
          (e: Error) => {
            err(
              /timeout/.test(e.message) ? 'client_timeout' : `network_${(e as NodeJS.ErrnoException).code ?? 'error'}`,
              e.message,
            );
            status[n] = 4;
            doneAt[n] = performance.now();
          },
        )
        .finally(() => inFlight--);
    };
    t0 = performance.now() + 200;
    // Forced full collections during the load (gc-probe.mjs): what survives them, over time.
    let gcBusy = false;
    const gcProbe = async () => {
      if (gcBusy || !server || server.proc.exitCode !== null) return;
      gcBusy = true;
      try {
        await gcProbeOnce();
      } finally {
        gcBusy = false;
      }
    };
    const gcProbeOnce = async () => {
      const before = postGc.length;
      const tS = (performance.now() - t0) / 1000;
      try {
        process.kill(pid, 'SIGWINCH');
      } catch {
        return;
      }
      for (let i = 0; i < 100; i++) {
        await sleep(50);
        const lines = existsSync(gcFile) ? readFileSync(gcFile, 'utf8').trim().split('\n').filter(Boolean) : [];
        if (lines.length > before) {
          const m = JSON.parse(lines[lines.length - 1]);
          postGc.push([tS, (m.heapUsed + m.external) / MiB, m.rss / MiB]);
          return;
        }
      }
      err('gc_probe', `no post-GC sample within 5 s at ${tS.toFixed(0)} s`);
    };
    gcTimer = setInterval(() => void gcProbe(), o.gcEveryS * 1000);
    if (o.cpuProfileDir) process.kill(pid, 'SIGUSR2'); // starts the profiler (cpu-profile.mjs)
    for (const c of checks)
      if (c) c.ws.send(Buffer.from(`sh /tmp/stream.sh ${c.k} ${Math.ceil(o.durationS)} ${o.termLinesPerS}\r`));
    const hardEnd = t0 + o.durationS * 1000 + 30_000;
    while (next < total && performance.now() < hardEnd) {
      const now = performance.now();
      const due = Math.min(total, Math.floor(((now - t0) * o.rate) / 1000) + 1);
      for (; next < due; next++) {
        if (inFlight >= o.maxInFlight) {
          status[next] = 1;
          lateness[next] = now - dueAt(next);
          continue;
        }
        fire(next);
      }
      await sleep(Math.max(0, Math.min(2, dueAt(next) - performance.now())));
    }
    for (; next < total; next++) status[next] = 1; // only past the hard end
    const lastStart = performance.now();
    clearInterval(gcTimer);
    for (let i = 0; i < 100 && gcBusy; i++) await sleep(50);
    if (!postGc.length || (performance.now() - t0) / 1000 - postGc[postGc.length - 1][0] > o.gcEveryS / 2)
      await gcProbe();
    if (o.cpuProfileDir) process.kill(pid, 'SIGUSR2'); // writes the profile of the load phase
    say(`# all starts sent; waiting for ${inFlight} in flight`);
    for (let i = 0; i < 1200 && inFlight > 0; i++) await sleep(100);
    phase = 'drain';

    // Terminals: wait for every end marker (they run durationS seconds from t0), then delete.
    const termDeadline = t0 + o.durationS * 1000 + 60_000;
    const termResults: TerminalResult[] = [];
    for (const c of checks) {
      if (!c) continue;
      await c.wait(Math.max(0, termDeadline - performance.now()));
      const expected = Math.ceil(o.durationS) * o.termLinesPerS;
      const r: TerminalResult = {
        sandboxId: sbIds[c.k],
        linesExpected: expected,
        linesOk: c.linesOk,
        badLines: c.badLines,
        ended: c.ended,
        bytes: c.bytes,
      };
      if (!c.ended)
        r.error = c.closed
          ? `closed ${c.closed.code} ${c.closed.reason} before its end marker`
          : 'no end marker in time';
      else if (c.endCount !== expected || c.linesOk !== expected || c.badLines)
        r.error = `printed ${c.endCount}, got ${c.linesOk} in order, ${c.badLines} bad`;
      if (r.error) err('terminal', `${r.sandboxId}: ${r.error}`);
      termResults.push(r);
      const del = await http
        .call('DELETE', `/api/v1/sandboxes/${sbIds[c.k]}/terminals/${termIds.get(c)}`)
        .catch((e: Error) => ({ status: 0, text: e.message }));
      if (del.status !== 204) err('terminal_delete', `${del.status} ${del.text}`);
      c.ws.terminate();
    }
    await sample();

    // Figures. Samples get their time from the load's start (negative before it).
    for (const s of samples) s.tS = s.runS - (t0 - wall0) / 1000;
    const okIdx: number[] = [];
    for (let n = 0; n < total; n++) if (status[n] === 3) okIdx.push(n);
    let lastDone = t0 + 1;
    for (const n of okIdx) lastDone = Math.max(lastDone, doneAt[n]);
    const started = status.reduce((a, s) => a + (s >= 2 ? 1 : 0), 0);
    const missed = status.reduce((a, s) => a + (s === 1 ? 1 : 0), 0);
    const lateN = lateness.reduce((a, l) => a + (l > o.lateMs ? 1 : 0), 0);
    const minutes: MinuteRow[] = [];
    const nMin = Math.ceil(o.durationS / 60);
    for (let m = 0; m < nMin; m++) {
      const lo = Math.ceil(m * 60 * o.rate);
      const hi = Math.min(total, Math.ceil((m + 1) * 60 * o.rate));
      const l: number[] = [];
      const s2: number[] = [];
      let st = 0;
      let late = 0;
      let miss = 0;
      let ok = 0;
      let errs = 0;
      for (let n = lo; n < hi; n++) {
        if (status[n] >= 2) st++;
        if (status[n] === 1) miss++;
        if (lateness[n] > o.lateMs && status[n] >= 2) late++;
        if (status[n] === 3) {
          ok++;
          l.push(lat[n]);
          s2.push(svc[n]);
        }
        if (status[n] === 4) errs++;
      }
      const winLo = t0 + m * 60_000;
      const winHi = Math.min(t0 + (m + 1) * 60_000, t0 + o.durationS * 1000);
      let completed = 0;
      for (const n of okIdx) if (doneAt[n] >= winLo && doneAt[n] < winHi) completed++;
      const ss = samples.filter((x) => x.phase === 'load' && x.tS >= m * 60 && x.tS < (m + 1) * 60);
      const avg = (f: (x: Sample) => number) => {
        const v = ss.map(f).filter((x) => !Number.isNaN(x));
        return v.length ? v.reduce((a, x) => a + x, 0) / v.length : NaN;
      };
      minutes.push({
        minute: m + 1,
        due: hi - lo,
        started: st,
        late,
        missed: miss,
        ok,
        errors: errs,
        latency: pcts(l),
        service: pcts(s2),
        completedPerS: completed / ((winHi - winLo) / 1000),
        serverCpuPct: avg((x) => x.serverCpuPct),
        sandboxCpuPct: avg((x) => x.sandboxCpuPct ?? NaN),
        clientCpuPct: avg((x) => x.clientCpuPct),
        hostCpuPct: avg((x) => x.hostCpuPct),
        rssMiB: ss.length ? pcts(ss.map((x) => x.rssMiB)).p50 : NaN,
        heapFloorMiB: Math.min(...ss.map((x) => x.heapUsedMiB ?? Infinity)),
        serverCpuMsPerExec: (avg((x) => x.serverCpuPct) * 10) / (completed / ((winHi - winLo) / 1000) || NaN),
        sandboxCpuMsPerExec: (avg((x) => x.sandboxCpuPct ?? NaN) * 10) / (completed / ((winHi - winLo) / 1000) || NaN),
      });
    }
    // Memory: median RSS over the second half of minute 1 vs of the last minute (warm-up excluded).
    const half = (m: number) =>
      samples.filter((x) => x.phase === 'load' && x.tS >= m * 60 + 30 && x.tS < (m + 1) * 60).map((x) => x.rssMiB);
    const m1 = half(0);
    const mL = half(nMin - 1);
    const med = (xs: number[]) => (xs.length ? pcts(xs).p50 : null);
    const growth = nMin >= 2 && m1.length && mL.length ? med(mL)! - med(m1)! : null;
    const loadS = samples.filter((x) => x.phase === 'load' && x.tS >= 0);
    let slope: number | null = null;
    if (loadS.length >= 3) {
      const mx = loadS.reduce((a, x) => a + x.tS, 0) / loadS.length;
      const my = loadS.reduce((a, x) => a + x.rssMiB, 0) / loadS.length;
      const num = loadS.reduce((a, x) => a + (x.tS - mx) * (x.rssMiB - my), 0);
      const den = loadS.reduce((a, x) => a + (x.tS - mx) ** 2, 0);
      slope = den > 0 ? (num / den) * 60 : null;
    }
    // The criterion: post-GC samples after the warm-up, first three vs last three (medians).
    const warm = postGc.filter(([t]) => t >= 30);
    const enough = warm.length >= 6;
    const medOf = (xs: number[]) => (xs.length ? pcts(xs).p50 : null);
    const liveStart = enough ? medOf(warm.slice(0, 3).map((x) => x[1])) : null;
    const liveEnd = enough ? medOf(warm.slice(-3).map((x) => x[1])) : null;
    const rssStart = enough ? medOf(warm.slice(0, 3).map((x) => x[2])) : null;
    const rssEnd = enough ? medOf(warm.slice(-3).map((x) => x[2])) : null;
    const liveGrowth = enough ? liveEnd! - liveStart! : null;
    const rssGcGrowth = enough ? rssEnd! - rssStart! : null;
    result = {
      ...result,
      requestedPerS: o.rate,
      startedPerS: started / Math.max(0.001, (Math.min(lastStart, t0 + o.durationS * 1000) - t0) / 1000),
      achievedPerS: okIdx.length / Math.max(0.001, (lastDone - t0) / 1000),
      execs: {
        due: total,
        started,
        ok: okIdx.length,
        late: lateN,
        missed,
        lateness: pcts(Array.from(lateness).filter((x) => !Number.isNaN(x))),
      },
      latency: pcts(okIdx.map((n) => lat[n])),
      service: pcts(okIdx.map((n) => svc[n])),
      minutes,
      terminals: {
        count: termResults.length,
        ok: termResults.filter((r) => !r.error).length,
        bytes: termResults.reduce((a, r) => a + r.bytes, 0),
        linesExpected: termResults.reduce((a, r) => a + r.linesExpected, 0),
        linesOk: termResults.reduce((a, r) => a + r.linesOk, 0),
        failures: termResults.filter((r) => r.error),
        createMs: termCreateMs,
      },
      memory: {
        minute1MiB: med(m1),
        lastMinuteMiB: med(mL),
        growthMiB: growth,
        thresholdMiB: o.rssFlatMiB,
        rawFlat: growth === null ? null : growth < o.rssFlatMiB,
        slopeMiBPerMin: slope,
        postGc,
        liveStartMiB: liveStart,
        liveEndMiB: liveEnd,
        liveGrowthMiB: liveGrowth,
        rssGcStartMiB: rssStart,
        rssGcEndMiB: rssEnd,
        rssGcGrowthMiB: rssGcGrowth,
        flat: !enough ? null : liveGrowth! < o.liveGrowthMiB && rssGcGrowth! < o.rssGcGrowthMiB,
        samples,
      },
    };

    // Delete.
    phase = 'delete';
    try {
      veths = execFileSync('ip', ['-o', 'link', 'show', 'master', drv.bridge!], { encoding: 'utf8' })
        .split('\n')
        .map((l) => l.split(': ')[1]?.split('@')[0])
        .filter(Boolean) as string[];
    } catch {
      /* none */
    }
    const deleteT = performance.now();
    const deleted = await bounded(sbIds, o.createParallel, async (sb) => {
      const r = await http.call('DELETE', `/api/v1/sandboxes/${sb}`);
      if (r.status !== 204) throw new Error(`delete ${sb}: ${r.status} ${r.text}`);
    });
    for (const f of deleted.failed) err('delete', f);
    result.delete = {
      ms: pcts(deleted.ms),
      totalS: (performance.now() - deleteT) / 1000,
      failed: deleted.failed.length,
    };
    http.agent.destroy();
  } finally {
    if (sampler) clearInterval(sampler);
    if (gcTimer) clearInterval(gcTimer);
    if (server) await server.stop({ keepData: true }).catch((e) => err('server_stop', (e as Error).message));
    await new LocalDriver(drv).destroyAll().catch((e) => err('teardown', (e as Error).message));
    releaseSlot(dataDir); // the harness's claim of a host slot (this run's network settings are its own)
    // rm -r crosses mount points: never run it over something still mounted.
    for (const m of mountsUnder(base)) {
      try {
        execFileSync('umount', [m], { stdio: 'ignore' });
      } catch {
        /* reported below */
      }
    }
    const stillMounted = mountsUnder(base);
    for (const m of stillMounted) err('teardown', `still mounted after teardown: ${m}`);
    if (!process.env.SANDBOXD_E2E_KEEP && stillMounted.length === 0) {
      try {
        rmSync(base, { recursive: true, force: true });
      } catch (e) {
        err('teardown', (e as Error).message);
      }
    }
  }
  // The host as found: lines of this run are leaks; the rest is other processes' activity.
  const after = hostSnapshot();
  const b = new Set(before);
  const a = new Set(after);
  const diff = [
    ...after.filter((l) => !b.has(l)).map((l) => `+ ${l}`),
    ...before.filter((l) => !a.has(l)).map((l) => `- ${l}`),
  ];
  const ours = [
    drv.bridge!,
    base,
    drv.cgroupParent!,
    drv.subnet!.replace(/\.0\/22$/, '.'),
    ...veths,
    ...sbIds.flatMap((id) => [id, hostVethName(id)]),
  ];
  const leaks = diff.filter((l) => ours.some((x) => l.includes(x)));
  const others = diff.filter((l) => !leaks.includes(l));
  const left = leftProcesses(base, drv.cgroupParent!);
  for (const l of leaks) err('host_leak', l);
  for (const p of left) err('left_process', p);
  const cpu = process.cpuUsage(clientCpu0);
  return {
    options: { ...o, serverEnv: undefined } as unknown as LoadResult['options'],
    slot,
    errors,
    errorSamples,
    client: { cpuPct: ((cpu.user + cpu.system) / 1000 / (performance.now() - wall0)) * 100 },
    host: { leaks, others, leftProcesses: left },
    ...(result as Omit<LoadResult, 'errors' | 'errorSamples' | 'client' | 'host' | 'options' | 'slot'>),
  };
}

const f1 = (x: number | null | undefined) => (x === null || x === undefined || Number.isNaN(x) ? '-' : x.toFixed(1));

/** The table and the `SOAK load {json}` line. */
export function printResult(r: LoadResult, say: (s: string) => void = (s) => console.log(s)): void {
  const rows: string[][] = [['measure', 'value']];
  const add = (k: string, v: string) => rows.push([k, v]);
  add(
    'sandboxes / terminals / duration',
    `${r.options.sandboxes} / ${r.options.terminals} / ${r.options.durationS} s (slot ${r.slot}, ${NCPU} CPUs)`,
  );
  add(
    'exec/s requested / started / achieved (ok)',
    `${r.requestedPerS} / ${f1(r.startedPerS)} / ${f1(r.achievedPerS)}`,
  );
  if (r.execs) {
    add('execs due / started / ok', `${r.execs.due} / ${r.execs.started} / ${r.execs.ok}`);
    add(
      `starts late (> ${r.options.lateMs} ms) / missed (${r.options.maxInFlight} in flight)`,
      `${r.execs.late} / ${r.execs.missed}`,
    );
    add(
      'start lateness p50 / p99 / max ms',
      `${f1(r.execs.lateness.p50)} / ${f1(r.execs.lateness.p99)} / ${f1(r.execs.lateness.max)}`,
    );
    add(
      'exec latency from due p50 / p90 / p99 / max ms',
      `${f1(r.latency.p50)} / ${f1(r.latency.p90)} / ${f1(r.latency.p99)} / ${f1(r.latency.max)}`,
    );
    add(
      'exec service time p50 / p90 / p99 / max ms',
      `${f1(r.service.p50)} / ${f1(r.service.p90)} / ${f1(r.service.p99)} / ${f1(r.service.max)}`,
    );
  }
  add('errors', Object.keys(r.errors).length ? JSON.stringify(r.errors) : 'none');
  if (r.terminals) {
    add(
      'terminals ok / lines in order / bytes received',
      `${r.terminals.ok}/${r.terminals.count} / ${r.terminals.linesOk}/${r.terminals.linesExpected} / ${r.terminals.bytes}`,
    );
    add('terminal create+connect p50 / max ms', `${f1(r.terminals.createMs.p50)} / ${f1(r.terminals.createMs.max)}`);
  }
  if (r.memory) {
    add(
      'server RSS minute 1 / last minute (median, 2nd half) MiB',
      `${f1(r.memory.minute1MiB)} / ${f1(r.memory.lastMinuteMiB)}`,
    );
    add(
      'raw RSS growth MiB (V8 heap sizing; printed, not judged)',
      `${f1(r.memory.growthMiB)} (under ${r.memory.thresholdMiB}: ${r.memory.rawFlat === null ? 'n/a' : r.memory.rawFlat ? 'yes' : 'no'})`,
    );
    add('RSS slope over the load MiB/min', f1(r.memory.slopeMiBPerMin));
    add(
      'post-GC live set (heap+external) start / end / growth MiB',
      `${f1(r.memory.liveStartMiB)} / ${f1(r.memory.liveEndMiB)} / ${f1(r.memory.liveGrowthMiB)} (bar ${r.options.liveGrowthMiB})`,
    );
    add(
      'post-GC RSS start / end / growth MiB',
      `${f1(r.memory.rssGcStartMiB)} / ${f1(r.memory.rssGcEndMiB)} / ${f1(r.memory.rssGcGrowthMiB)} (bar ${r.options.rssGcGrowthMiB})`,
    );
    add(
      'memory flat (post-GC criterion)?',
      r.memory.flat === null ? 'n/a (under 6 post-GC samples after warm-up)' : r.memory.flat ? 'yes' : 'NO',
    );
    add(
      'post-GC samples (t s: live / RSS MiB)',
      r.memory.postGc.map(([t, l, rs]) => `${t.toFixed(0)}: ${f1(l)}/${f1(rs)}`).join('  '),
    );
  }
  if (r.create)
    add(
      'create p50 / p99 / max ms; total s',
      `${f1(r.create.ms.p50)} / ${f1(r.create.ms.p99)} / ${f1(r.create.ms.max)}; ${f1(r.create.totalS)}`,
    );
  if (r.delete)
    add(
      'delete p50 / p99 / max ms; total s',
      `${f1(r.delete.ms.p50)} / ${f1(r.delete.ms.p99)} / ${f1(r.delete.ms.max)}; ${f1(r.delete.totalS)}`,
    );
  add('load client CPU % of one core (whole run)', f1(r.client.cpuPct));
  add(
    'host: leaks / processes left / other activity',
    `${r.host.leaks.length} / ${r.host.leftProcesses.length} / ${r.host.others.length} lines`,
  );
  const table = (t: string[][]) => {
    const w = t[0].map((_, i) => Math.max(...t.map((x) => x[i].length)));
    return t
      .map(
        (x, j) =>
          x.map((c, i) => c.padEnd(w[i])).join('  ') + (j === 0 ? `\n${w.map((n) => '-'.repeat(n)).join('  ')}` : ''),
      )
      .join('\n');
  };
  say(`\n## load\n${table(rows)}`);
  if (r.minutes?.length) {
    const m = [
      [
        'minute',
        'due',
        'started',
        'late',
        'missed',
        'ok',
        'errors',
        'ok/s',
        'p50 ms',
        'p90 ms',
        'p99 ms',
        'max ms',
        'svc p50',
        'svc p99',
        'CPU % server',
        'sandboxes',
        'client',
        `host (${NCPU} CPUs)`,
        'CPU ms/exec server',
        'sandboxes',
        'RSS MiB',
        'heap floor MiB',
      ],
    ];
    for (const x of r.minutes) {
      m.push([
        String(x.minute),
        String(x.due),
        String(x.started),
        String(x.late),
        String(x.missed),
        String(x.ok),
        String(x.errors),
        f1(x.completedPerS),
        f1(x.latency.p50),
        f1(x.latency.p90),
        f1(x.latency.p99),
        f1(x.latency.max),
        f1(x.service.p50),
        f1(x.service.p99),
        f1(x.serverCpuPct),
        f1(x.sandboxCpuPct),
        f1(x.clientCpuPct),
        f1(x.hostCpuPct),
        x.serverCpuMsPerExec.toFixed(2),
        x.sandboxCpuMsPerExec.toFixed(2),
        f1(x.rssMiB),
        f1(Number.isFinite(x.heapFloorMiB) ? x.heapFloorMiB : NaN),
      ]);
    }
    say(`\n${table(m)}`);
  }
  if (r.memory?.samples.length) {
    say(
      `\nsamples (t s from load start: RSS MiB / heap MiB / fds / lag p99 ms / CPU % server / sandboxes / client / host):`,
    );
    say(
      r.memory.samples
        .map(
          (s) =>
            `${s.phase}@${s.tS.toFixed(0)}: ${f1(s.rssMiB)}/${f1(s.heapUsedMiB)}/${s.fds ?? '-'}/${f1(s.lagP99Ms)}/${f1(s.serverCpuPct)}/${f1(s.sandboxCpuPct)}/${f1(s.clientCpuPct)}/${f1(s.hostCpuPct)}`,
        )
        .join('  '),
    );
  }
  if (r.errorSamples.length) say(`\nerror samples:\n  ${r.errorSamples.join('\n  ')}`);
  if (r.host.others.length)
    say(`\nother host activity meanwhile (not this run's):\n  ${r.host.others.slice(0, 20).join('\n  ')}`);
  const { samples: _s, ...memory } = r.memory ?? { samples: [] };
  say(
    `SOAK load ${JSON.stringify({
      ...r,
      memory,
      host: { ...r.host, others: r.host.others.length },
      sampleColumns: [
        'phase',
        'tS',
        'rssMiB',
        'heapUsedMiB',
        'fds',
        'lagP99Ms',
        'serverCpuPct',
        'sandboxCpuPct',
        'clientCpuPct',
        'hostCpuPct',
      ],
      samples: r.memory?.samples.map((s) => [
        s.phase,
        +s.tS.toFixed(1),
        +s.rssMiB.toFixed(1),
        s.heapUsedMiB === null ? null : +s.heapUsedMiB.toFixed(1),
        s.fds,
        s.lagP99Ms === null ? null : +s.lagP99Ms.toFixed(1),
        s.serverCpuPct | 0,
        (s.sandboxCpuPct ?? -1) | 0,
        s.clientCpuPct | 0,
        s.hostCpuPct | 0,
      ]),
    })}`,
  );
}

const HELP = `Usage: node --import tsx test/soak/load.ts [options]
  --sandboxes N        sandboxes alive during the load (default ${DEFAULTS.sandboxes}, max ${MAX_SANDBOXES})
  --rate R             exec starts per second, open loop (default ${DEFAULTS.rate})
  --duration S         seconds of load (default ${DEFAULTS.durationS})
  --terminals N        terminals streaming during the load, one per sandbox (default ${DEFAULTS.terminals})
  --term-lines N       lines per second each terminal prints (default ${DEFAULTS.termLinesPerS})
  --create-parallel N  creates/deletes at once (default ${DEFAULTS.createParallel})
  --max-in-flight N    waiting requests before a start is dropped as missed (default ${DEFAULTS.maxInFlight})
  --late-ms MS         a start sent later than this is late (default ${DEFAULTS.lateMs})
  --sample S           seconds between server samples (default ${DEFAULTS.sampleEveryS})
  --rss-flat MiB       raw RSS growth minute 1 -> last minute, printed only (default ${DEFAULTS.rssFlatMiB})
  --gc-every S         seconds between forced full collections in the server (default ${DEFAULTS.gcEveryS})
  --live-growth MiB    largest post-GC live-set growth called flat (default ${DEFAULTS.liveGrowthMiB})
  --rss-gc-growth MiB  largest post-GC RSS growth called flat (default ${DEFAULTS.rssGcGrowthMiB})
  --leak-bytes N       test-only: the server retains N bytes per request, to prove a leak fails (default 0)
  --image REF          (default ${DEFAULTS.image})
  --log-level L        server log level (default ${DEFAULTS.logLevel})
  --server-node-options "..."  NODE_OPTIONS of the server only, e.g. "--max-old-space-size=512"
  --cpu-profile DIR    CPU profile of the server over the load's starts, to DIR/server-<pid>-0.cpuprofile
                       (summary: node --import tsx test/soak/profile-summary.ts FILE)
Exit status: 0 when there were no errors and memory was flat by the post-GC criterion (or there were
too few post-GC samples to judge: runs under ~2 minutes).
Needs root, crun and the test images (npm test's set-up; SANDBOXD_TEST_IMAGE_DIR).`;

function parseArgs(argv: string[]): Partial<LoadOptions> | null {
  const o: Partial<LoadOptions> = {};
  const num = (k: keyof LoadOptions, v: string) => {
    const n = Number(v);
    if (!Number.isFinite(n) || n < 0 || (n === 0 && k !== 'terminals'))
      throw new Error(`--${String(k)}: not a positive number: ${v}`);
    (o as Record<string, unknown>)[k] = n;
  };
  const map: Record<string, keyof LoadOptions> = {
    '--sandboxes': 'sandboxes',
    '--rate': 'rate',
    '--duration': 'durationS',
    '--terminals': 'terminals',
    '--term-lines': 'termLinesPerS',
    '--create-parallel': 'createParallel',
    '--max-in-flight': 'maxInFlight',
    '--late-ms': 'lateMs',
    '--sample': 'sampleEveryS',
    '--rss-flat': 'rssFlatMiB',
    '--gc-every': 'gcEveryS',
    '--live-growth': 'liveGrowthMiB',
    '--rss-gc-growth': 'rssGcGrowthMiB',
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--help' || a === '-h') return null;
    const v = argv[++i];
    if (v === undefined) throw new Error(`${a} needs a value`);
    if (map[a]) num(map[a], v);
    else if (a === '--image') o.image = v;
    else if (a === '--log-level') o.logLevel = v;
    else if (a === '--server-node-options') o.serverNodeOptions = v;
    else if (a === '--cpu-profile') o.cpuProfileDir = v;
    else if (a === '--leak-bytes') {
      const n = Number(v);
      if (!Number.isInteger(n) || n < 0) throw new Error(`--leak-bytes: not a whole number >= 0: ${v}`);
      o.leakBytesPerRequest = n;
    } else throw new Error(`unknown option ${a} (see --help)`);
  }
  return o;
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  let o: Partial<LoadOptions> | null;
  try {
    o = parseArgs(process.argv.slice(2));
  } catch (e) {
    console.error((e as Error).message);
    process.exit(2);
  }
  if (!o) {
    console.log(HELP);
    process.exit(0);
  }
  const r = await runLoad(o);
  printResult(r);
  process.exit(Object.keys(r.errors).length === 0 && r.memory?.flat !== false ? 0 : 1);
}
