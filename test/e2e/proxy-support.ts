/**
 * Support for the port proxy's e2e tests and benchmark: a real server on the local (crun)
 * runtime with its own bridge, subnet, run dir, uid range and cgroup folder, torn down
 * after; a small Python app (HTTP/1.1 echo, byte stream, upload hash, SSE, slow answer and
 * a WebSocket echo) to run inside a `local/debian:bookworm` sandbox; and request helpers.
 */
import { assertErrorBody } from './error-kinds.js';
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request, type IncomingHttpHeaders } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { LocalDriver } from '../../packages/server/src/runtime/local/driver.js';
import { startServer, type Server } from './harness.js';
// Each server's bridge, subnet, uid range and cgroup folder: a host slot claimed by the harness.
import { localOptions, releaseSlot } from './local-runtime.js';

const IMAGE_DIR = process.env.SANDBOXD_TEST_IMAGE_DIR ?? resolve(import.meta.dirname, '../../.sandboxd-test/images');

/** Why the local runtime cannot run here, or null when it can. */
export function localUnavailable(): string | null {
  if (process.getuid?.() !== 0) return 'the local runtime needs root';
  try {
    execFileSync('crun', ['--version'], { stdio: 'ignore' });
  } catch {
    return 'crun is not installed (npm run setup)';
  }
  if (!existsSync(join(IMAGE_DIR, 'refs'))) return `no image cache at ${IMAGE_DIR} (npm run setup)`;
  return null;
}

/** A started server on the local runtime; `teardown` stops it and removes every trace on the host. */
export interface LocalServer extends Server {
  /** The subnet its sandboxes get addresses from. */
  subnet: string;
  teardown(): Promise<void>;
}

/** Starts the real server (`main.ts`) on the local runtime, isolated from other servers on this host. */
export async function startLocalServer(env: Record<string, string> = {}): Promise<LocalServer> {
  const dataDir = mkdtempSync(join(tmpdir(), 'sandboxd-proxy-e2e-'));
  chmodSync(dataDir, 0o711); // sandbox uids traverse it to their roots
  const o = localOptions(dataDir);
  const s = await startServer({
    dataDir,
    env: {
      SANDBOXD_RUNTIME: 'local',
      SANDBOXD_IMAGE_DIR: o.imageDir,
      SANDBOXD_RUN_DIR: o.runDir!,
      SANDBOXD_BRIDGE: o.bridge!,
      SANDBOXD_SUBNET: o.subnet!,
      SANDBOXD_UID_RANGE_START: String(o.uidRangeStart),
      SANDBOXD_CGROUP_PARENT: o.cgroupParent!,
      ...env,
    },
  }).catch(async (e) => {
    // A server that died during start-up may have set up its bridge already.
    await new LocalDriver(o).destroyAll().catch(() => {});
    releaseSlot(dataDir);
    rmSync(dataDir, { recursive: true, force: true });
    throw e;
  });
  return Object.assign(s, {
    subnet: o.subnet!,
    async teardown() {
      await s.stop({ keepData: true });
      await new LocalDriver(o).destroyAll();
      releaseSlot(dataDir);
      rmSync(dataDir, { recursive: true, force: true });
    },
  });
}

/** The Python app run inside the sandbox: `python3 /app/app.py <port>`. */
export const PY_APP = String.raw`
import base64, hashlib, json, socket, struct, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
release = threading.Event()
CHUNK = b'x' * 262144
class H(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    disable_nagle_algorithm = True
    def log_message(self, *a): pass
    def reply(self, obj, status=200):
        b = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def body(self):
        if self.headers.get('Transfer-Encoding', '').lower() == 'chunked':
            while True:
                size = int(self.rfile.readline().split(b';')[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b'\r\n', b'\n', b''): pass
                    return
                yield self.rfile.read(size)
                self.rfile.readline()
        left = int(self.headers.get('Content-Length') or 0)
        while left > 0:
            d = self.rfile.read(min(left, 262144))
            if not d: return
            left -= len(d)
            yield d
    def do_GET(self):
        path, _, query = self.path.partition('?')
        if self.headers.get('Upgrade', '').lower() == 'websocket': return self.websocket()
        if path == '/bytes':
            n = int(query.split('n=')[1].split('&')[0])
            self.send_response(200)
            self.send_header('Content-Type', 'application/octet-stream')
            self.send_header('Content-Length', str(n))
            self.end_headers()
            while n > 0:
                c = CHUNK if n >= len(CHUNK) else CHUNK[:n]
                self.wfile.write(c)
                n -= len(c)
        elif path == '/sse':
            self.close_connection = True
            self.send_response(200)
            self.send_header('Content-Type', 'text/event-stream')
            self.send_header('Connection', 'close')
            self.end_headers()
            self.wfile.write(b'data: one\n\n')
            release.wait(60)
            self.wfile.write(b'data: two\n\n')
        elif path == '/release':
            release.set()
            self.reply({'released': True})
        elif path == '/slow':
            time.sleep(30)
            self.reply({'slow': True})
        else:
            self.echo()
    def do_POST(self):
        h, n = hashlib.sha256(), 0
        for d in self.body():
            h.update(d)
            n += len(d)
        self.reply({'method': self.command, 'bytes': n, 'sha256': h.hexdigest()})
    do_PUT = do_PATCH = do_DELETE = do_POST
    def echo(self):
        self.reply({'method': self.command, 'path': self.path, 'headers': dict(self.headers), 'hostname': socket.gethostname(), 'client': self.client_address[0]})
    def websocket(self):
        key = self.headers['Sec-WebSocket-Key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11'
        self.send_response(101)
        self.send_header('Upgrade', 'websocket')
        self.send_header('Connection', 'Upgrade')
        self.send_header('Sec-WebSocket-Accept', base64.b64encode(hashlib.sha1(key.encode()).digest()).decode())
        self.end_headers()
        self.close_connection = True
        r, w = self.rfile, self.wfile
        while True:
            h = r.read(2)
            if len(h) < 2: return
            op, n = h[0] & 15, h[1] & 127
            if n == 126: n = struct.unpack('>H', r.read(2))[0]
            elif n == 127: n = struct.unpack('>Q', r.read(8))[0]
            mask = r.read(4) if h[1] & 128 else b'\0\0\0\0'
            data = r.read(n)
            data = (int.from_bytes(data, 'big') ^ int.from_bytes((mask * (n // 4 + 1))[:n], 'big')).to_bytes(n, 'big')
            if op == 8:
                w.write(b'\x88\x00')
                return
            if op == 9: op = 10
            head = bytes([128 | op]) + (bytes([n]) if n < 126 else bytes([126]) + struct.pack('>H', n) if n < 65536 else bytes([127]) + struct.pack('>Q', n))
            w.write(head + data)
ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(('0.0.0.0', int(sys.argv[1])), H).serve_forever()
`;

