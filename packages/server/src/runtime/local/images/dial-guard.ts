/**
 * The one way out of a pull: an HTTP proxy on 127.0.0.1, one per pull, that skopeo must use
 * (HTTPS_PROXY/HTTP_PROXY; CONNECT for https, absolute-URI requests for plain http). For
 * every connection skopeo asks for (the registry, its token service, every redirect hop) the
 * guard resolves the name itself, refuses when any answer is a non-public address
 * ({@link isForbiddenAddress}) and otherwise connects to the very address it checked, so a
 * DNS answer cannot change between check and dial. Only host:port pairs the operator named
 * (`exempt`) are dialled whatever their address. Refusals and dial failures are recorded for
 * the caller's error.
 *
 * Go's proxy support skips the proxy for `localhost` and literal loopback addresses; the
 * caller checks the registry's own name before skopeo starts (see {@link checkHost}).
 */
import { randomBytes } from 'node:crypto';
import { lookup as dnsLookup } from 'node:dns/promises';
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect, isIP, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { isForbiddenAddress } from './pull-policy.js';

/** Every address `host` resolves to (tests pass their own). */
export type Lookup = (host: string) => Promise<string[]>;

export const systemLookup: Lookup = async (host) =>
  (await dnsLookup(host, { all: true, verbatim: true })).map((a) => a.address);

/** What checking one host found: the address to dial, or why not. */
export type HostCheck =
  | { ok: true; address: string }
  | { ok: false; refused: true; address: string }
  | { ok: false; refused: false; error: string };

/**
 * Resolves `host` (a name or a literal address, IPv6 with or without brackets) and decides:
 * dial `address` (the first answer) unless `exempt`, refuse when any answer is forbidden.
 */
export async function checkHost(host: string, exempt: boolean, lookup: Lookup): Promise<HostCheck> {
  const bare = host.replace(/^\[(.*)\]$/, '$1');
  let addrs: string[];
  try {
    addrs = isIP(bare) ? [bare] : await lookup(bare);
  } catch (e) {
    return { ok: false, refused: false, error: (e as Error).message };
  }
  if (addrs.length === 0) return { ok: false, refused: false, error: `no address for ${bare}` };
  const bad = exempt ? undefined : addrs.find(isForbiddenAddress);
  if (bad !== undefined) return { ok: false, refused: true, address: bad };
  return { ok: true, address: addrs[0] };
}

export interface DialGuardOptions {
  /** True for a host:port the operator named: dialled whatever its address. */
  exempt: (host: string, port: number) => boolean;
  lookup?: Lookup;
  /** Give up a connect after this many ms (default 30 s). */
  connectTimeoutMs?: number;
  /** Listen on this Unix socket (for netns-pull.ts) instead of a port on 127.0.0.1. */
  socketPath?: string;
}

/** A refused or failed dial, in the order they happened. */
export interface DialEvent {
  host: string;
  port: number;
  refused: boolean;
  /** The forbidden address (refused), or the error (failed). */
  detail: string;
}

const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-authorization', 'proxy-connection', 'te', 'upgrade', 'trailer'];

/** One pull's proxy. {@link start} it, hand {@link env} to skopeo, {@link close} it after. */
export class DialGuard {
  readonly events: DialEvent[] = [];
  /** The pull's secret: the guard answers only requests that carry it (proxy basic auth, user `sbx`). */
  readonly token = randomBytes(16).toString('hex');
  private readonly sockets = new Set<Duplex>();
  private server?: Server;
  private port = 0;

  private constructor(private readonly opts: DialGuardOptions) {}

