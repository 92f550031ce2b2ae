/**
 * Shared by the image-build suites (test/e2e/builds*.test.ts): build contexts as tar streams
 * made here byte by byte (so hostile entries can be made too), a client of the build routes
 * over raw HTTP (fetch, no SDK), NDJSON log streams, and the host-side checks a build must
 * leave true: no step sandbox left, no half layer image in the image store.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import type { Build, BuildLogEvent } from '@sandboxd/protocol';
import { instanceKey } from '../../packages/server/src/instance.js';
import { LocalDriver } from '../../packages/server/src/runtime/local/driver.js';
import { RUNTIME, type Server } from './harness.js';
import { localOptions, TEST_IMAGE_DIR } from './local-runtime.js';

export const DEBIAN = 'local/debian:bookworm';
export const BUSYBOX = 'local/busybox:latest';
const FINAL = new Set(['ready', 'error', 'cancelled']);

/** One entry of {@link tar}. */
export interface TarEntry {
  name: string;
  type?: 'file' | 'dir' | 'symlink' | 'hardlink' | 'fifo';
  data?: Buffer | string;
  /** Link target (symlink, hardlink). */
  link?: string;
  mode?: number;
  uid?: number;
  gid?: number;
}

/** A tar stream (ustar; a pax header carries names and link targets too long for it). */
export function tar(entries: TarEntry[]): Buffer {
  const blocks: Buffer[] = [];
  const typeflag = { file: '0', hardlink: '1', symlink: '2', dir: '5', fifo: '6' } as const;
  const header = (name: string, flag: string, size: number, e: Partial<TarEntry>): Buffer => {
    const h = Buffer.alloc(512);
    const put = (s: string, off: number, len: number) => h.write(s, off, len, 'utf8');
    const oct = (n: number, off: number, len: number) => put(`${n.toString(8).padStart(len - 1, '0')}\0`, off, len);
    put(name.slice(0, 100), 0, 100);
    oct(e.mode ?? (flag === '5' ? 0o755 : 0o644), 100, 8);
    oct(e.uid ?? 0, 108, 8);
    oct(e.gid ?? 0, 116, 8);
    oct(size, 124, 12);
    oct(1_700_000_000, 136, 12);
    put(' '.repeat(8), 148, 8);
    put(flag, 156, 1);
    if (e.link) put(e.link.slice(0, 100), 157, 100);
    put('ustar\x0000', 257, 8);
    let sum = 0;
    for (const b of h) sum += b;
    put(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 8);
    return h;
  };
  const push = (h: Buffer, data: Buffer) => blocks.push(h, data, Buffer.alloc((512 - (data.length % 512)) % 512));
  for (const e of entries) {
    const type = e.type ?? (e.name.endsWith('/') ? 'dir' : 'file');
    const data = type === 'file' ? Buffer.from(e.data ?? '') : Buffer.alloc(0);
    if (Buffer.byteLength(e.name) > 100 || Buffer.byteLength(e.link ?? '') > 100) {
      const rec = (k: string, v: string) => {
        const body = ` ${k}=${v}\n`;
        let n = Buffer.byteLength(body) + 1;
        while (String(n).length + Buffer.byteLength(body) !== n) n = String(n).length + Buffer.byteLength(body);
        return `${n}${body}`;
      };
      const pax = Buffer.from(rec('path', e.name) + (e.link ? rec('linkpath', e.link) : ''));
      push(header('PaxHeaders/x', 'x', pax.length, {}), pax);
    }
    push(header(e.name, typeflag[type], data.length, e), data);
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

/** A context tar from a map of path -> content (or entry fields); dirs end with `/`. */
export function context(files: Record<string, string | Buffer | Omit<TarEntry, 'name'>>): Buffer {
  return tar(
    Object.entries(files).map(([name, v]) =>
      typeof v === 'string' || Buffer.isBuffer(v) ? { name, data: v } : { name, ...v },
    ),
  );
}

export const gzip = (b: Buffer): Buffer => gzipSync(b);

export interface BuildQuery {
  name: string;
  tag?: string;
  dockerfile?: string;
  buildArgs?: Record<string, string> | string;
  allowDomains?: string[] | string;
  noCache?: boolean;
}

export interface Reply<T = any> {
  status: number;
  body: T;
  text: string;
}

/** The build and template routes of one account, over raw HTTP. */
export class Builds {
  constructor(
    readonly s: Server,
    readonly key: string,
  ) {}

  private headers(extra: Record<string, string> = {}): Record<string, string> {
    return { authorization: `Bearer ${this.key}`, ...extra };
  }

  private async call(method: string, path: string, body?: Buffer, contentType?: string): Promise<Reply> {
    const res = await fetch(`${this.s.baseUrl}${path}`, {
      method,
      headers: this.headers(contentType ? { 'content-type': contentType } : {}),
      body: body && new Uint8Array(body),
      signal: AbortSignal.timeout(120_000),
    });
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = undefined;
    }
    return { status: res.status, body: parsed, text };
  }

  /** `POST /api/v1/images/builds`: the answer as is (202 `{build}` or an error). */
  start(q: BuildQuery, body: Buffer = context({}), contentType = 'application/x-tar'): Promise<Reply> {
    const p = new URLSearchParams({ name: q.name });
    if (q.tag !== undefined) p.set('tag', q.tag);
    if (q.dockerfile !== undefined) p.set('dockerfile', q.dockerfile);
    if (q.buildArgs !== undefined)
      p.set('buildArgs', typeof q.buildArgs === 'string' ? q.buildArgs : JSON.stringify(q.buildArgs));
    if (q.allowDomains !== undefined)
      p.set('allowDomains', typeof q.allowDomains === 'string' ? q.allowDomains : q.allowDomains.join(','));
    if (q.noCache !== undefined) p.set('noCache', String(q.noCache));
    return this.call('POST', `/api/v1/images/builds?${p}`, body, contentType);
  }

  /** Starts a build that must be accepted (202); its id. */
  async started(q: BuildQuery, body?: Buffer): Promise<Build> {
    const r = await this.start(q, body);
    assert.equal(r.status, 202, r.text);
    assert.equal(r.body.build.state === 'queued' || r.body.build.state === 'building', true, r.text);
    return r.body.build;
  }

  /** Starts a build and waits for its end (bounded). */
  async run(q: BuildQuery, body?: Buffer, ms = 600_000): Promise<Build> {
    return this.wait((await this.started(q, body)).id, ms);
  }

  async get(id: string): Promise<Reply> {
    return this.call('GET', `/api/v1/images/builds/${id}`);
  }

  async list(): Promise<Build[]> {
    const r = await this.call('GET', '/api/v1/images/builds');
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.count, r.body.builds.length);
    return r.body.builds;
  }

  cancel(id: string): Promise<Reply> {
    return this.call('POST', `/api/v1/images/builds/${id}/cancel`);
  }

  delete(id: string): Promise<Reply> {
    return this.call('DELETE', `/api/v1/images/builds/${id}`);
  }

  async templates(): Promise<Array<{ name: string; tag: string; image: string; buildId: string }>> {
    const r = await this.call('GET', '/api/v1/templates');
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.count, r.body.templates.length);
    return r.body.templates;
  }

  deleteTemplate(name: string, tag?: string): Promise<Reply> {
    return this.call('DELETE', `/api/v1/templates/${name}${tag ? `?tag=${encodeURIComponent(tag)}` : ''}`);
  }

  /** Polls the build until it is final (every 200 ms, at most `ms`). */
  async wait(id: string, ms = 600_000): Promise<Build> {
    const end = Date.now() + ms;
    for (;;) {
      const r = await this.get(id);
      assert.equal(r.status, 200, r.text);
      if (FINAL.has(r.body.build.state)) return r.body.build;
      if (Date.now() > end) throw new Error(`build ${id} still ${r.body.build.state} after ${ms} ms`);
      await new Promise((res) => setTimeout(res, 200));
    }
  }

  /** Opens the build's log stream: the response (NDJSON), for {@link lines}. */
  async openLogs(id: string, o: { offset?: number; follow?: boolean; signal?: AbortSignal } = {}): Promise<Response> {
    const p = new URLSearchParams();
    if (o.offset !== undefined) p.set('offset', String(o.offset));
    if (o.follow !== undefined) p.set('follow', String(o.follow));
    return fetch(`${this.s.baseUrl}/api/v1/images/builds/${id}/logs?${p}`, {
      headers: this.headers(),
      signal: o.signal ?? AbortSignal.timeout(600_000),
    });
  }

  /** Every event of the log from `offset` (with `follow`: until the `end` line). */
  async logs(id: string, o: { offset?: number; follow?: boolean } = {}): Promise<BuildLogEvent[]> {
    const res = await this.openLogs(id, o);
    assert.equal(res.status, 200, await res.clone().text());
    assert.match(res.headers.get('content-type') ?? '', /application\/x-ndjson/);
    const out: BuildLogEvent[] = [];
    for await (const e of lines(res)) out.push(e);
    return out;
  }

  /** The text of the build's whole log (`log` lines joined). */
  async logText(id: string): Promise<string> {
    return (await this.logs(id))
      .filter((e) => e.type === 'log')
      .map((e) => (e as { text: string }).text)
      .join('\n');
  }

  /** Sandboxes of the account that a build made (metadata `sandboxd.build`), of one build or any. */
  async stepSandboxes(buildId?: string): Promise<Array<{ id: string; metadata: Record<string, string> }>> {
    const r = await this.s.api('GET', '/api/v1/sandboxes?limit=1000', { key: this.key });
    assert.equal(r.status, 200, r.text);
    return (r.body.sandboxes as Array<{ id: string; metadata: Record<string, string> }>).filter((x) =>
      buildId ? x.metadata?.['sandboxd.build'] === buildId : x.metadata?.['sandboxd.build'] !== undefined,
    );
  }

  /** Creates a sandbox from `image` (a template); its id. */
  async sandbox(image: string, body: Record<string, unknown> = {}): Promise<string> {
    const r = await this.s.api('POST', '/api/v1/sandboxes', {
      key: this.key,
      body: { image, timeoutMs: 600_000, ...body },
    });
    assert.equal(r.status, 201, r.text);
    return r.body.sandbox.id;
  }

  /** Runs `command` in sandbox `id` (options as the exec route takes them). */
  async sh(
    id: string,
    command: string,
    options: Record<string, unknown> = {},
  ): Promise<{ stdout: string; stderr: string; exitCode: number }> {
    const r = await this.s.api('POST', `/api/v1/sandboxes/${id}/exec`, {
      key: this.key,
      body: { command, options: { timeoutMs: 120_000, ...options } },
    });
    assert.equal(r.status, 200, r.text);
    return r.body;
  }

  async deleteSandbox(id: string): Promise<void> {
    await this.s.api('DELETE', `/api/v1/sandboxes/${id}`, { key: this.key });
  }

  /** `sandbox.create` debits of the ledger: one per sandbox the account (or a build of it) started. */
  async creates(): Promise<number> {
    const r = await this.s.api('GET', '/api/v1/account/ledger?limit=1000', { key: this.key });
    assert.equal(r.status, 200, r.text);
    return (r.body.entries as Array<{ reason: string }>).filter((e) => e.reason === 'sandbox.create').length;
  }

  /** Deletes every build and template of the account (what the suites made). */
  async purge(): Promise<void> {
    for (const b of await this.list().catch(() => [])) {
      if (!FINAL.has(b.state)) await this.cancel(b.id).catch(() => undefined);
      await this.delete(b.id).catch(() => undefined);
    }
    const names = new Set((await this.templates().catch(() => [])).map((t) => t.name));
    for (const n of names) await this.deleteTemplate(n).catch(() => undefined);
  }
}