/** Writes {@link PY_APP} into the sandbox and starts it in the background on `port`. */
export async function startPyApp(s: Server, id: string, port: number, key?: string): Promise<void> {
  const w = await s.api('POST', `/api/v1/sandboxes/${id}/exec`, {
    key,
    body: { command: `mkdir -p /app && cat > /app/app.py <<'PYEOF'\n${PY_APP}\nPYEOF` },
  });
  if (w.body?.exitCode !== 0) throw new Error(`writing the app failed: ${w.text}`);
  const r = await s.api('POST', `/api/v1/sandboxes/${id}/exec`, {
    key,
    body: { command: `python3 /app/app.py ${port} >/tmp/app.log 2>&1`, options: { background: true } },
  });
  if (r.status !== 200) throw new Error(`starting the app failed: ${r.text}`);
}

/** Polls `path` through the proxy until it answers something else than 502 (bounded: 15 s). */
export async function waitListening(
  s: Server,
  host: string,
  path = '/',
  extra: Record<string, string> = {},
): Promise<void> {
  for (let i = 0; i < 150; i++) {
    const r = await hget(s.port, host, { path, headers: extra }).catch(() => null);
    if (r && r.status !== 502) return;
    await new Promise((res) => setTimeout(res, 100));
  }
  throw new Error(`nothing listening behind ${host} after 15 s`);
}

/** A reply with its body as text. */
export interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** An HTTP request to 127.0.0.1:`port` with the given Host header (Node's http client). */
export function hget(
  port: number,
  host: string,
  o: { path?: string; method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<Reply> {
  return new Promise((res, rej) => {
    const headers: Record<string, string> = { host, ...o.headers };
    if (o.body !== undefined) headers['content-length'] = String(Buffer.byteLength(o.body));
    const req = request(
      { host: '127.0.0.1', port, method: o.method ?? 'GET', path: o.path ?? '/', headers, agent: false },
      (r) => {
        let body = '';
        r.setEncoding('utf8');
        r.on('data', (c) => (body += c));
        r.on('end', () => {
          const status = r.statusCode ?? 0;
          const json = /\bapplication\/json\b/i.test(r.headers['content-type'] ?? '');
          try {
            // The proxy's own refusals carry a kind like every sandboxd error.
            if (status >= 400 && json && r.headers['x-sandboxd-proxy'] === 'error' && o.method !== 'HEAD') {
              assertErrorBody(status, body, `${o.method ?? 'GET'} ${host}${o.path ?? '/'}`);
            }
            res({ status, headers: r.headers, body });
          } catch (e) {
            rej(e);
          }
        });
        r.on('error', rej);
      },
    );
    req.setTimeout(60_000, () => req.destroy(new Error('request timed out')));
    req.on('error', rej);
    req.end(o.body);
  });
}

/** Resident set size of a process in bytes (from /proc). */
export function rssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}

/**
 * A dispatcher for Node's fetch that resolves every name to 127.0.0.1, as browsers and
 * curl do for `*.localhost` (glibc does not). Node's fetch ignores a `Host` header, so
 * this is how it reaches a template URL. Built from the global dispatcher's class, as
 * Node ships undici without exposing it.
 */
export function loopbackDispatcher(): { close(): Promise<void> } {
  const g = (globalThis as Record<symbol, { constructor: new (o: unknown) => { close(): Promise<void> } } | undefined>)[
    Symbol.for('undici.globalDispatcher.1')
  ];
  if (!g) throw new Error('call fetch once before loopbackDispatcher()');
  type Cb = (e: Error | null, a: string | Array<{ address: string; family: number }>, f?: number) => void;
  const lookup = (_host: string, o: { all?: boolean }, cb: Cb) =>
    o?.all ? cb(null, [{ address: '127.0.0.1', family: 4 }]) : cb(null, '127.0.0.1', 4);
  return new g.constructor({ connect: { lookup } });
}
