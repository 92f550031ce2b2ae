/**
 * PTY benchmark: keystroke echo latency and output throughput through spawnTty (crun exec +
 * tty-relay) against a bare host PTY (util-linux `script`, same busybox binary), same run.
 * Needs root, crun, busybox-static, script. Run: node --import tsx bench/pty.ts
 * Env: BENCH_PTY_KEYS (default 200), BENCH_PTY_BYTES (default 100000000).
 * Prints a table, then one JSON line.
 */
import { execFileSync, spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnTty } from '../packages/server/src/runtime/local/pty/relay.js';

const KEYS = Number(process.env.BENCH_PTY_KEYS ?? 200);
const BYTES = Number(process.env.BENCH_PTY_BYTES ?? 100_000_000);
const tmp = mkdtempSync(join(tmpdir(), 'sbx-pty-bench-'));
const state = join(tmp, 'state');
const id = `ptybench_${process.pid}`;
const crunArgv = ['crun', '--root', state];

/** The minimal surface both PTYs share here. */
interface Term {
  write(s: string): void;
  onData(f: (b: Buffer) => void): void;
  exited: Promise<number>;
  stop(): void;
}

function startContainer(): void {
  const bundle = join(tmp, 'bundle');
  mkdirSync(join(bundle, 'rootfs/bin'), { recursive: true });
  for (const d of ['proc', 'dev', 'sys', 'tmp']) mkdirSync(join(bundle, 'rootfs', d));
  copyFileSync('/bin/busybox', join(bundle, 'rootfs/bin/busybox'));
  for (const t of ['sh', 'cat', 'yes', 'head', 'stty']) symlinkSync('busybox', join(bundle, 'rootfs/bin', t));
  execFileSync('crun', ['spec'], { cwd: bundle });
  const c = JSON.parse(readFileSync(join(bundle, 'config.json'), 'utf8'));
  Object.assign(c.process, { terminal: false, args: ['sleep', '3600'] });
  c.linux.namespaces = c.linux.namespaces.filter((n: { type: string }) => n.type !== 'network');
  symlinkSync('busybox', join(bundle, 'rootfs/bin/sleep'));
  writeFileSync(join(bundle, 'config.json'), JSON.stringify(c));
  execFileSync(
    'unshare',
    [
      '-m',
      '--propagation',
      'private',
      'sh',
      '-c',
      `umount /sys/fs/cgroup/unified 2>/dev/null; exec crun --root ${state} run -d -b ${bundle} ${id} </dev/null >/dev/null 2>&1`,
    ],
    { timeout: 20_000 },
  );
}

async function relayTerm(argv: string[]): Promise<Term> {
  const p = await spawnTty({
    crunArgv,
    containerId: id,
    argv,
    env: { PATH: '/bin', TERM: 'xterm' },
    cols: 80,
    rows: 24,
  });
  return {
    write: (s) => p.write(s),
    onData: (f) => p.onData(f),
    stop: () => p.kill('SIGKILL'),
    exited: new Promise((r) => p.onExit((e) => r(e.exitCode))),
  };
}

/** A host PTY via `script` (its C relay) running `cmd` (through /bin/sh -c): use busybox applets. */
function hostTerm(cmd: string): Term {
  const c = spawn('script', ['-qc', cmd, '/dev/null'], {
    stdio: ['pipe', 'pipe', 'ignore'],
    env: { PATH: '/bin:/usr/bin', TERM: 'xterm' },
  });
  return {
    write: (s) => c.stdin.write(s),
    onData: (f) => c.stdout.on('data', f),
    stop: () => {
      if (c.exitCode === null) c.kill('SIGKILL');
    },
    exited: new Promise((r) => c.on('close', (code) => r(code ?? -1))),
  };
}

const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));
const pct = (xs: number[], q: number) =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))];

