/**
 * One sandboxd instance on a host: its key (from its data dir) and the locks that keep a
 * second process off its data dir and its bridge.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, realpathSync } from 'node:fs';
import { createConnection, createServer, type Server } from 'node:net';

/**
 * The instance key of data dir `dataDir`: the first 10 hex digits of the SHA-256 of its real
 * path. Stable across restarts and the same for every spelling of the path; names the
 * instance's run dir (`<runDir>/<key>`), its default cgroup folder, the marker on its
 * containers and its lock. Creates the data dir when missing.
 */
export function instanceKey(dataDir: string): string {
  mkdirSync(dataDir, { recursive: true });
  return createHash('sha256').update(realpathSync(dataDir)).digest('hex').slice(0, 10);
}

/** What a lock's holder tells a process that finds the lock taken. */
export interface LockHolder {
  pid: number;
  /** `server`, `teardown` or `restore`. */
  role: string;
  dataDir: string;
  bridge?: string;
}

/** A second process on a data dir or bridge that another one holds. */
export class InstanceLockedError extends Error {
  override name = 'InstanceLockedError';
}

/** Locks held by this process; {@link release} gives them back (exit does too, even kill -9). */
export interface InstanceLock {
  readonly key: string;
  release(): Promise<void>;
}

/** Abstract unix socket name of the data dir lock. */
export function dataDirLockName(key: string): string {
  return `sandboxd-${key}`;
}

/** Abstract unix socket name of the bridge lock. */
export function bridgeLockName(bridge: string): string {
  return `sandboxd-bridge-${bridge}`;
}

/**
 * Takes the instance's locks before anything else touches the host: the data dir's (always)
 * and, with `bridge`, the bridge's. Each is an abstract unix socket (`\0sandboxd-<key>`,
 * `\0sandboxd-bridge-<bridge>`) this process listens on: the kernel releases it when the
 * process ends, however it ends, so a lock never outlives its holder. A process that finds a
 * lock taken connects to it and is told the holder's pid. Throws
 * {@link InstanceLockedError} naming the data dir (or bridge) and the holder's pid; then
 * nothing is held.
 */
export async function acquireInstanceLock(o: {
  dataDir: string;
  bridge?: string;
  role: 'server' | 'teardown' | 'restore';
}): Promise<InstanceLock> {
  const key = instanceKey(o.dataDir);
  const dataDir = realpathSync(o.dataDir);
  const me: LockHolder = { pid: process.pid, role: o.role, dataDir, ...(o.bridge ? { bridge: o.bridge } : {}) };
  const held: Server[] = [];
  const release = async () => {
    for (const s of held.splice(0)) await new Promise<void>((r) => s.close(() => r()));
  };
  const dirLock = await listenAbstract(dataDirLockName(key), me);
  if ('holder' in dirLock) {
    throw new InstanceLockedError(
      `data dir ${dataDir} is in use by another sandboxd (${describe(dirLock.holder)}); stop it first`,
    );
  }
  held.push(dirLock.server);
  if (o.bridge) {
    const bridgeLock = await listenAbstract(bridgeLockName(o.bridge), me);
    if ('holder' in bridgeLock) {
      await release();
      const other = bridgeLock.holder?.dataDir ? `, data dir ${bridgeLock.holder.dataDir}` : '';
      throw new InstanceLockedError(
        `bridge ${o.bridge} is in use by another sandboxd (${describe(bridgeLock.holder)}${other}); give each instance its own SANDBOXD_BRIDGE and SANDBOXD_SUBNET`,
      );
    }
    held.push(bridgeLock.server);
  }
  return { key, release };
}

function describe(h: LockHolder | null): string {
  if (!h) return 'pid unknown';
  if (h.role === 'teardown') return `pid ${h.pid}, removing it from the host`;
  return h.role === 'restore' ? `pid ${h.pid}, restoring a backup into it` : `pid ${h.pid}`;
}

/**
 * Listens on abstract socket `\0<name>`; every connection is answered with `me` as one JSON
 * line. When the name is taken: the holder's answer (null when it gives none within 2 s).
 */
async function listenAbstract(
  name: string,
  me: LockHolder,
): Promise<{ server: Server } | { holder: LockHolder | null }> {
  const server = createServer((s) => {
    s.on('error', () => {});
    s.end(`${JSON.stringify(me)}\n`);
  });
  const taken = await new Promise<boolean>((resolve, reject) => {
    server.once('error', (e: NodeJS.ErrnoException) => (e.code === 'EADDRINUSE' ? resolve(true) : reject(e)));
    server.listen({ path: `\0${name}` }, () => resolve(false));
  });
  if (!taken) {
    server.unref(); // a lock never keeps the process alive
    return { server };
  }
  return { holder: await askHolder(name) };
}

/** The holder's answer on `\0<name>`, or null. */
function askHolder(name: string): Promise<LockHolder | null> {
  return new Promise((resolve) => {
    let text = '';
    const s = createConnection({ path: `\0${name}` });
    const done = (h: LockHolder | null) => {
      clearTimeout(timer);
      s.destroy();
      resolve(h);
    };
    const timer = setTimeout(() => done(null), 2000);
    s.setEncoding('utf8');
    s.on('data', (d: string) => {
      text += d;
    });
    s.on('end', () => {
      try {
        const h = JSON.parse(text) as LockHolder;
        done(Number.isInteger(h.pid) ? h : null);
      } catch {
        done(null);
      }
    });
    s.on('error', () => done(null));
  });
}
