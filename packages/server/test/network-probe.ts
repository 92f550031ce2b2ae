import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';

/**
 * Test helpers for the network tests (src/runtime/local/network/manager.test.ts): TCP probes
 * and listeners inside a netns or on the host, each connect bounded by a timeout, and a
 * snapshot of the host's network state.
 */

/** Outcome of one TCP connect: 'open', 'timeout', or the error code (e.g. 'ECONNREFUSED'). */
export type ProbeResult = string;

const PROBE_JS = `const [h, p, t] = process.argv.slice(1);
const s = require('net').connect({ host: h, port: Number(p), timeout: Number(t) });
const done = (r) => { console.log(r); process.exit(0); };
s.on('connect', () => done('open'));
s.on('timeout', () => done('timeout'));
s.on('error', (e) => done(e.code || 'error'));`;

// The listener exits by itself when the test process dies (even by SIGKILL) and after 2 min.
const LISTEN_JS = `const [h, p, parent] = process.argv.slice(1);
setInterval(() => { if (process.ppid !== Number(parent)) process.exit(0); }, 200).unref();
setTimeout(() => process.exit(0), 120000).unref();
require('net').createServer((c) => c.on('error', () => {}).end('hi\\n')).listen({ host: h, port: Number(p) }, () => console.log('ready'));`;

/** Connects from the host to host:port, giving up after `timeoutMs` (default 1000). */
export function probeFromHost(host: string, port: number, timeoutMs = 1000): Promise<ProbeResult> {
  return new Promise((resolve) => {
    const s = net.connect({ host, port, timeout: timeoutMs });
    const done = (r: string): void => {
      s.destroy();
      resolve(r);
    };
    s.on('connect', () => done('open'));
    s.on('timeout', () => done('timeout'));
    s.on('error', (e: NodeJS.ErrnoException) => done(e.code ?? 'error'));
  });
}

/** Connects from inside netns `ns` to host:port (1 s connect timeout, 5 s hard limit). */
export function probeFromNetns(ns: string, host: string, port: number, timeoutMs = 1000): Promise<ProbeResult> {
  return new Promise((resolve) => {
    const child = spawn('ip', ['netns', 'exec', ns, 'node', '-e', PROBE_JS, host, String(port), String(timeoutMs)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    const kill = setTimeout(() => child.kill('SIGKILL'), timeoutMs + 4000);
    child.stdout.on('data', (d: Buffer) => (out += d));
    child.stderr.on('data', (d: Buffer) => (err += d));
    child.on('close', () => {
      clearTimeout(kill);
      resolve(out.trim() || `probe-failed: ${err.trim()}`);
    });
  });
}

/** Processes started by {@link listenInNetns}; the test's after() hook kills them. */
export const startedChildren = new Set<ChildProcess>();

/** Starts a TCP listener inside netns `ns` on host:port; resolves once it accepts. */
export function listenInNetns(ns: string, host: string, port: number): Promise<ChildProcess> {
  return new Promise((resolve, reject) => {
    // `ip netns exec` execs node itself, so child.pid is the listener's pid.
    const child = spawn('ip', ['netns', 'exec', ns, 'node', '-e', LISTEN_JS, host, String(port), String(process.pid)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    startedChildren.add(child);
    let err = '';
    const fail = setTimeout(() => reject(new Error(`listener in ${ns} did not start: ${err}`)), 10_000);
    child.stderr.on('data', (d: Buffer) => (err += d));
    child.stdout.on('data', (d: Buffer) => {
      if (d.toString().includes('ready')) {
        clearTimeout(fail);
        resolve(child);
      }
    });
    child.on('exit', () => {
      startedChildren.delete(child);
      clearTimeout(fail);
      reject(new Error(`listener in ${ns} exited: ${err}`));
    });
  });
}

/** Kills (SIGKILL) every listener this module started and is still running. */
export function killStartedChildren(): void {
  for (const c of startedChildren) if (c.exitCode === null && c.pid) process.kill(c.pid, 'SIGKILL');
  startedChildren.clear();
}

function sh(cmd: string): string {
  try {
    return execFileSync('sh', ['-c', cmd], { encoding: 'utf8' });
  } catch {
    return '';
  }
}

/**
 * The host's network state as sorted lines: netns, link names, IPv4/IPv6 addresses, routes
 * of every table, nft tables, ip_forward. Lines of other sandboxd sandboxes (netns `sbx-*`,
 * links `sv` + 10 hex) are dropped unless `mine` says they belong to this test, so people
 * working on the same host do not make the comparison flaky.
 */
export function hostNetSnapshot(mine: (name: string) => boolean): string[] {
  const foreign = (line: string): boolean =>
    [...line.matchAll(/\b(sbx-[a-z0-9_]+|sv[0-9a-f]{10})\b/g)].some((m) => !mine(m[1]));
  const lines = [
    ...sh('ip netns list')
      .split('\n')
      .map((l) => `netns ${l.split(' ')[0]}`),
    ...sh('ip -o link show')
      .split('\n')
      .map((l) => `link ${(l.split(': ')[1] ?? '').replace(/@.*/, '')}`),
    ...sh('ip -o addr show')
      .split('\n')
      .map((l) => `addr ${l.split(/\s+/).slice(1, 4).join(' ')}`),
    ...sh('ip route show table all')
      .split('\n')
      .filter((l) => !/^(local|broadcast|multicast)|fe80::|^ff00/.test(l))
      .map((l) => `route ${l.replace(' linkdown', '')}`),
    ...sh('nft list tables')
      .split('\n')
      .map((l) => `nft ${l}`),
    `ip_forward ${sh('cat /proc/sys/net/ipv4/ip_forward').trim()}`,
  ];
  return lines.filter((l) => !/^\w+ $/.test(l) && !foreign(l)).sort();
}
