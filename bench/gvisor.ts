/**
 * The local driver's two isolation tiers side by side (no HTTP): `container` (crun) and
 * `gvisor` (runsc, on the platform gvisorPlatform() chose for this host), in one run on
 * `local/busybox:latest`, the tiers taking turns round by round (which goes first swaps
 * each round) so that the host's drift hits both.
 *
 * Each round, per tier:
 *   create + first command   create, then `echo hi` answered; beside it the floors of the
 *                            same round: bare `crun run` + `crun exec` (BareCrun) and bare
 *                            `runsc run` + `runsc exec` (BareRunsc, bench/floor.ts)
 *   exec round trip          `true` through driver.exec, EXECS_PER_ROUND times
 *   syscalls                 `dd if=/dev/zero of=/dev/null bs=1 count=N` (2N system calls;
 *                            N = BENCH_GVISOR_SYSCALLS, default 25,000), wall time
 *   write 64 MiB + fsync     `dd ... of=/root/io bs=1M count=64 conv=fsync` into the root layer
 *   read 64 MiB back         `dd if=/root/io of=/dev/null bs=1M` (from the page cache: just written)
 * Then idle memory: IDLE idle sandboxes per tier, after a settle, each one's memory cgroup
 * usage (memory.usage_in_bytes / memory.current) and the summed RSS (and PSS, which shares
 * pages out) of the host processes in its cgroup (cgroup.procs), per sandbox.
 * Then gVisor's memory snapshots, SNAP_RUNS rounds after one warm-up, on a sandbox running
 * a small shell loop: pause to disk (runsc checkpoint), its checkpoint's size on disk
 * (<data>/checkpoints/<id>), resume (runsc restore, first command answered), and fork of
 * N=1 and N=2 (the source paused to disk, the forks restored from it, the source restored;
 * the forks deleted untimed); beside them the container tier's pause and resume (freezer)
 * of the same loop for scale.
 *
 * BENCH_GVISOR_RUNS rounds (default 10) after 2 warm-ups; the snapshot part runs a third as
 * many (at least 3) after one. About 3 minutes here (2 cores, runsc platform ptrace: 45 µs a
 * system call, hence the short dd). Figures only side by side with the container tier and
 * the floors of the same run: these machines drift.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Isolation } from '@sandboxd/protocol';
import type { SandboxSpec } from '../packages/server/src/runtime/driver.js';
import { cgroupProcsOf, memoryUsage } from '../packages/server/src/runtime/local/bundle/cgroup-fs.js';
import { ImageStore } from '../packages/server/src/runtime/local/images/store.js';
import { makeTestDriver, TEST_IMAGE_DIR } from '../packages/server/test/local-driver.js';
import { BareCrun, BareRunsc } from './floor.js';
import { percentile, report, timeMs } from './stats.js';

if (!existsSync('/usr/bin/runsc') && !existsSync('/usr/local/bin/runsc')) {
  console.log('# bench/gvisor.ts: runsc is not installed, skipped');
  process.exit(0);
}

const RUNS = Number(process.env.BENCH_GVISOR_RUNS ?? 10);
const WARMUP = 2;
const SNAP_RUNS = Math.max(3, Math.ceil(RUNS / 3));
const EXECS_PER_ROUND = 5;
const SYSCALLS = Number(process.env.BENCH_GVISOR_SYSCALLS ?? 25_000);
const IDLE = 5;
const IMAGE = 'local/busybox:latest';
const LIMITS = { memoryBytes: 256 << 20, cpus: 1, pids: 128, rootDiskBytes: 256 << 20 };
const TIERS: Isolation[] = ['container', 'gvisor'];
// /c is replaced whole (a rename), never seen empty: `echo > /c` truncates first, and a save
// that caught the loop between the truncation and the write restored an empty /c.
const LOOP = 'i=0; while :; do i=$((i+1)); echo $i > /c.new; mv /c.new /c; sleep 0.1; done';
const MiB = 2 ** 20;
const LONG = { timeoutMs: 120_000 };

const { driver, dataDir: base, options } = makeTestDriver('gvbench');
const cgroupParent = options.cgroupParent ?? '';
const checkpoints = join(options.dataDir, 'checkpoints');
await driver.init();
await driver.recover();
const image = await new ImageStore({ dir: TEST_IMAGE_DIR }).resolve(IMAGE);
const crunFloor = new BareCrun(join(base, 'floor'), image.rootfsDir);
const runscFloor = new BareRunsc(join(base, 'floor'), image.rootfsDir);
let seq = 0;
const spec = (isolation: Isolation): SandboxSpec => ({
  id: `gvb_${process.pid}_${seq++}`,
  image: IMAGE,
  env: {},
  volumes: [],
  limits: LIMITS,
  isolation,
});

/** Samples per step and tier (ms unless the step says otherwise). */
const samples: Record<string, Partial<Record<Isolation, number[]>>> = {};
const add = (keep: boolean, step: string, tier: Isolation, v: number) => {
  if (!keep) return;
  const by = samples[step] ?? {};
  samples[step] = by;
  by[tier] = [...(by[tier] ?? []), v];
};

