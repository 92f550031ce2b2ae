/**
 * Unit-test fixture of the port proxy: a plain HTTP + WebSocket server on 127.0.0.1 plays
 * the sandbox, a front door with the real PortProxy, SandboxTargets, PortAccess and
 * PortLinks sits in front, and a stub store/runtime names four sandboxes.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, request, type IncomingHttpHeaders, type Server } from 'node:http';
import { connect, createServer as createTcpServer, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { WebSocketServer } from 'ws';
import { FrontDoor } from '../src/http/front-door.js';
import { PortAccess } from '../src/proxy/access.js';
import { PortLinks } from '../src/proxy/links.js';
import { PortProxy } from '../src/proxy/proxy.js';
import { SandboxTargets } from '../src/proxy/targets.js';

/** Sandbox ids of the fixture: public, private (owner `acc_owner`), stopped, unknown. */
export const IDS = {
  pub: `sbx_${'a'.repeat(20)}`,
  priv: `sbx_${'b'.repeat(20)}`,
  stopped: `sbx_${'c'.repeat(20)}`,
  unknown: `sbx_${'d'.repeat(20)}`,
};
export const OWNER_KEY = 'sk_owner';
export const OTHER_KEY = 'sk_other';
export const PUBLIC_HOST = 'sandbox.localhost:8080';

export interface Fixture {
  /** Port of the front server (the proxy). */
  port: number;
  /** Port the stand-in sandbox listens on; `closedPort` has nothing listening. */
  upPort: number;
  closedPort: number;
  /** Requests and upgrades the stand-in sandbox received. */
  seen: Array<{ method: string; url: string; headers: IncomingHttpHeaders }>;
  links: PortLinks;
  /** Releases the second event of `/sse`. */
  releaseSse(): void;
  /** The proxy's shutdown: cuts proxied streams and tunnels. */
  cutAll(): void;
  host(id: string, port?: number): string;
  close(): Promise<void>;
}

/**
 * Starts the fixture; `timeoutMs` is the proxy's response-headers timeout,
 * `maxConnsPerSandbox` its per-sandbox share of connections (default the proxy's).
 */