/** The events of an NDJSON response, one per line (the last line may lack its newline). */
export async function* lines(res: Response): AsyncGenerator<BuildLogEvent> {
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let nl = buf.indexOf('\n');
      while (nl >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.trim()) yield JSON.parse(line);
        nl = buf.indexOf('\n');
      }
    }
    if (buf.trim()) yield JSON.parse(buf);
  } finally {
    reader.releaseLock();
  }
}

/** A Dockerfile as the first entry of a context, beside `files`. */
export function withDockerfile(dockerfile: string, files: Parameters<typeof context>[0] = {}): Buffer {
  return context({ Dockerfile: dockerfile, ...files });
}

/** Images of this server's instance in the (shared) image store: named ones, and unnamed by-digest dirs. */
export function instanceImages(dataDir: string): { refs: string[]; unnamed: string[]; work: string[] } {
  const key = instanceKey(dataDir);
  const refsDir = join(TEST_IMAGE_DIR, 'refs');
  const named = new Map<string, string>();
  for (const f of readdirSync(refsDir)) {
    try {
      const e = JSON.parse(readFileSync(join(refsDir, f), 'utf8')) as { ref: string; digest: string };
      named.set(e.digest.replace(/^sha256:/, ''), e.ref);
    } catch {
      /* being written */
    }
  }
  const refs: string[] = [];
  const unnamed: string[] = [];
  const byDigest = join(TEST_IMAGE_DIR, 'by-digest');
  for (const hex of readdirSync(byDigest)) {
    let rec: { snapshot?: { instance?: string; ref?: string } };
    try {
      rec = JSON.parse(readFileSync(join(byDigest, hex, 'image.json'), 'utf8'));
    } catch {
      continue;
    }
    if (rec.snapshot?.instance !== key) continue;
    const ref = named.get(hex);
    if (ref) refs.push(ref);
    else unnamed.push(hex);
  }
  const tmp = join(TEST_IMAGE_DIR, 'tmp');
  return { refs: refs.sort(), unnamed, work: existsSync(tmp) ? readdirSync(tmp) : [] };
}

