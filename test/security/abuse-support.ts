/**
 * Helpers of the API and terminal abuse suites: raw HTTP requests that survive a server
 * closing mid-body, the server's resident memory, and the error-shape check.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import WebSocket from 'ws';

/** Resident memory of a process, from /proc (bytes). */
export function rssBytes(pid: number): number {
  return Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024;
}

export const MiB = (n: number) => `${(n / 2 ** 20).toFixed(1)} MiB`;

export interface RawAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  body: any;
}

/**
 * One request on its own (keep-alive) connection, over a raw socket: the answer is
 * read even when the server answers before reading the whole body and closes (an HTTP
 * client would drop it on the EPIPE). Understands Content-Length and chunked answers.
 */
export function rawRequest(
  baseUrl: string,
  o: { method?: string; path: string; headers?: Record<string, string>; body?: string | Buffer; timeoutMs?: number },
): Promise<RawAnswer> {
  const url = new URL(baseUrl);
  const body = o.body === undefined ? undefined : Buffer.isBuffer(o.body) ? o.body : Buffer.from(o.body);
  const headers: Record<string, string> = { host: url.host, ...(o.headers ?? {}) };
  if (body !== undefined) headers['content-length'] = String(body.length);
  const head = `${o.method ?? 'GET'} ${o.path} HTTP/1.1\r\n${Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('')}\r\n`;
  return new Promise((resolve, reject) => {
    const sock = connect(Number(url.port), url.hostname);
    const chunks: Buffer[] = [];
    let done = false;
    const timer = setTimeout(
      () => finish(new Error(`${o.method ?? 'GET'} ${o.path.slice(0, 80)}: no answer in time`)),
      o.timeoutMs ?? 60_000,
    );
    const finish = (err: Error | null) => {
      if (done) return;
      const parsed = parseAnswer(Buffer.concat(chunks));
      if (!err && !parsed) return; // not complete yet
      done = true;
      clearTimeout(timer);
      sock.destroy();
      if (parsed) resolve(parsed);
      else reject(err);
    };
    sock.on('data', (c: Buffer) => {
      chunks.push(c);
      if (parseAnswer(Buffer.concat(chunks))) finish(null);
    });
    sock.on('end', () =>
      finish(new Error(`${o.method ?? 'GET'} ${o.path.slice(0, 80)}: closed without a complete answer`)),
    );
    sock.on('close', () =>
      finish(new Error(`${o.method ?? 'GET'} ${o.path.slice(0, 80)}: closed without a complete answer`)),
    );
    sock.on('error', () => {}); // a write cut by an early answer; 'close' follows
    sock.write(head);
    if (body !== undefined) sock.write(body);
  });
}

/** A complete HTTP/1.1 answer in `buf`, or null. */
function parseAnswer(buf: Buffer): RawAnswer | null {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return null;
  const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0])?.[1] ?? 0);
  const headers: Record<string, string> = {};
  for (const l of lines.slice(1)) {
    const i = l.indexOf(':');
    if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
  }
  let rest = buf.subarray(end + 4);
  let payload: Buffer;
  if (headers['transfer-encoding'] === 'chunked') {
    const parts: Buffer[] = [];
    for (;;) {
      const nl = rest.indexOf('\r\n');
      if (nl < 0) return null;
      const size = parseInt(rest.subarray(0, nl).toString(), 16);
      if (rest.length < nl + 2 + size + 2) return null;
      if (size === 0) break;
      parts.push(rest.subarray(nl + 2, nl + 2 + size));
      rest = rest.subarray(nl + 2 + size + 2);
    }
    payload = Buffer.concat(parts);
  } else {
    const len = Number(headers['content-length'] ?? 0);
    if (rest.length < len) return null;
    payload = rest.subarray(0, len);
  }
  const text = payload.toString('utf8');
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  return { status, headers, text, body };
}

/** The answer is `status`, in the `{code, kind, message, details?}` shape, and its message or details match `names`. */
export function assertError(
  a: { status: number; body: any; text: string },
  status: number,
  names?: RegExp,
  what = '',
): void {
  assert.equal(a.status, status, `${what}: ${a.status} ${a.text.slice(0, 300)}`);
  assert.ok(a.body && typeof a.body === 'object', `${what}: error body is JSON: ${a.text.slice(0, 200)}`);
  assert.equal(a.body.code, status, `${what}: code repeats the status`);
  assert.equal(typeof a.body.message, 'string');
  assert.ok(a.body.message.length > 0 && a.body.message.length <= 2000, `${what}: a short message`);
  assert.deepEqual(
    Object.keys(a.body).filter((k) => !['code', 'kind', 'message', 'details'].includes(k)),
    [],
    `${what}: only code, kind, message, details`,
  );
  if (names)
    assert.match(
      `${a.body.message} ${JSON.stringify(a.body.details ?? '')}`,
      names,
      `${what}: the answer names what was wrong`,
    );
}

export interface ServerMemory {
  rss: number;
  /** V8 heap in use. */
  heapUsed: number;
  /** Memory outside the V8 heap held by JS objects (Buffers). */
  external: number;
}

/** Env for `startServer` that opens the V8 inspector on a free loopback port, so tests can force a GC. */
export const INSPECTABLE = { NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --inspect=127.0.0.1:0`.trim() };

/** Forces a full GC in a server started with {@link INSPECTABLE} (its inspector URL is in its stderr log). */
async function collectGarbage(dataDir: string, pid: number): Promise<void> {
  const log = readFileSync(join(dataDir, `server-${pid}.stderr.log`), 'utf8');
  const url = /Debugger listening on (ws:\/\/127\.0\.0\.1:\d+\/[\w-]+)/.exec(log)?.[1];
  if (!url) throw new Error('the server has no inspector: start it with INSPECTABLE');
  const ws = new WebSocket(url);
  try {
    await new Promise<void>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('inspector: no answer')), 30_000);
      ws.on('error', reject);
      ws.on('open', () => ws.send(JSON.stringify({ id: 1, method: 'HeapProfiler.collectGarbage' })));
      ws.on('message', (d: Buffer) => {
        if (JSON.parse(d.toString()).id !== 1) return;
        clearTimeout(t);
        resolve();
      });
    });
  } finally {
    ws.close();
  }
}

/**
 * The server's memory after a forced full GC: RSS (from /proc), and V8 heap in use and
 * memory outside it held by live objects (Buffers), from /metrics. Without the GC an idle
 * V8 keeps dead Buffers counted for as long as nothing allocates.
 */
export async function settledMemory(
  baseUrl: string,
  s: { dataDir: string; proc: { pid?: number } },
): Promise<ServerMemory> {
  const pid = s.proc.pid!;
  await collectGarbage(s.dataDir, pid);
  const m = await (await fetch(`${baseUrl}/metrics`)).text();
  const v = (name: string) => Number(new RegExp(`^sandboxd_process_nodejs_${name} (\\d+)`, 'm').exec(m)?.[1] ?? NaN);
  return { rss: rssBytes(pid), heapUsed: v('heap_size_used_bytes'), external: v('external_memory_bytes') };
}

export const showMemory = (m: ServerMemory) =>
  `RSS ${MiB(m.rss)}, JS heap ${MiB(m.heapUsed)}, external ${MiB(m.external)}`;