export async function startFixture(o: { timeoutMs?: number; maxConnsPerSandbox?: number } = {}): Promise<Fixture> {
  const seen: Fixture['seen'] = [];
  const held = new Set<Socket>();
  let release: () => void = () => {};
  const upstream = createServer((req, res) => {
    seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers });
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.pathname === '/upload') {
      const h = createHash('sha256');
      let bytes = 0;
      req.on('data', (c: Buffer) => {
        bytes += c.length;
        h.update(c);
      });
      req.on('end', () => res.end(JSON.stringify({ bytes, sha256: h.digest('hex') })));
    } else if (url.pathname === '/download') {
      sendBytes(res, Number(url.searchParams.get('bytes') ?? 0));
    } else if (url.pathname === '/sse') {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.write('data: one\n\n');
      release = () => res.end('data: two\n\n');
    } else if (url.pathname === '/slow') {
      held.add(req.socket);
    } else if (url.pathname === '/cookies') {
      res.writeHead(
        201,
        'Made',
        [
          ['Set-Cookie', 'a=1'],
          ['Set-Cookie', 'b=2'],
          ['X-Custom', 'yes'],
          ['Connection', 'close, x-custom'],
        ].flat(),
      );
      res.end('ok');
    } else {
      req.resume();
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ method: req.method, url: req.url, headers: req.headers }));
    }
  });
  const wss = new WebSocketServer({ noServer: true });
  upstream.on('upgrade', (req, socket, head) => {
    seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers });
    if (req.url?.startsWith('/silent')) return void held.add(socket as Socket);
    wss.handleUpgrade(req, socket, head, (ws) => ws.on('message', (m, binary) => ws.send(m, { binary })));
  });
  const upPort = await listen(upstream);
  const closedPort = await unusedPort();

  const dataDir = mkdtempSync(join(tmpdir(), 'sbxd-proxy-'));
  const secret = randomBytes(32);
  const links = new PortLinks({ secret: () => secret });
  const record = (id: string, state: string, portsPublic: boolean) => ({
    id,
    accountId: 'acc_owner',
    state,
    portsPublic,
  });
  const records = new Map([
    [IDS.pub, record(IDS.pub, 'started', true)],
    [IDS.priv, record(IDS.priv, 'started', false)],
    [IDS.stopped, record(IDS.stopped, 'stopped', true)],
  ]);
  const targets = new SandboxTargets({
    locate: async (id: string) => {
      const r = records.get(id);
      return r?.state === 'started'
        ? { accountId: r.accountId, portsPublic: r.portsPublic, address: '127.0.0.1' }
        : null;
    },
    allowedSubnet: '127.0.0.1/32',
  });
  const keys = new Map([
    [OWNER_KEY, 'acc_owner'],
    [OTHER_KEY, 'acc_other'],
  ]);
  const access = new PortAccess({ links, accountOfKey: async (k) => keys.get(k) ?? null, now: Date.now });
  const proxy = new PortProxy({
    publicHost: PUBLIC_HOST,
    timeoutMs: o.timeoutMs ?? 30_000,
    maxConnsPerSandbox: o.maxConnsPerSandbox,
    targets,
    access,
    log: pino({ level: 'silent' }),
  });
  const door = new FrontDoor();
  proxy.attach(door);
  const front = door.serverFactory((_req, res) => {
    res.writeHead(404, { 'x-fallback': 'api', 'content-type': 'application/json' });
    res.end('{"code":404,"message":"api"}');
  });
  const port = await listen(front);
  return {
    port,
    upPort,
    closedPort,
    seen,
    links,
    releaseSse: () => release(),
    cutAll: () => proxy.close(),
    host: (id, p = upPort) => `${p}-${id}.${PUBLIC_HOST}`,
    async close() {
      proxy.close();
      targets.close();
      for (const s of held) s.destroy();
      wss.close();
      front.closeAllConnections();
      upstream.closeAllConnections();
      await Promise.all([new Promise((r) => front.close(r)), new Promise((r) => upstream.close(r))]);
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** One response of {@link get}: status, headers, body as text. */
export interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** A request to the front server with the given Host (and options); the body is collected. */
export function get(
  port: number,
  host: string,
  o: { path?: string; method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const length: Record<string, string> =
      o.body === undefined ? {} : { 'content-length': String(Buffer.byteLength(o.body)) };
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path: o.path ?? '/',
        method: o.method ?? 'GET',
        headers: { host, ...length, ...o.headers },
        agent: false,
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
        res.on('error', reject);
      },
    );
    req.setTimeout(20_000, () => req.destroy(new Error('test request timed out')));
    req.on('error', reject);
    req.end(o.body);
  });
}

/** Sends `raw` bytes on a new connection to the front server and returns everything it answers until it closes. */
export function rawRequest(port: number, raw: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port });
    let out = '';
    s.setEncoding('latin1');
    s.setTimeout(20_000, () => s.destroy(new Error('raw request timed out')));
    s.on('data', (c) => {
      out += c;
      // One complete response is enough; keep-alive connections would otherwise stay open.
      const m = /\r\ncontent-length: (\d+)\r\n/i.exec(out);
      const end = out.indexOf('\r\n\r\n');
      if (end !== -1 && (m ? out.length >= end + 4 + Number(m[1]) : out.endsWith('\r\n0\r\n\r\n'))) s.end();
    });
    s.on('close', () => resolve(out));
    s.on('error', reject);
    s.write(raw);
  });
}

function sendBytes(res: import('node:http').ServerResponse, total: number): void {
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': total });
  const chunk = Buffer.alloc(64 * 1024, 120);
  let left = total;
  const pump = () => {
    while (left > 0) {
      const n = Math.min(left, chunk.length);
      left -= n;
      if (!res.write(n === chunk.length ? chunk : chunk.subarray(0, n))) return void res.once('drain', pump);
    }
    res.end();
  };
  pump();
}

function listen(s: Server): Promise<number> {
  return new Promise((r) => s.listen(0, '127.0.0.1', () => r((s.address() as AddressInfo).port)));
}

async function unusedPort(): Promise<number> {
  const s = createTcpServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const p = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return p;
}