/** Types one character at a time and waits for its echo; returns per-key ms. */
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
  await wait(300); // prompt / start-up output
  const out: number[] = [];
  for (let i = 0; i < keys + 20; i++) {
    want = 97 + (i % 26);
    let timer: NodeJS.Timeout | undefined;
    const echoed = new Promise<void>((resolve, reject) => {
      got = resolve;
      timer = setTimeout(() => reject(new Error('no echo within 2 s')), 2000);
    });
    const t0 = performance.now();
    t.write(String.fromCharCode(want));
    await echoed;
    clearTimeout(timer);
    if (i >= 20) out.push(performance.now() - t0); // first 20: warm-up
    if (i % 50 === 49) {
      t.write('\x15');
      await wait(20);
    } // ^U: keep the line short
  }
  t.stop();
  await t.exited;
  return out;
}

async function throughput(make: () => Promise<Term> | Term): Promise<{ bytes: number; s: number }> {
  const t0 = performance.now();
  const t = await make();
  let bytes = 0;
  t.onData((b) => {
    bytes += b.length;
  });
  await t.exited;
  return { bytes, s: (performance.now() - t0) / 1000 };
}

async function main() {
  startContainer();
  const spawnMs: number[] = [];
  for (let i = 0; i < 20; i++) {
    const t0 = performance.now();
    const t = await relayTerm(['cat']);
    spawnMs.push(performance.now() - t0);
    t.stop();
    await t.exited;
  }
  const lat = {
    'relay sh': await echoLatency(await relayTerm(['sh']), KEYS),
    'host sh': await echoLatency(hostTerm('exec busybox sh'), KEYS),
    'relay cat': await echoLatency(await relayTerm(['cat']), KEYS),
    'host cat': await echoLatency(hostTerm('exec busybox cat'), KEYS),
  };
  const cmd = `yes | head -c ${BYTES}`;
  const bb = `busybox yes | busybox head -c ${BYTES}`;
  const tp = {
    'relay yes|head': await throughput(() => relayTerm(['sh', '-c', cmd])),
    'host yes|head': await throughput(() => hostTerm(bb)),
    'relay yes|head|cat': await throughput(() => relayTerm(['sh', '-c', `${cmd} | cat`])),
    'host yes|head|cat': await throughput(() => hostTerm(`${bb} | busybox cat`)),
  };
  const rows: string[][] = [['measure', 'p50 ms', 'p99 ms', 'MB/s (delivered)', 'bytes', 's']];
  rows.push(['spawnTty start (cat)', pct(spawnMs, 0.5).toFixed(2), pct(spawnMs, 0.99).toFixed(2), '', '', '']);
  for (const [k, v] of Object.entries(lat))
    rows.push([`echo ${k}`, pct(v, 0.5).toFixed(3), pct(v, 0.99).toFixed(3), '', '', '']);
  for (const [k, v] of Object.entries(tp))
    rows.push([k, '', '', (v.bytes / 1e6 / v.s).toFixed(2), String(v.bytes), v.s.toFixed(2)]);
  const w = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  for (const r of rows) console.log(r.map((c, i) => c.padEnd(w[i])).join('  '));
  console.log(
    JSON.stringify({
      bench: 'pty',
      keys: KEYS,
      payloadBytes: BYTES,
      spawnMs: { p50: pct(spawnMs, 0.5), p99: pct(spawnMs, 0.99) },
      echoMs: Object.fromEntries(Object.entries(lat).map(([k, v]) => [k, { p50: pct(v, 0.5), p99: pct(v, 0.99) }])),
      throughput: Object.fromEntries(
        Object.entries(tp).map(([k, v]) => [
          k,
          { bytes: v.bytes, s: v.s, mbPerS: v.bytes / 1e6 / v.s, payloadMbPerS: BYTES / 1e6 / v.s },
        ]),
      ),
    }),
  );
}

try {
  await main();
} finally {
  try {
    execFileSync('crun', ['--root', state, 'delete', '-f', id], { stdio: 'ignore', timeout: 10_000 });
  } catch {}
  rmSync(tmp, { recursive: true, force: true });
}
