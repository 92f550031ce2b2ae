/**
 * What each isolation tier allows and denies, side by side, and what each costs here: not a
 * test (it asserts nothing and is not in `npm test`); docs/security.md ("What gVisor denies
 * that containers allow, and the reverse") and docs/runtime.md ("Isolation tiers") record
 * its answers. Needs root, crun and runsc, like the local runtime's tests:
 *
 *   SANDBOXD_E2E_RUNTIME=local node --import tsx test/security/tier-probes.ts [--measure N]
 *
 * Starts a test server, makes one Debian sandbox per tier through the API and runs
 * probes/tiers.py as root in each. `--measure N` also creates N sandboxes of each tier one
 * after another and reports, per tier: create (POST -> 201), create -> first `echo`
 * answered, the p50 of 20 `echo` round trips, and the memory of each idle sandbox's host
 * processes (RSS and PSS summed over the processes of its cgroup, for gVisor the runsc
 * sandbox, gofer and ptrace stubs; and the cgroup's memory.current). `--syscalls` also calls
 * every syscall the seccomp profile allows outright (numbers from the host's
 * asm/unistd_64.h), once with invalid arguments, in a sandbox of each tier
 * (probes/allowed-syscalls.py) and lists those whose answer is EPERM or ENOSYS on gVisor only.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { SANDBOX_CAPABILITIES } from '../../packages/server/src/runtime/local/bundle/oci-config.js';
import { buildSeccompProfile } from '../../packages/server/src/runtime/local/bundle/seccomp.js';
import { newAccount, startServer } from '../e2e/harness.js';
import { Api, DEBIAN, p50, table } from './escape-support.js';

const TIERS = ['container', 'gvisor'] as const;
const measureAt = process.argv.indexOf('--measure');
const N = measureAt >= 0 ? Number(process.argv[measureAt + 1] ?? 5) : 0;
const SYSCALLS = process.argv.includes('--syscalls');

/** [name, number] of every syscall the profile allows without argument rules (process-ending and blocking ones left out). */
function allowedSyscalls(): [string, number][] {
  const nrs = new Map<string, number>();
  const header = readFileSync('/usr/include/x86_64-linux-gnu/asm/unistd_64.h', 'utf8');
  for (const m of header.matchAll(/#define __NR_(\w+) (\d+)/g)) nrs.set(m[1], Number(m[2]));
  const profile = buildSeccompProfile({ capabilities: [...SANDBOX_CAPABILITIES] });
  const skip = new Set([
    'exit',
    'exit_group',
    'vfork',
    'fork',
    'clone',
    'clone3',
    'pause',
    'rt_sigreturn',
    'execve',
    'execveat',
  ]);
  const names = new Set<string>();
  for (const r of profile.syscalls)
    if (r.action === 'SCMP_ACT_ALLOW' && !r.args?.length)
      for (const n of r.names) if (nrs.has(n) && !skip.has(n)) names.add(n);
  return [...names].map((n) => [n, nrs.get(n)!]);
}

/** Host pids whose cgroup path names sandbox `id`. */
function pidsOf(id: string): number[] {
  const out: number[] = [];
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      if (readFileSync(`/proc/${p}/cgroup`, 'utf8').includes(id)) out.push(Number(p));
    } catch {
      /* gone */
    }
  }
  return out;
}

/** `pids` and every descendant of them (gVisor's ptrace stubs are children of its sandbox process). */
function withDescendants(pids: number[]): number[] {
  const all = new Set(pids);
  const parent = new Map<number, number>();
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      parent.set(Number(p), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      /* gone */
    }
  }
  for (let grew = true; grew; ) {
    grew = false;
    for (const [p, pp] of parent)
      if (!all.has(p) && all.has(pp)) {
        all.add(p);
        grew = true;
      }
  }
  return [...all];
}

/** Summed RSS and PSS (KiB) of `pids`, and the memory.current (KiB) of the cgroup of the first. */
function memoryOf(pids: number[]): { rssKiB: number; pssKiB: number; cgroupKiB: number | null; procs: string } {
  let rss = 0;
  let pss = 0;
  const names = new Map<string, number>();
  for (const p of pids) {
    try {
      const r = readFileSync(`/proc/${p}/smaps_rollup`, 'utf8');
      rss += Number(/^Rss:\s+(\d+)/m.exec(r)?.[1] ?? 0);
      pss += Number(/^Pss:\s+(\d+)/m.exec(r)?.[1] ?? 0);
      const comm = readFileSync(`/proc/${p}/comm`, 'utf8').trim();
      names.set(comm, (names.get(comm) ?? 0) + 1);
    } catch {
      /* gone */
    }
  }
  let cgroupKiB: number | null = null;
  try {
    const rel = readFileSync(`/proc/${pids[0]}/cgroup`, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('0::') || l.includes(':memory:'))
      ?.split(':')[2];
    const v2 = `/sys/fs/cgroup${rel}/memory.current`;
    const v1 = `/sys/fs/cgroup/memory${rel}/memory.usage_in_bytes`;
    for (const f of [v2, v1]) {
      try {
        cgroupKiB = Math.round(Number(readFileSync(f, 'utf8')) / 1024);
        break;
      } catch {
        /* the other hierarchy */
      }
    }
  } catch {
    /* no pids */
  }
  return {
    rssKiB: rss,
    pssKiB: pss,
    cgroupKiB,
    procs: [...names].map(([n, c]) => `${n}${c > 1 ? ` x${c}` : ''}`).join(', '),
  };
}