/** Layer images (`snapshot/<account>/_l.<key>`) of `accountId` named in the image store. */
export function layerRefs(dataDir: string, accountId: string): string[] {
  return instanceImages(dataDir).refs.filter((r) => r.startsWith(`snapshot/${accountId}/_l.`));
}

/**
 * Stops a build suite's server and leaves nothing: every build and template of `accounts`
 * deleted through the API, then (server stopped) every image its instance made removed from
 * the shared image store by the driver, then the harness's own stop (sandboxes, host slot,
 * data dir).
 */
export async function stopClean(s: Server | undefined, accounts: Builds[]): Promise<void> {
  if (!s) return;
  for (const b of accounts) await b.purge().catch(() => undefined);
  await s.cleanup().catch(() => undefined);
  await s.kill('SIGTERM');
  if (RUNTIME === 'local') {
    const driver = new LocalDriver(localOptions(s.dataDir));
    for (const img of await driver.listSnapshots().catch(() => [])) await driver.deleteImage(img.ref).catch(() => {});
  }
  await s.stop();
}

/** The runtime's record (`image.json`) of the image whose config digest is `digest`. */
export function imageRecord(digest: string): {
  entrypoint: string[];
  cmd: string[];
  labels?: Record<string, string>;
  user: string;
  workingDir: string;
  env: Record<string, string>;
} {
  const hex = digest.replace(/^sha256:/, '');
  return JSON.parse(readFileSync(join(TEST_IMAGE_DIR, 'by-digest', hex, 'image.json'), 'utf8'));
}
