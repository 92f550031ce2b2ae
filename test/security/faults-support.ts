/**
 * Helpers of the fault suite (faults.test.ts): what a server on the local runtime owns on
 * the host, read from the kernel's own tables, so a test can tell "fully cleaned" from
 * "leaked" for every sandbox id it ever caused, and a small size-limited filesystem for
 * the disk-full scenario. Everything here is scoped to one server (its data dir, run dir,
 * bridge, subnet, cgroup folder and uid range), so agents and tests running beside it on the
 * same machine never make it fail.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { instanceKey } from '../../packages/server/src/instance.js';
import { hostVethName } from '../../packages/server/src/runtime/local/network/addr.js';
import { driverVolumeName } from '../../packages/server/src/domain/sandbox.js';
import { localOptions, teardownLocal } from '../e2e/local-runtime.js';
import type { Server } from '../e2e/harness.js';

const ROOT = resolve(import.meta.dirname, '../..');
/** Uid slots one e2e server may use (local-runtime.ts spaces servers 100 slots apart). */
const SLOTS = 100;
const ID_RANGE = 65536;

/** What one server owns on the host. */
export interface Scope {
  dataDir: string;
  runDir: string;
  /** The server's own part of `runDir`: `<runDir>/<instance key>` (crun's root is in it). */
  instanceRunDir: string;
  bridge: string;
  subnet: string;
  cgroupParent: string;
  uidRangeStart: number;
}

/**
 * The scope of a server started by the harness on `harnessDir`; `dataDir` when the server's
 * SANDBOXD_DATA_DIR points elsewhere (the disk-full test puts it on a small filesystem).
 */
export function scopeOf(harnessDir: string, dataDir = harnessDir): Scope {
  const o = localOptions(harnessDir);
  return {
    dataDir,
    runDir: o.runDir!,
    instanceRunDir: join(o.runDir!, instanceKey(dataDir)),
    bridge: o.bridge!,
    subnet: o.subnet!,
    cgroupParent: o.cgroupParent!,
    uidRangeStart: o.uidRangeStart!,
  };
}

/**
 * A fresh temp dir for the harness whose bridge, subnet, uid range and cgroup folder no
 * server on this host uses now (local-runtime.ts derives them from the dir's name, in one
 * of 50 slots, so two servers started side by side could otherwise share them).
 */
export function freshDataDir(): string {
  for (let i = 0; i < 50; i++) {
    const dir = mkdtempSync(join(tmpdir(), 'sandboxd-e2e-'));
    let busy = true;
    try {
      const o = localOptions(dir);
      busy =
        existsSync(`/sys/class/net/${o.bridge}`) ||
        readdirSync('/sys/fs/cgroup').some((c) => existsSync(join('/sys/fs/cgroup', c, o.cgroupParent!)));
    } finally {
      if (busy) rmSync(dir, { recursive: true, force: true });
    }
    if (!busy) return dir;
  }
  throw new Error('no free e2e slot: 50 servers seem to run on this host');
}

/** Removes everything a server of `scope` left on the host (after it stopped). */
export async function destroyScope(harnessDir: string, dataDir = harnessDir): Promise<void> {
  await teardownLocal(harnessDir, dataDir);
}

function sh(cmd: string, args: string[]): string {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 30_000 });
  return r.stdout ?? '';
}

/** `scripts/host-snapshot.sh`, one line per host object. */
export function hostSnapshot(): string[] {
  return execFileSync('bash', [join(ROOT, 'scripts/host-snapshot.sh')], { encoding: 'utf8', timeout: 60_000 })
    .split('\n')
    .filter(Boolean);
}

