/**
 * Helpers of the escape and abuse suites: run probes inside sandboxes through the public
 * API only, and read what the host has (listening ports, addresses, binary hashes) from the
 * test process, which runs on the host.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { networkInterfaces } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Server } from '../e2e/harness.js';

const HERE = resolve(fileURLToPath(import.meta.url), '..');
export const ROOT = resolve(HERE, '../..');
export const DEBIAN = 'local/debian:bookworm';
export const BUSYBOX = 'local/busybox:latest';
/** `SANDBOXD_SOAK=1`: longer variants (more rounds, real plan sizes). */
export const SOAK = process.env.SANDBOXD_SOAK === '1';

export interface ExecResult {
  stdout: string;
  stderr: string;
  exitCode: number;
  success: boolean;
  truncated?: boolean;
  pid?: number;
}

/** A client for one account. */
export class Api {
  constructor(
    readonly s: Server,
    readonly key: string,
  ) {}

  async create(body: Record<string, unknown>): Promise<string> {
    const r = await this.s.api('POST', '/api/v1/sandboxes', { key: this.key, body: { timeoutMs: 900_000, ...body } });
    assert.equal(r.status, 201, `create ${JSON.stringify(body)}: ${r.status} ${r.text}`);
    return r.body.sandbox.id as string;
  }

  async delete(id: string): Promise<void> {
    const r = await this.s.api('DELETE', `/api/v1/sandboxes/${id}`, { key: this.key });
    assert.ok(r.status === 204 || r.status === 404, `delete ${id}: ${r.status} ${r.text}`);
  }

  /** POST exec; returns the status and body (not asserted). */
  async execRaw(
    id: string,
    command: string,
    options: Record<string, unknown> = {},
  ): Promise<{ status: number; body: ExecResult & { code?: number; message?: string } }> {
    const r = await this.s.api('POST', `/api/v1/sandboxes/${id}/exec`, {
      key: this.key,
      body: { command, options: { timeoutMs: 60_000, ...options } },
    });
    return { status: r.status, body: r.body };
  }

  /** Foreground exec that must answer 200. */
  async exec(id: string, command: string, options: Record<string, unknown> = {}): Promise<ExecResult> {
    const r = await this.execRaw(id, command, options);
    assert.equal(r.status, 200, `exec ${command.slice(0, 80)}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  }

  /** Background exec; resolves with the in-sandbox pid. */
  async background(id: string, command: string): Promise<number> {
    const r = await this.execRaw(id, command, { background: true, timeoutMs: undefined });
    assert.equal(r.status, 200, `background ${command.slice(0, 80)}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body.pid ?? 0;
  }

  /** Copies a probe script from test/security/probes into the sandbox at /tmp/<name>. */
  async putProbe(id: string, name: string): Promise<string> {
    const b64 = readFileSync(join(HERE, 'probes', name)).toString('base64');
    const r = await this.exec(id, `printf %s '${b64}' | base64 -d > /tmp/${name} && echo put`);
    assert.equal(r.stdout, 'put\n', r.stderr);
    return `/tmp/${name}`;
  }

  /** Runs a probe with python3 and parses the JSON it prints last. */
  async runProbe<T>(id: string, name: string, args: unknown, options: Record<string, unknown> = {}): Promise<T> {
    const path = await this.putProbe(id, name);
    const arg = Buffer.from(JSON.stringify(args)).toString('base64');
    const r = await this.exec(id, `python3 ${path} ${arg}`, options);
    assert.equal(r.exitCode, 0, `${name}: exit ${r.exitCode}\n${r.stderr}\n${r.stdout.slice(-2000)}`);
    return JSON.parse(r.stdout.trim().split('\n').pop()!) as T;
  }
}

/** Sorted p50 of a list of numbers. */
export function p50(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)];
}

/**
 * Exec latency of sandbox `id`: `n` sequential `echo ok` execs, each checked for the right
 * answer (an exec that answers wrongly fails the test). Returns every time in ms.
 */
export async function execLatencies(api: Api, id: string, n = 20): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    const r = await api.exec(id, `echo ok-${i}`, { timeoutMs: 30_000 });
    out.push(performance.now() - t);
    assert.equal(r.stdout, `ok-${i}\n`, `probe sandbox answered ${JSON.stringify(r)}`);
  }
  return out;
}

/** One listening socket of the host, from /proc/net/{tcp,tcp6,udp,udp6}. */
export interface HostSocket {
  proto: 'tcp' | 'udp';
  family: 4 | 6;
  address: string;
  port: number;
}

function hexToAddr(hex: string, family: 4 | 6): string {
  if (family === 4) return [3, 2, 1, 0].map((i) => parseInt(hex.slice(i * 2, i * 2 + 2), 16)).join('.');
  const words: string[] = [];
  for (let w = 0; w < 4; w++) {
    const le = hex.slice(w * 8, w * 8 + 8);
    const be = le.match(/../g)!.reverse().join('');
    words.push(be.slice(0, 4), be.slice(4, 8));
  }
  return words.map((x) => parseInt(x, 16).toString(16)).join(':');
}

