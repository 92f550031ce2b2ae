/**
 * A second "machine" on this one, for tests of runners on several hosts: a network namespace
 * of its own (its own loopback, addresses, routes, nftables, sandbox networks) joined to this
 * host by a veth pair (host side `10.94.<n>.1/30`, the fake host `10.94.<n>.2/30`), and a
 * mount namespace of its own whose `/sys/class/net` shows the fake host's devices, kept in a
 * file so that every process started there (a runner, its restart after kill -9, its
 * teardown) sees the same mounts, as processes of one machine do. Cgroups, the file systems
 * and loop devices stay the host's (one kernel), as they would on a VM's host.
 *
 * Fake hosts are numbered 1..40; a number is claimed atomically (`mkdir` under {@link HOSTS})
 * with the claiming pid, and a claim whose process is gone is torn down and taken over.
 * {@link FakeHost.remove} fails when the fake host still holds a mount (a leak of whatever
 * ran there) after removing it anyway.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Claims and mount-namespace files of fake hosts, one folder `<n>` each. */
export const HOSTS = '/run/sandboxd-test/hosts';
const MAX_HOSTS = 40;
/** The checkout: programs on a fake host start there (entering a mount namespace moves to its root). */
const ROOT = resolve(import.meta.dirname, '../..');

export interface FakeHost {
  n: number;
  /** The network namespace (`ip netns exec` name). */
  netns: string;
  /** The fake host's address, reachable from this host (servers there listen on it). */
  address: string;
  /** This host's address as the fake host sees it. */
  gateway: string;
  /** argv prefix that runs a program on the fake host (its network and mount namespaces), in the checkout. */
  wrap: string[];
  /** Runs a command on the fake host; resolves with its stdout. */
  exec(argv: string[]): Promise<string>;
  /** Mount points on the fake host that this host does not have (what ran there left mounted). */
  ownMounts(): Promise<string[]>;
  /** Removes the fake host (its namespaces, veth, claim); throws after it when mounts were left there. */
  remove(): Promise<void>;
}

function names(n: number) {
  const dir = join(HOSTS, String(n));
  return { dir, netns: `sbxh${n}`, veth: `sbxh${n}`, mnt: join(dir, 'mnt'), pidFile: join(dir, 'pid') };
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function quiet(argv: string[]): Promise<void> {
  await run(argv[0], argv.slice(1)).catch(() => undefined);
}

/** Undoes fake host `n` whatever state it is in (also a half-made one). */
async function destroy(n: number): Promise<void> {
  const f = names(n);
  await quiet(['umount', f.mnt]);
  await quiet(['umount', f.dir]);
  await quiet(['ip', 'netns', 'del', f.netns]);
  await quiet(['ip', 'link', 'del', f.veth]);
  rmSync(f.dir, { recursive: true, force: true });
}

/** Takes the first free number (or one whose claimer is gone, after tearing its leftovers down). */
async function claim(): Promise<number> {
  mkdirSync(HOSTS, { recursive: true, mode: 0o700 });
  const start = process.pid % MAX_HOSTS;
  for (let i = 0; i < MAX_HOSTS; i++) {
    const n = 1 + ((start + i) % MAX_HOSTS);
    const f = names(n);
    try {
      mkdirSync(f.dir, { mode: 0o700 });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      let pid = 0;
      try {
        pid = Number(readFileSync(f.pidFile, 'utf8'));
      } catch {
        continue; // being claimed this instant
      }
      if (alive(pid)) continue;
      await destroy(n);
      try {
        mkdirSync(f.dir, { mode: 0o700 });
      } catch {
        continue;
      }
    }
    writeFileSync(f.pidFile, String(process.pid));
    return n;
  }
  throw new Error(`all ${MAX_HOSTS} fake hosts are claimed (${HOSTS})`);
}

/** Makes a fake host; remove it with {@link FakeHost.remove}. */
export async function makeFakeHost(): Promise<FakeHost> {
  const n = await claim();
  const f = names(n);
  const address = `10.94.${n}.2`;
  const gateway = `10.94.${n}.1`;
  const wrap = ['nsenter', `--mount=${f.mnt}`, `--net=/run/netns/${f.netns}`, `--wd=${ROOT}`, '--'];
  const exec = async (argv: string[]) => (await run(wrap[0], [...wrap.slice(1), ...argv])).stdout;
  try {
    await run('ip', ['netns', 'add', f.netns]);
    await run('ip', ['link', 'add', f.veth, 'type', 'veth', 'peer', 'name', 'uplink', 'netns', f.netns]);
    await run('ip', ['addr', 'add', `${gateway}/30`, 'dev', f.veth]);
    await run('ip', ['link', 'set', f.veth, 'up']);
    const inNs = (argv: string[]) => run('ip', ['netns', 'exec', f.netns, ...argv]);
    await inNs(['ip', 'link', 'set', 'lo', 'up']);
    await inNs(['ip', 'addr', 'add', `${address}/30`, 'dev', 'uplink']);
    await inNs(['ip', 'link', 'set', 'uplink', 'up']);
    // The mount namespace lives in a file on a private mount (a bind of its own folder).
    await run('mount', ['--bind', f.dir, f.dir]);
    await run('mount', ['--make-private', f.dir]);
    writeFileSync(f.mnt, '');
    await run('unshare', [`--mount=${f.mnt}`, '--propagation', 'private', 'true']);
    // Its /sys/class/net and /sys/devices/virtual/net from a sysfs mounted inside its netns.
    const sys = join(f.dir, 'sys');
    mkdirSync(sys);
    await exec([
      'sh',
      '-c',
      `mount -t sysfs sysfs ${sys} && mount --bind ${sys}/class/net /sys/class/net && ` +
        `mount --bind ${sys}/devices/virtual/net /sys/devices/virtual/net && umount ${sys}`,
    ]);
  } catch (e) {
    await destroy(n);
    throw e;
  }
  const baseline = new Set((await exec(['findmnt', '-rn', '-o', 'TARGET'])).split('\n').filter(Boolean));
  const ownMounts = async () =>
    (await exec(['findmnt', '-rn', '-o', 'TARGET'])).split('\n').filter((m) => m && !baseline.has(m));
  return {
    n,
    netns: f.netns,
    address,
    gateway,
    wrap,
    exec,
    ownMounts,
    async remove() {
      const left = existsSync(f.mnt) ? await ownMounts().catch(() => []) : [];
      await destroy(n);
      if (left.length) throw new Error(`fake host ${n} was left with mounts: ${left.join(', ')}`);
    },
  };
}