  static async start(opts: DialGuardOptions): Promise<DialGuard> {
    const g = new DialGuard(opts);
    const server = createServer((req, res) => void g.forward(req, res));
    server.on('connect', (req: IncomingMessage, sock: Duplex, head: Buffer) => void g.tunnel(req, sock, head));
    server.on('connection', (s: Socket) => g.track(s));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      if (opts.socketPath) server.listen(opts.socketPath, () => resolve());
      else server.listen(0, '127.0.0.1', () => resolve());
    });
    const addr = server.address();
    g.port = typeof addr === 'object' && addr ? addr.port : 0;
    g.server = server;
    return g;
  }

  /** The first refusal, if any. */
  get refusal(): DialEvent | undefined {
    return this.events.find((e) => e.refused);
  }

  /** Proxy variables for skopeo (and no NO_PROXY: every host goes through the guard); TCP mode only. */
  env(): NodeJS.ProcessEnv {
    const url = `http://sbx:${this.token}@127.0.0.1:${this.port}`;
    return { HTTPS_PROXY: url, HTTP_PROXY: url, https_proxy: url, http_proxy: url, NO_PROXY: '', no_proxy: '' };
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    const server = this.server;
    if (!server) return;
    await new Promise<void>((r) => server.close(() => r()));
  }

  private track(s: Duplex): void {
    this.sockets.add(s);
    s.once('close', () => this.sockets.delete(s));
  }

  private authorized(req: IncomingMessage): boolean {
    const want = `Basic ${Buffer.from(`sbx:${this.token}`).toString('base64')}`;
    return req.headers['proxy-authorization'] === want;
  }

  /** Checks host:port; records and returns undefined when it may not be dialled. */
  private async target(host: string, port: number): Promise<string | undefined> {
    const bare = host.replace(/^\[(.*)\]$/, '$1');
    const c = await checkHost(bare, this.opts.exempt(bare.toLowerCase(), port), this.opts.lookup ?? systemLookup);
    if (c.ok) return c.address;
    this.events.push({ host: bare, port, refused: c.refused, detail: c.refused ? c.address : c.error });
    return undefined;
  }

  private dial(address: string, port: number, host: string): Promise<Socket> {
    return new Promise((resolve, reject) => {
      const s = connect({ host: address, port });
      this.track(s);
      const timer = setTimeout(
        () => s.destroy(new Error(`connect to ${host}:${port} timed out`)),
        this.opts.connectTimeoutMs ?? 30_000,
      );
      s.once('connect', () => {
        clearTimeout(timer);
        resolve(s);
      });
      s.once('error', (e) => {
        clearTimeout(timer);
        this.events.push({ host, port, refused: false, detail: e.message });
        reject(e);
      });
    });
  }

  /** CONNECT host:port (https). */
  private async tunnel(req: IncomingMessage, client: Duplex, head: Buffer): Promise<void> {
    client.on('error', () => client.destroy());
    const m = /^(\[[^\]]+\]|[^:]+):(\d{1,5})$/.exec(req.url ?? '');
    if (!this.authorized(req) || !m) {
      client.end(`HTTP/1.1 ${m ? '407 Proxy Authentication Required' : '400 Bad Request'}\r\n\r\n`);
      return;
    }
    const port = Number(m[2]);
    const address = await this.target(m[1], port);
    if (address === undefined) {
      client.end('HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n');
      return;
    }
    let up: Socket;
    try {
      up = await this.dial(address, port, m[1]);
    } catch {
      client.end('HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n');
      return;
    }
    up.on('error', () => client.destroy());
    client.on('error', () => up.destroy());
    client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    if (head.length) up.write(head);
    // Ends travel through the pipes; destroying on 'close' would drop what is still buffered.
    up.pipe(client);
    client.pipe(up);
  }

  /** An absolute-URI request (plain http). */
  private async forward(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let url: URL | undefined;
    try {
      url = new URL(req.url ?? '');
    } catch {
      url = undefined;
    }
    if (!this.authorized(req) || !url || url.protocol !== 'http:') {
      res.writeHead(url ? 407 : 400).end();
      return;
    }
    const port = url.port ? Number(url.port) : 80;
    const address = await this.target(url.hostname, port);
    if (address === undefined) {
      res.writeHead(403, { 'content-length': 0 }).end();
      return;
    }
    const headers = { ...req.headers };
    for (const h of HOP_BY_HOP) delete headers[h];
    const up = request({
      host: address,
      port,
      method: req.method,
      path: `${url.pathname}${url.search}`,
      headers,
      agent: false,
      timeout: this.opts.connectTimeoutMs ?? 30_000,
    });
    up.on('socket', (s) => this.track(s));
    up.on('timeout', () => up.destroy(new Error(`request to ${url.host} timed out`)));
    up.on('error', (e) => {
      this.events.push({ host: url.hostname, port, refused: false, detail: e.message });
      if (!res.headersSent) res.writeHead(502, { 'content-length': 0 }).end();
      else res.destroy();
    });
    up.on('response', (r) => {
      const out = { ...r.headers };
      for (const h of HOP_BY_HOP) delete out[h];
      // A hostile upstream's status (node's parser takes `000`) or headers must not throw
      // out of this handler: that would end the server. Such an answer is a 502.
      try {
        res.writeHead(r.statusCode ?? 502, out);
      } catch (e) {
        this.events.push({ host: url.hostname, port, refused: false, detail: (e as Error).message });
        r.destroy();
        if (!res.headersSent) res.writeHead(502, { 'content-length': 0 }).end();
        else res.destroy();
        return;
      }
      r.pipe(res);
    });
    req.pipe(up);
  }
}