/** Every TCP socket in LISTEN and every bound UDP socket of the host's network namespace. */
export function hostListeningSockets(): HostSocket[] {
  const out: HostSocket[] = [];
  for (const [file, proto, family] of [
    ['tcp', 'tcp', 4],
    ['tcp6', 'tcp', 6],
    ['udp', 'udp', 4],
    ['udp6', 'udp', 6],
  ] as const) {
    let text = '';
    try {
      text = readFileSync(`/proc/net/${file}`, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length < 4) continue;
      const [addrHex, portHex] = f[1].split(':');
      const state = f[3];
      if (proto === 'tcp' && state !== '0A') continue; // LISTEN
      if (proto === 'udp' && state !== '07') continue; // unconnected (bound)
      out.push({ proto, family, address: hexToAddr(addrHex, family), port: parseInt(portHex, 16) });
    }
  }
  return out;
}

/** Every address of every host interface (IPv6 link-local ones with their interface). */
export function hostAddresses(): Array<{ address: string; family: 4 | 6; iface: string }> {
  const out: Array<{ address: string; family: 4 | 6; iface: string }> = [];
  for (const [iface, addrs] of Object.entries(networkInterfaces())) {
    for (const a of addrs ?? []) out.push({ address: a.address, family: a.family === 'IPv4' ? 4 : 6, iface });
  }
  return out;
}

export function sha256File(path: string): string {
  return createHash('sha256').update(readFileSync(path)).digest('hex');
}

/**
 * Host binaries a sandbox could try to overwrite: the OCI runtimes, the init bound into
 * every sandbox, sandboxd's native helpers and node itself.
 */
export function hostBinaries(): string[] {
  const bins = [
    '/usr/bin/crun',
    '/usr/local/bin/crun',
    '/usr/bin/runc',
    '/usr/sbin/runc',
    '/usr/bin/catatonit',
    '/usr/libexec/podman/catatonit',
    // gVisor's runtime (the gvisor tier): its sandbox, gofer and exec are this one binary
    '/usr/bin/runsc',
    '/usr/local/bin/runsc',
    process.execPath,
  ];
  const helpers = join(ROOT, 'build/bin');
  if (existsSync(helpers)) for (const f of readdirSync(helpers)) if (!f.includes('.tmp')) bins.push(join(helpers, f));
  return bins.filter((b) => existsSync(b));
}

export function hashAll(paths: string[]): Record<string, string> {
  return Object.fromEntries(paths.map((p) => [p, sha256File(p)]));
}

/** A plain-text table for the test log. */
export function table(rows: Array<Record<string, string | number>>): string {
  if (rows.length === 0) return '';
  const cols = Object.keys(rows[0]);
  const w = cols.map((c) => Math.max(c.length, ...rows.map((r) => String(r[c]).length)));
  const line = (vals: string[]) => vals.map((v, i) => v.padEnd(w[i])).join('  ');
  return [line(cols), line(w.map((n) => '-'.repeat(n))), ...rows.map((r) => line(cols.map((c) => String(r[c]))))]
    .map((l) => `# ${l}`)
    .join('\n');
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One entry of {@link tarArchive}. */
export interface TarEntry {
  name: string;
  type: 'file' | 'dir' | 'symlink' | 'fifo' | 'char';
  data?: Buffer | string;
  link?: string;
  mode?: number;
  dev?: [number, number];
}

/** A ustar archive of `entries` (enough for image layers and docker-save archives). */
export function tarArchive(entries: TarEntry[]): Buffer {
  const blocks: Buffer[] = [];
  const typeflag = { file: '0', symlink: '2', char: '3', dir: '5', fifo: '6' } as const;
  for (const e of entries) {
    const data = e.type === 'file' ? Buffer.from(e.data ?? '') : Buffer.alloc(0);
    const h = Buffer.alloc(512);
    const put = (s: string, off: number, len: number) => h.write(s, off, len, 'utf8');
    const oct = (n: number, off: number, len: number) => put(`${n.toString(8).padStart(len - 1, '0')}\0`, off, len);
    put(e.name, 0, 100);
    oct(e.mode ?? (e.type === 'dir' ? 0o755 : 0o644), 100, 8);
    oct(0, 108, 8);
    oct(0, 116, 8);
    oct(data.length, 124, 12);
    oct(0, 136, 12);
    put(' '.repeat(8), 148, 8);
    put(typeflag[e.type], 156, 1);
    if (e.link) put(e.link, 157, 100);
    put('ustar\x0000', 257, 8);
    if (e.dev) {
      oct(e.dev[0], 329, 8);
      oct(e.dev[1], 337, 8);
    }
    let sum = 0;
    for (const b of h) sum += b;
    put(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 8);
    blocks.push(h, data, Buffer.alloc((512 - (data.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

/** A `docker save` archive of a one-layer image tagged `tag` whose config has `User: user`. */
export function dockerArchive(tag: string, layer: TarEntry[], user: string): Buffer {
  const layerTar = tarArchive(layer);
  const digest = createHash('sha256').update(layerTar).digest('hex');
  const config = Buffer.from(
    JSON.stringify({
      architecture: 'amd64',
      os: 'linux',
      config: { User: user, Cmd: ['/bin/sh'] },
      rootfs: { type: 'layers', diff_ids: [`sha256:${digest}`] },
    }),
  );
  const cdigest = createHash('sha256').update(config).digest('hex');
  const manifest = JSON.stringify([{ Config: `${cdigest}.json`, RepoTags: [tag], Layers: [`${digest}/layer.tar`] }]);
  return tarArchive([
    { name: `${cdigest}.json`, type: 'file', data: config },
    { name: `${digest}/`, type: 'dir' },
    { name: `${digest}/layer.tar`, type: 'file', data: layerTar },
    { name: 'manifest.json', type: 'file', data: manifest },
  ]);
}