/** Runs `command` in sandbox `id`, throwing unless it exits 0. */
async function run(id: string, command: string): Promise<void> {
  const r = await driver.exec(id, command, LONG);
  if (r.exitCode !== 0) throw new Error(`${command}: exit ${r.exitCode} ${r.stderr}`);
}

/** Bytes of `kind` (VmRSS or Pss) of host process `pid`; 0 when it is gone. */
function procMemory(pid: number, kind: 'rss' | 'pss'): number {
  try {
    const text =
      kind === 'rss' ? readFileSync(`/proc/${pid}/status`, 'utf8') : readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
    const m = (kind === 'rss' ? /VmRSS:\s+(\d+) kB/ : /^Pss:\s+(\d+) kB/m).exec(text);
    return Number(m?.[1] ?? 0) * 1024;
  } catch {
    return 0;
  }
}

/** The size on disk of folder `dir` in bytes (`du -sk`). */
function diskUsage(dir: string): number {
  return Number(execFileSync('du', ['-sk', dir], { encoding: 'utf8' }).split('\t')[0]) * 1024;
}

let crunFloorLive: string | undefined;
try {
  // Per round: both tiers and both floors, the tiers' order swapped each round.
  for (let i = 0; i < RUNS + WARMUP; i++) {
    const keep = i >= WARMUP;
    for (const tier of i % 2 === 0 ? TIERS : [...TIERS].reverse()) {
      const s = spec(tier);
      let ms = await timeMs(() => driver.create(s));
      add(keep, 'create', tier, ms);
      ms += await timeMs(() => run(s.id, 'echo hi'));
      add(keep, 'create + first command', tier, ms);
      for (let k = 0; k < EXECS_PER_ROUND; k++)
        add(keep, 'exec `true` round trip', tier, await timeMs(() => run(s.id, 'true')));
      add(
        keep,
        `syscalls: dd bs=1 count=${SYSCALLS}`,
        tier,
        await timeMs(() => run(s.id, `dd if=/dev/zero of=/dev/null bs=1 count=${SYSCALLS} 2>/dev/null`)),
      );
      add(
        keep,
        'write 64 MiB + fsync',
        tier,
        await timeMs(() => run(s.id, 'dd if=/dev/zero of=/root/io bs=1M count=64 conv=fsync 2>/dev/null')),
      );
      add(
        keep,
        'read 64 MiB back',
        tier,
        await timeMs(() => run(s.id, 'dd if=/root/io of=/dev/null bs=1M 2>/dev/null')),
      );
      await driver.delete(s.id);
      await driver.released();

      // The tier's floor.
      const fid = `gvf_${process.pid}_${i}`;
      if (tier === 'container') {
        crunFloorLive = fid;
        ms = await timeMs(() => crunFloor.run(fid));
        ms += await timeMs(() => crunFloor.exec(fid, ['echo', 'hi']));
        add(keep, 'floor: bare run + first command', tier, ms);
        await crunFloor.delete(fid);
        crunFloorLive = undefined;
      } else {
        ms = await timeMs(() => runscFloor.run(fid));
        ms += await timeMs(() => runscFloor.exec(fid, ['echo', 'hi']));
        add(keep, 'floor: bare run + first command', tier, ms);
        await runscFloor.delete(fid);
      }
    }
  }

  // Idle memory: IDLE sandboxes per tier alive at once, measured after a settle.
  const idle: Record<Isolation, string[]> = { container: [], gvisor: [] };
  for (let k = 0; k < IDLE; k++)
    for (const tier of TIERS) {
      const s = spec(tier);
      await driver.create(s);
      await run(s.id, 'true');
      idle[tier].push(s.id);
    }
  await sleep(3_000);
  const idleProcs: Record<string, number> = {};
  for (const tier of TIERS)
    for (const id of idle[tier]) {
      const procs = cgroupProcsOf(cgroupParent, id);
      idleProcs[tier] = procs.length;
      add(true, 'idle: memory cgroup usage (MiB)', tier, (memoryUsage(cgroupParent, id).currentBytes ?? NaN) / MiB);
      add(
        true,
        'idle: summed RSS of its processes (MiB)',
        tier,
        procs.reduce((a, p) => a + procMemory(p, 'rss'), 0) / MiB,
      );
      add(
        true,
        'idle: summed PSS of its processes (MiB)',
        tier,
        procs.reduce((a, p) => a + procMemory(p, 'pss'), 0) / MiB,
      );
    }
  for (const id of [...idle.container, ...idle.gvisor]) await driver.delete(id);
  await driver.released();

  // Snapshots: gVisor to disk and fork; the container tier's freezer for scale.
  const loops: Record<Isolation, string> = { container: '', gvisor: '' };
  for (const tier of TIERS) {
    const s = spec(tier);
    await driver.create(s);
    await driver.execBackground(s.id, LOOP);
    loops[tier] = s.id;
  }
  await sleep(500);
  const count = async (id: string) => Number((await driver.exec(id, 'cat /c')).stdout.trim());
  for (let i = 0; i < SNAP_RUNS + 1; i++) {
    const keep = i >= 1;
    const c = loops.container;
    add(keep, 'pause (container: freezer; gvisor: to disk)', 'container', await timeMs(() => driver.pause(c)));
    let ms = await timeMs(() => driver.resume(c));
    add(keep, 'resume (container: thaw; gvisor: restore)', 'container', ms);
    ms += await timeMs(() => count(c));
    add(keep, 'resume + first command', 'container', ms);

    const g = loops.gvisor;
    add(
      keep,
      'pause (container: freezer; gvisor: to disk)',
      'gvisor',
      await timeMs(() => driver.pause(g, { memory: 'disk' })),
    );
    add(keep, 'checkpoint on disk (MiB)', 'gvisor', diskUsage(join(checkpoints, g)) / MiB);
    ms = await timeMs(() => driver.resume(g));
    add(keep, 'resume (container: thaw; gvisor: restore)', 'gvisor', ms);
    let n = 0;
    ms += await timeMs(async () => {
      n = await count(g);
    });
    add(keep, 'resume + first command', 'gvisor', ms);
    if (!(n > 0)) throw new Error('the restored loop lost its counter');
    for (const forks of [1, 2]) {
      const ids = Array.from({ length: forks }, () => spec('gvisor').id);
      add(
        keep,
        `fork N=${forks} (all running)`,
        'gvisor',
        await timeMs(() =>
          driver.fork(
            g,
            ids.map((id) => ({ id })),
          ),
        ),
      );
      for (const id of ids) if (!((await count(id)) > 0)) throw new Error(`fork ${id} lost the counter`);
      for (const id of ids) await driver.delete(id);
      await driver.released();
    }
  }
  for (const id of Object.values(loops)) await driver.delete(id);

  const stat = (x: number[] | undefined) => {
    const s = [...(x ?? [])].sort((a, b) => a - b);
    return { n: s.length, p50: percentile(s, 50), p90: percentile(s, 90) };
  };
  const dash = (v: number) => (Number.isNaN(v) ? '-' : v);
  const rows = Object.entries(samples).map(([step, by]) => {
    const c = stat(by.container);
    const g = stat(by.gvisor);
    return {
      step,
      'container p50': dash(c.p50),
      'container p90': dash(c.p90),
      'gvisor p50': dash(g.p50),
      'gvisor p90': dash(g.p90),
      'gvisor / container': c.n && g.n ? g.p50 / c.p50 : '-',
    };
  });
  const sys = stat(samples[`syscalls: dd bs=1 count=${SYSCALLS}`]?.gvisor).p50;
  const sysC = stat(samples[`syscalls: dd bs=1 count=${SYSCALLS}`]?.container).p50;
  rows.push({
    step: 'per system call (µs, p50 of the dd / 2N)',
    'container p50': (sysC * 1000) / (2 * SYSCALLS),
    'container p90': '-',
    'gvisor p50': (sys * 1000) / (2 * SYSCALLS),
    'gvisor p90': '-',
    'gvisor / container': sys / sysC,
  });
  report('gvisor', rows, {
    image: IMAGE,
    runs: RUNS,
    snapshotRuns: SNAP_RUNS,
    syscalls: 2 * SYSCALLS,
    platform: runscFloor.platform,
    idleProcesses: idleProcs,
    ...Object.fromEntries(
      Object.entries(samples).map(([step, by]) => [
        step,
        Object.fromEntries(Object.entries(by).map(([t, x]) => [t, stat(x)])),
      ]),
    ),
  });
} finally {
  await driver.destroyAll();
  if (crunFloorLive) await crunFloor.delete(crunFloorLive).catch(() => undefined);
  await runscFloor.deleteAll();
  rmSync(base, { recursive: true, force: true });
}