const s = await startServer();
try {
  const api = new Api(s, (await newAccount(s, { tokens: 100_000, plan: 'PRO' })).key);
  const ids: Record<string, string> = {};
  for (const t of TIERS) ids[t] = await api.create({ image: DEBIAN, isolation: t });
  const answers: Record<string, Record<string, unknown>> = {};
  for (const t of TIERS) answers[t] = await api.runProbe<Record<string, unknown>>(ids[t], 'tiers.py', {});
  const rows = Object.keys(answers.container).map((probe) => ({
    probe,
    container: String(answers.container[probe]),
    gvisor: String(answers.gvisor[probe]),
  }));
  console.log(table(rows));
  // Who each sandbox is on the host: its processes, their host uid and user namespace.
  const hostRows: Record<string, string>[] = [];
  for (const t of TIERS) {
    for (const p of withDescendants(pidsOf(ids[t]))) {
      try {
        const st = readFileSync(`/proc/${p}/status`, 'utf8');
        hostRows.push({
          tier: t,
          pid: String(p),
          comm: readFileSync(`/proc/${p}/comm`, 'utf8').trim(),
          'host uid': /^Uid:\s+(\d+)/m.exec(st)?.[1] ?? '',
          uid_map: readFileSync(`/proc/${p}/uid_map`, 'utf8').trim().split(/\s+/).join(' '),
          seccomp: /^Seccomp:\s+(\d+)/m.exec(st)?.[1] ?? '',
          NoNewPrivs: /^NoNewPrivs:\s+(\d+)/m.exec(st)?.[1] ?? '',
          CapEff: /^CapEff:\s+(\w+)/m.exec(st)?.[1] ?? '',
        });
      } catch {
        /* gone */
      }
    }
  }
  console.log(table(hostRows));
  if (SYSCALLS) {
    const calls = allowedSyscalls();
    const res: Record<string, Record<string, number>> = {};
    for (const t of TIERS)
      res[t] = await api.runProbe<Record<string, number>>(ids[t], 'allowed-syscalls.py', calls, { timeoutMs: 600_000 });
    const only = (errno: number) =>
      calls
        .map(([n]) => n)
        .filter((n) => res.gvisor[n] === errno && res.container[n] !== errno)
        .map((n) => `${n} (container: ${res.container[n]})`);
    console.log(`# ${calls.length} calls the profile allows, each once with invalid arguments`);
    console.log(`# EPERM on gVisor only: ${only(1).join(', ')}`);
    console.log(`# ENOSYS on gVisor only: ${only(38).join(', ')}`);
  }
  for (const t of TIERS) await api.delete(ids[t]);

  if (N > 0) {
    const figures: Record<string, string>[] = [];
    for (const t of TIERS) {
      const made: string[] = [];
      const create: number[] = [];
      const first: number[] = [];
      const rtt: number[] = [];
      const mem: ReturnType<typeof memoryOf>[] = [];
      for (let i = 0; i < N; i++) {
        const t0 = performance.now();
        const id = await api.create({ image: DEBIAN, isolation: t });
        create.push(performance.now() - t0);
        await api.exec(id, 'echo first');
        first.push(performance.now() - t0);
        made.push(id);
        const lat: number[] = [];
        for (let j = 0; j < 20; j++) {
          const t1 = performance.now();
          await api.exec(id, `echo ${j}`);
          lat.push(performance.now() - t1);
        }
        rtt.push(p50(lat));
      }
      await new Promise((r) => setTimeout(r, 3000)); // idle
      for (const id of made) mem.push(memoryOf(withDescendants(pidsOf(id))));
      const fmt = (xs: number[]) =>
        `${p50(xs).toFixed(0)} (${Math.min(...xs).toFixed(0)}-${Math.max(...xs).toFixed(0)})`;
      const kib = (xs: number[]) =>
        `${(p50(xs) / 1024).toFixed(1)} (${(Math.min(...xs) / 1024).toFixed(1)}-${(Math.max(...xs) / 1024).toFixed(1)})`;
      figures.push({
        tier: t,
        'create ms': fmt(create),
        'create -> first echo ms': fmt(first),
        'echo round trip p50 ms': fmt(rtt),
        'RSS MiB': kib(mem.map((m) => m.rssKiB)),
        'PSS MiB': kib(mem.map((m) => m.pssKiB)),
        'cgroup MiB': kib(mem.map((m) => m.cgroupKiB ?? 0)),
        processes: mem[0]?.procs ?? '',
      });
      for (const id of made) await api.delete(id);
    }
    console.log(`# ${N} Debian sandboxes per tier, one after another; median (min-max)`);
    console.log(table(figures));
  }
} finally {
  await s.stop();
}