/** Host processes: pid, real uid, cgroup lines and command line (processes that vanish are skipped). */
interface Proc {
  pid: number;
  uid: number;
  cgroup: string;
  cmd: string;
}
function processes(): Proc[] {
  const out: Proc[] = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const status = readFileSync(`/proc/${e}/status`, 'utf8');
      // A zombie is dead already, only not yet reaped by its parent (a moment after a kill).
      if (/^State:\s+[ZX]/m.test(status)) continue;
      const uid = Number(/^Uid:\s+(\d+)/m.exec(status)?.[1] ?? -1);
      const cgroup = readFileSync(`/proc/${e}/cgroup`, 'utf8');
      const cmd = readFileSync(`/proc/${e}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
      out.push({ pid: Number(e), uid, cgroup, cmd });
    } catch {
      /* gone meanwhile */
    }
  }
  return out;
}

/**
 * Host processes that belong to the server of `scope` other than the server itself:
 * anything running as a sandbox uid of its range, in its cgroup folder, or started with its
 * run dir or data dir on the command line (crun, tty-relay, helpers).
 */
export function scopeProcesses(scope: Scope, opts: { exceptPids?: number[] } = {}): string[] {
  const lo = scope.uidRangeStart;
  const hi = lo + SLOTS * ID_RANGE;
  const except = new Set(opts.exceptPids ?? []);
  return processes()
    .filter((p) => !except.has(p.pid) && p.pid !== process.pid)
    .filter(
      (p) =>
        (p.uid >= lo && p.uid < hi) ||
        p.cgroup.includes(`/${scope.cgroupParent}/`) ||
        p.cmd.includes(scope.runDir) ||
        p.cmd.includes(`${scope.dataDir}/`),
    )
    .map((p) => `pid ${p.pid} uid ${p.uid}: ${p.cmd.slice(0, 200)}`);
}

/**
 * For each sandbox id, what of it is still on the host: state dir, root layer (dir, image,
 * mounts, loop device), netns, host veth, cgroups, crun state, processes in its cgroup.
 * An id with an empty list is fully cleaned.
 */
export function sandboxTraces(scope: Scope, ids: Iterable<string>): Map<string, string[]> {
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4] ?? '');
  const loops = sh('losetup', ['-a', '-O', 'NAME,BACK-FILE', '--noheadings']).split('\n').filter(Boolean);
  const procs = processes();
  const controllers = readdirSync('/sys/fs/cgroup').map((c) => join('/sys/fs/cgroup', c));
  const out = new Map<string, string[]>();
  for (const id of ids) {
    const t: string[] = [];
    const check = (p: string, what: string) => existsSync(p) && t.push(`${what} ${p}`);
    check(join(scope.dataDir, 'sandboxes', id), 'state dir');
    check(join(scope.dataDir, 'roots', id), 'root dir');
    check(join(scope.dataDir, 'roots', `${id}.img`), 'root image');
    check(join(scope.instanceRunDir, 'crun', id), 'crun state');
    check(join(scope.instanceRunDir, 'runc', id), 'runc state');
    check(join(scope.instanceRunDir, 'bundles', id), 'bundle');
    check(`/run/netns/sbx-${id}`, 'netns');
    check(`/sys/class/net/${hostVethName(id)}`, 'veth');
    for (const c of controllers) check(join(c, scope.cgroupParent, id), 'cgroup');
    for (const m of mounts)
      if (m.includes(`/${id}/`) || m.endsWith(`/${id}`) || m.endsWith(`sbx-${id}`)) t.push(`mount ${m}`);
    for (const l of loops) if (l.includes(`/roots/${id}.img`)) t.push(`loop ${l}`);
    for (const p of procs)
      if (p.cgroup.includes(`/${scope.cgroupParent}/${id}`)) t.push(`process ${p.pid}: ${p.cmd.slice(0, 120)}`);
    out.set(id, t);
  }
  return out;
}

/** Lines of `after` not in `before` that belong to `scope` or to one of `ids`. */
export function scopeDiff(before: string[], after: string[], scope: Scope, ids: Iterable<string>): string[] {
  const had = new Set(before);
  const subnetPrefix = scope.subnet.replace(/\.0\/\d+$/, '.');
  const keys = [scope.dataDir, scope.runDir, scope.cgroupParent, subnetPrefix, ` ${scope.bridge}`, `${scope.bridge} `];
  const idKeys = [...ids].flatMap((id) => [id, hostVethName(id)]);
  return after.filter(
    (l) =>
      !had.has(l) &&
      (keys.some((k) => l.includes(k)) || idKeys.some((k) => l.includes(k)) || isScopeNetns(l, subnetPrefix)),
  );
}

/** A netns line of the snapshot whose eth0 has an address of the scope's subnet. */
function isScopeNetns(line: string, subnetPrefix: string): boolean {
  const m = /^netns (\S+)/.exec(line);
  if (!m) return false;
  return sh('ip', ['-n', m[1], '-4', '-o', 'addr', 'show']).includes(` ${subnetPrefix}`);
}

/**
 * Volumes of an account that are half-made: listed without their disk image, or a disk
 * image of the account that is not listed. Empty when every volume is whole.
 */
export async function halfMadeVolumes(s: Server, key: string, accountId: string, dataDir: string): Promise<string[]> {
  const r = await s.api('GET', '/api/v1/volumes', { key });
  if (r.status !== 200) throw new Error(`volumes: ${r.status} ${r.text}`);
  const listed = new Set<string>(
    (r.body.volumes as Array<{ name: string }>).map((v) => driverVolumeName(accountId, v.name)),
  );
  const dir = join(dataDir, 'volumes');
  const onDisk = new Set(
    readdirSync(dir).filter(
      (d) => d.startsWith(`${driverVolumeName(accountId, '')}`) && existsSync(join(dir, d, 'volume.img')),
    ),
  );
  return [
    ...[...listed].filter((v) => !onDisk.has(v)).map((v) => `listed without a disk: ${v}`),
    ...[...onDisk].filter((v) => !listed.has(v)).map((v) => `disk without a record: ${v}`),
    ...readdirSync(dir)
      .filter((d) => d.startsWith('.tmp'))
      .map((d) => `half-made image: ${d}`),
  ];
}

/** A ledger entry as GET /api/v1/account/ledger answers it. */
export interface LedgerEntry {
  id: number;
  delta: number;
  reason: string;
  sandboxId: string | null;
}

/** The whole ledger of the account of `key` (every page) and its balance. */
export async function ledgerOf(s: Server, key: string): Promise<{ balance: number; entries: LedgerEntry[] }> {
  const entries: LedgerEntry[] = [];
  let cursor = '';
  for (let page = 0; page < 100; page++) {
    const r = await s.api('GET', `/api/v1/account/ledger?limit=1000${cursor ? `&cursor=${cursor}` : ''}`, { key });
    if (r.status !== 200) throw new Error(`ledger: ${r.status} ${r.text}`);
    entries.push(...r.body.entries);
    if (!r.body.nextCursor) break;
    cursor = encodeURIComponent(r.body.nextCursor);
  }
  const a = await s.api('GET', '/api/v1/account', { key });
  if (a.status !== 200) throw new Error(`account: ${a.status} ${a.text}`);
  return { balance: a.body.balance, entries };
}

/** Every sandbox of the account of `key`, any state. */
export async function sandboxesOf(s: Server, key: string): Promise<Array<{ id: string; state: string }>> {
  const r = await s.api('GET', '/api/v1/sandboxes?limit=1000', { key });
  if (r.status !== 200) throw new Error(`list: ${r.status} ${r.text}`);
  return r.body.sandboxes;
}

/**
 * Per sandbox id of the ledger: the create debits and the refunds. "Charged twice" is two
 * debits; "lost" is a debit of a sandbox that no longer runs without its full refund.
 */
export function chargesById(entries: LedgerEntry[]): Map<string, { debits: number[]; refunds: number[] }> {
  const m = new Map<string, { debits: number[]; refunds: number[] }>();
  for (const e of entries) {
    if (!e.sandboxId) continue;
    const c = m.get(e.sandboxId) ?? { debits: [], refunds: [] };
    if (e.reason === 'sandbox.create') c.debits.push(e.delta);
    else if (e.reason === 'sandbox.refund') c.refunds.push(e.delta);
    m.set(e.sandboxId, c);
  }
  return m;
}

/**
 * A tmpfs of `sizeMb` on a fresh temp dir, for a data dir that can run out of space.
 * `fill()` takes every free byte but `leaveBytes`, `drain()` gives them back, `remove()`
 * unmounts (lazily if something still holds it) and removes the dir; each is idempotent.
 */
export class SmallFs {
  readonly dir: string;
  private mounted = false;
  constructor(sizeMb: number) {
    this.dir = mkdtempSync(join(tmpdir(), 'sandboxd-fault-fs-'));
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${sizeMb}m,mode=0711`, 'sandboxd-fault-fs', this.dir]);
    this.mounted = true;
  }

  /** Free bytes for an unprivileged writer (what the server sees). */
  freeBytes(): number {
    const out = sh('stat', ['-f', '-c', '%a %S', this.dir]).trim().split(' ').map(Number);
    return out[0] * out[1];
  }

  /** Writes filler files until only about `leaveBytes` remain free (0: until ENOSPC). */
  fill(leaveBytes = 0): void {
    const chunk = Buffer.alloc(1 << 20, 0x5a);
    for (let n = 0; n < 100_000; n++) {
      const free = this.freeBytes();
      const want = free - leaveBytes;
      if (want <= 0) return;
      const fd = openSync(join(this.dir, `filler-${n}`), 'w', 0o600);
      try {
        let left = want;
        while (left > 0) {
          const len = Math.min(left, chunk.length);
          writeSync(fd, chunk, 0, len);
          left -= len;
        }
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOSPC') throw e;
        return;
      } finally {
        closeSync(fd);
      }
    }
  }

  drain(): void {
    for (const f of readdirSync(this.dir)) if (f.startsWith('filler-')) rmSync(join(this.dir, f), { force: true });
  }

  remove(): void {
    if (this.mounted) {
      const r = spawnSync('umount', [this.dir]);
      if (r.status !== 0) spawnSync('umount', ['-l', this.dir]);
      this.mounted = false;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Polls `fn` until it returns true, at most `tries` times `everyMs` apart. */
export async function eventually(fn: () => boolean | Promise<boolean>, tries = 100, everyMs = 100): Promise<boolean> {
  for (let i = 0; i < tries; i++) {
    if (await fn()) return true;
    await new Promise((r) => setTimeout(r, everyMs));
  }
  return false;
}
