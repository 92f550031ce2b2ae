/**
 * Secret injection at the egress proxy: a connection whose name (Host / SNI) an injection
 * rule of its sandbox allows is terminated here instead of relayed. HTTP (port 80) is parsed
 * by an unlistened `http.Server`; TLS (443) by an unlistened `http2.createSecureServer`
 * (ALPN `h2` and `http/1.1`) with a leaf certificate for the name signed by the driver's CA.
 * Each request is checked on its own and sent upstream over a connection of its own, with
 * TLS verified; see {@link Interceptor}.
 */
import {
  type ClientRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type ServerResponse,
  createServer,
  Agent as HttpAgent,
  request as httpRequest,
} from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { createSecureServer, type Http2ServerRequest, type Http2ServerResponse } from 'node:http2';
import type { Socket } from 'node:net';
import { Duplex, Transform, type TransformCallback } from 'node:stream';
import { createSecureContext, rootCertificates, type SecureContext } from 'node:tls';
import { parseEgressRule, ruleAllowsName, SECRET_VALUE_TOKEN } from '@sandboxd/protocol';
import type { SecretInjection } from '../../driver.js';
import type { EgressCa } from './ca.js';

/** What one injected request reports (the gate adds the sandbox id). */
export interface Injection {
  /** The sandbox's address. */
  from: string;
  secret: string;
  destination: string;
  method: string;
  status: number | null;
  error?: string;
}

export interface InterceptorOptions {
  ca: EgressCa;
  /** The gateway address: upstream connections speak from it (so through the egress path). */
  gateway: string;
  /** Extra CAs trusted upstream (PEM), beside the system's (`SANDBOXD_EGRESS_CA_FILE`). */
  extraCa?: string[];
  /** Tests: the upstream ports (default 80 and 443). */
  upstreamPorts?: { http: number; tls: number };
  /** The rules of the sandbox at `from` that allow `name`, now. */
  rulesFor(from: string, name: string): SecretInjection[];
  onInjection(e: Injection): void;
  /** Every upstream socket (the proxy counts and closes them). */
  track(s: Socket): void;
  /**
   * One upstream socket out of the share of the sandbox at `from` (its proxy connections at
   * once): the release, or null when none is left (the request gets 503).
   */
  claim(from: string): (() => void) | null;
  idleTimeoutMs: number;
}

/** One terminated connection. */
interface Conn {
  kind: 'http' | 'tls';
  from: string;
  name: string;
  addrs: string[];
  /**
   * The connection's own upstream connections, kept alive between its requests (a kept-alive
   * client does not pay an upstream TLS handshake per request); never shared with another
   * client connection, and destroyed with it.
   */
  agent: HttpAgent | HttpsAgent;
  /** Upstream sockets already set up (tracked, timed). */
  upstream: WeakSet<Socket>;
}

/** The code of the error of a request whose sandbox has no connection left in its share. */
const SHARE_SPENT = 'ESANDBOXSHARE';

/** HTTP/2 requests in flight on one terminated connection (each has its own upstream connection). */
export const MAX_STREAMS_PER_CONNECTION = 8;

/** Hop-by-hop headers (RFC 9110 7.6.1), never forwarded either way. */
const HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'http2-settings',
]);

/** The rules of `rules` that allow `name` (their domains in egress-rule syntax). */
export function rulesAllowing(rules: SecretInjection[], name: string): SecretInjection[] {
  return rules.filter((r) =>
    r.domains.some((d) => {
      const p = parseEgressRule(d);
      return !('problem' in p) && p.kind !== 'cidr' && ruleAllowsName(p, name);
    }),
  );
}

/** The host name of a Host / `:authority` value: port dropped, lowercase, no trailing dot. */
export function hostName(v: string | undefined): string | null {
  if (!v) return null;
  const m = /^(?:\[[^\]]*\]|[^:]+)(?::\d{1,5})?$/.exec(v.trim());
  if (!m) return null;
  return v
    .trim()
    .replace(/:\d{1,5}$/, '')
    .toLowerCase()
    .replace(/\.$/, '');
}

/**
 * The forms an upstream that reflects a request commonly gives a value in: as it is, escaped
 * in a JSON string (`/` as `\/` too, as PHP does), percent-encoded (`+` for space too).
 * Keys of base64 alphabets hold `/` and `+`: their reflections differ from the value.
 */
export function reflections(value: string): string[] {
  const json = JSON.stringify(value).slice(1, -1);
  const url = encodeURIComponent(value);
  return [...new Set([value, json, json.replace(/\//g, '\\/'), url, url.replace(/%20/g, '+')])];
}

const replaceAll = (s: string, from: string, to: string) => (s.includes(from) ? s.split(from).join(to) : s);

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

/**
 * Terminates the connections the proxy hands it (their first bytes already read: given
 * back), and per request:
 * - its Host (HTTP/1) or `:authority` (HTTP/2) must be the connection's name (the SNI, or the
 *   first request's Host), else 421 and nothing is forwarded: a kept-alive connection cannot
 *   switch to another name, and a TLS connection for one name cannot carry requests for another;
 * - CONNECT: 405; an Upgrade (WebSocket, h2c): 501 (neither is tunnelled through injection);
 * - with the sandbox's rules for the name now, each with a value: a rule with a header sets
 *   that header to its format (and nothing else); a rule without one has its placeholder
 *   replaced by the value in the request target and every header value; `accept-encoding`
 *   becomes `identity` (so answers can be scrubbed);
 * - the request goes upstream, over connections of this client connection's own (kept alive
 *   between its requests, closed with it; each counts in the sandbox's share of the proxy's
 *   connections, past which the request gets 503), from the gateway address to the address
 *   the name resolved to for the sandbox, TLS verified against the system CAs plus the extra
 *   ones with SNI = the name; bodies stream both ways, hop-by-hop headers are dropped;
 * - the answer is passed back as it is, but for the values: any occurrence of an injected
 *   value (or of its JSON-escaped or percent-encoded forms) in its reason phrase, header
 *   values or (identity-encoded) body is replaced by the placeholder, and a header whose name
 *   holds one is dropped, so an
 *   upstream that echoes requests does not hand the value to the sandbox; with one injected,
 *   the answer's content-length goes (the body is streamed, HTTP/1.1 chunked);
 * - upstream failure: 502 with a plain message (never a value).
 * Redirects are answers like others: the proxy never follows one (a redirect elsewhere is a
 * new request from the sandbox, with the placeholder).
 */
export class Interceptor {
  /** Upstream trust, made once (building it per request parsed every root CA: ~50 ms). */
  readonly #upstreamTls: SecureContext;

  constructor(private readonly o: InterceptorOptions) {
    this.#upstreamTls = createSecureContext({ ca: [...rootCertificates, ...(o.extraCa ?? [])] });
  }

  /**
   * Takes over `s` (from the sandbox at `from`, for `name`), whose first bytes `head` were
   * read. Each connection gets servers of its own (unlistened; ~0.25 ms for TLS), so every
   * request knows its connection.
   */
  take(s: Socket, kind: 'http' | 'tls', from: string, name: string, head: Buffer, addrs: string[]): void {
    const pool = {
      keepAlive: true,
      maxSockets: MAX_STREAMS_PER_CONNECTION,
      maxFreeSockets: MAX_STREAMS_PER_CONNECTION,
    };
    const agent = kind === 'http' ? new HttpAgent(pool) : new HttpsAgent(pool);
    s.once('close', () => agent.destroy());
    // Each upstream socket (HTTP/2: up to 8 at once on one connection of the sandbox's, and
    // as many kept idle) counts in the sandbox's share, as a relayed connection's two do;
    // none left: the request fails with SHARE_SPENT (503).
    const connect = agent.createConnection.bind(agent);
    agent.createConnection = ((opts: object, cb?: (e: Error | null, s?: Duplex) => void) => {
      const release = this.o.claim(from);
      if (!release) {
        const e = Object.assign(new Error('no connection left in the share of the sandbox'), { code: SHARE_SPENT });
        process.nextTick(() => cb?.(e));
        return undefined;
      }
      const sock = connect(opts as never, cb as never);
      if (sock) sock.once('close', release);
      else release();
      return sock;
    }) as typeof agent.createConnection;
    const conn: Conn = { kind, from, name, addrs, agent, upstream: new WeakSet() };
    // Answers are written in parts (head, body): no Nagle wait between them (~40 ms each).
    s.setNoDelay(true);
    const handle = (req: Req, res: Res) => this.#request(conn, req, res);
    if (kind === 'http') {
      const srv = createServer({ keepAliveTimeout: 5000 }, handle);
      srv.on('clientError', (_e: Error, c: Socket) => c.destroy());
      srv.on('connect', (_req: IncomingMessage, c: Socket) => refuseRaw(c, 405, 'CONNECT is not proxied'));
      s.unshift(head);
      srv.emit('connection', s);
      s.resume();
      return;
    }
    const ca = this.o.ca;
    const srv = createSecureServer(
      {
        allowHTTP1: true,
        // Each stream is an upstream connection: a sandbox's share of connections stays
        // bounded (its connections x this), as HTTP/1.1 has one request at a time.
        settings: { maxConcurrentStreams: MAX_STREAMS_PER_CONNECTION },
        // Only the connection's name (already read from this ClientHello) gets a certificate.
        SNICallback: (sni, cb) => {
          if (sni.toLowerCase().replace(/\.$/, '') !== name) return cb(new Error('SNI changed'), undefined);
          try {
            cb(null, ca.leaf(name).context);
          } catch (e) {
            cb(e as Error, undefined);
          }
        },
      },
      handle,
    );
    srv.on('tlsClientError', () => s.destroy());
    srv.on('sessionError', () => {});
    // A TLS server reads its socket's handle directly: the bytes already read are given back
    // through a stream of our own in front of it.
    srv.emit('connection', new Prepend(s, head));
  }

  #request(conn: Conn, req: Req, res: Res): void {
    const h2 = req.httpVersionMajor === 2;
    const authority = h2 ? ((req.headers[':authority'] as string | undefined) ?? req.headers.host) : req.headers.host;
    if (hostName(authority) !== conn.name) {
      reply(res, 421, `this connection is for ${conn.name} only`, true);
      return;
    }
    // An absolute-form target (`GET http://other/ HTTP/1.1`) names its own authority, which
    // an upstream server takes over Host: it must be the connection's name too, and goes
    // upstream in origin form.
    let target = req.url ?? '/';
    if (!target.startsWith('/') && target !== '*' && req.method !== 'CONNECT') {
      let u: URL | null = null;
      try {
        u = new URL(target);
      } catch {
        /* below */
      }
      if (!u || hostName(u.host) !== conn.name) {
        reply(res, 421, `this connection is for ${conn.name} only`, true);
        return;
      }
      target = `${u.pathname}${u.search}`;
    }
    if (req.method === 'CONNECT') {
      reply(res, 405, 'CONNECT is not proxied');
      return;
    }
    if (req.headers.upgrade) {
      reply(res, 501, 'upgrades (WebSocket, h2c) are not proxied to names with secrets');
      return;
    }
    const rules = this.o.rulesFor(conn.from, conn.name).filter((r) => r.value !== undefined);
    // A rule with a header puts the value there only; one without replaces its placeholder in
    // the head. (A header rule's placeholder replaced elsewhere would let the sandbox write the
    // value into what the service keeps as data: `?text=<placeholder>` of a chat API.)
    const anywhere = rules.filter((r) => !r.header);
    const sub = (s: string) => {
      for (const r of anywhere) s = replaceAll(s, r.placeholder, r.value as string);
      return s;
    };
    // Headers as sent (duplicates kept), less pseudo-headers and hop-by-hop ones.
    const named = new Set(
      String(req.headers.connection ?? '')
        .split(',')
        .map((t) => t.trim().toLowerCase())
        .filter(Boolean),
    );
    const out: [string, string][] = [];
    for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) {
      const k = req.rawHeaders[i];
      const lk = k.toLowerCase();
      if (lk.startsWith(':') || HOP.has(lk) || named.has(lk) || lk === 'host') continue;
      out.push([k, sub(req.rawHeaders[i + 1])]);
    }
    out.unshift(['host', authority as string]);
    const set = (name: string, value: string) => {
      const ln = name.toLowerCase();
      for (let i = out.length - 1; i >= 0; i--) if (out[i][0].toLowerCase() === ln) out.splice(i, 1);
      out.push([name, value]);
    };
    for (const r of rules) if (r.header) set(r.header, replaceAll(r.format, SECRET_VALUE_TOKEN, r.value as string));
    if (rules.length) set('accept-encoding', 'identity');
    // A body without a length (HTTP/1.1 chunked, HTTP/2 DATA) goes on chunked whatever the
    // method: Node's client writes a GET's body bytes unframed, which the upstream would parse
    // as a request of its own (smuggled past the Host check, to any name on that server).
    const hasBody = h2
      ? !(req as Http2ServerRequest).stream.endAfterHeaders
      : req.headers['transfer-encoding'] !== undefined;
    if (hasBody && req.headers['content-length'] === undefined) set('transfer-encoding', 'chunked');
    const path = sub(target);
    const method = req.method ?? 'GET';
    const destination = `${conn.name}:${conn.kind === 'http' ? 80 : 443}`;
    const report = (status: number | null, error?: string) => {
      for (const r of rules) {
        this.o.onInjection({ from: conn.from, secret: r.secret, destination, method, status, error });
      }
    };
    const ports = this.o.upstreamPorts ?? { http: 80, tls: 443 };
    const common = {
      host: conn.addrs[0],
      port: conn.kind === 'http' ? ports.http : ports.tls,
      localAddress: this.o.gateway,
      method,
      path,
      headers: out.flat(),
      setHost: false,
      agent: conn.agent,
    };
    let up: ClientRequest;
    try {
      up =
        conn.kind === 'http'
          ? httpRequest(common)
          : httpsRequest({
              ...common,
              servername: conn.name,
              // Passed on to tls.connect (https.RequestOptions' type omits it).
              ...({ secureContext: this.#upstreamTls } as object),
              rejectUnauthorized: true,
            });
    } catch (e) {
      // A head Node's client refuses to write: a value with a space put into the request
      // target (a value is any printable ASCII). Thrown here, it would end the process.
      // The code only: its message may quote the head.
      reply(res, 400, `the request cannot be sent upstream (${(e as NodeJS.ErrnoException).code ?? 'invalid'})`, true);
      return;
    }
    up.on('socket', (s) => {
      // A kept-alive socket comes back for each request: set up once.
      if (conn.upstream.has(s)) return;
      conn.upstream.add(s);
      this.o.track(s);
      s.setNoDelay(true);
      s.setTimeout(this.o.idleTimeoutMs, () => s.destroy(new Error('upstream idle')));
    });
    let answered = false;
    let upstreamDone = false;
    up.on('response', (ur) => {
      answered = true;
      ur.once('end', () => {
        upstreamDone = true;
      });
      report(ur.statusCode ?? null);
      const hidden = rules.flatMap((r) => reflections(r.value as string).map((v) => [v, r.placeholder] as const));
      const scrub = (s: string) => {
        for (const [v, p] of hidden) s = replaceAll(s, v, p);
        return s;
      };
      const unamed = new Set(
        String(ur.headers.connection ?? '')
          .split(',')
          .map((t) => t.trim().toLowerCase()),
      );
      // Header names come lowercased: one holding a value (in any case) goes.
      const lowered = hidden.map(([v]) => v.toLowerCase());
      const headers: Record<string, string | string[]> = {};
      for (const [k, v] of Object.entries(ur.headers as IncomingHttpHeaders)) {
        if (v === undefined || HOP.has(k) || unamed.has(k)) continue;
        if (lowered.some((l) => k.includes(l))) continue;
        if (hidden.length && k === 'content-length') continue;
        headers[k] = Array.isArray(v) ? v.map(scrub) : scrub(v);
      }
      const status = ur.statusCode ?? 502;
      try {
        if (h2) (res as Http2ServerResponse).writeHead(status, headers);
        else (res as ServerResponse).writeHead(status, scrub(ur.statusMessage ?? ''), headers);
      } catch {
        ur.destroy();
        res.destroy();
        return;
      }
      const body = hidden.length ? ur.pipe(new Scrubber(hidden)) : ur;
      body.pipe(res as NodeJS.WritableStream);
      ur.on('error', () => res.destroy());
    });
    up.on('error', (e: NodeJS.ErrnoException) => {
      if (answered) return res.destroy();
      if (e.code === SHARE_SPENT) return reply(res, 503, 'too many connections at once from this sandbox');
      const why = e.code ?? 'failed';
      report(null, why);
      reply(res, 502, `upstream ${conn.name} failed: ${why}`);
    });
    // The sandbox gone before the upstream's answer ended: the upstream connection goes too.
    // (Not `!res.writableFinished`: an HTTP/2 response whose stream the sandbox reset says
    // finished, and its upstream connection stayed, held for the idle timeout.)
    res.on('close', () => {
      if (!upstreamDone) up.destroy();
    });
    req.pipe(up);
  }
}

/** A plain-text answer; `close`: the connection goes after it (HTTP/1). */
function reply(res: Res, status: number, message: string, close = false): void {
  if (res.headersSent) return void res.destroy();
  const body = `sandboxd egress: ${message}\n`;
  const headers: Record<string, string> = {
    'content-type': 'text/plain',
    'content-length': String(Buffer.byteLength(body)),
  };
  if (close && res instanceof Object && !('stream' in res)) headers.connection = 'close';
  (res as ServerResponse).writeHead(status, headers);
  res.end(body);
}

function refuseRaw(s: Socket, status: number, message: string): void {
  const body = `sandboxd egress: ${message}\n`;
  s.end(
    `HTTP/1.1 ${status} ${status === 405 ? 'Method Not Allowed' : 'Refused'}\r\ncontent-type: text/plain\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}

/**
 * Replaces each value by its placeholder in a stream, matches across chunk boundaries
 * included: it holds back the last (longest value - 1) bytes until more come or the end.
 */
export class Scrubber extends Transform {
  readonly #pairs: { v: Buffer; p: Buffer }[];
  readonly #keep: number;
  #carry = Buffer.alloc(0);

  constructor(pairs: readonly (readonly [string, string])[]) {
    super();
    this.#pairs = pairs.map(([v, p]) => ({ v: Buffer.from(v, 'latin1'), p: Buffer.from(p, 'latin1') }));
    this.#keep = Math.max(0, ...this.#pairs.map((x) => x.v.length - 1));
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    const buf = Buffer.concat([this.#carry, chunk]);
    const { out, end } = this.#replace(buf, buf.length - this.#keep);
    this.#carry = buf.subarray(end);
    if (out.length) this.push(out);
    cb();
  }

  override _flush(cb: TransformCallback): void {
    const { out } = this.#replace(this.#carry, this.#carry.length);
    if (out.length) this.push(out);
    cb();
  }

  /** Replaced bytes of `buf` up to `cut` (or past it, to the end of a match that starts before it). */
  #replace(buf: Buffer, cut: number): { out: Buffer; end: number } {
    const parts: Buffer[] = [];
    let pos = 0;
    for (;;) {
      let best: { at: number; v: Buffer; p: Buffer } | null = null;
      for (const x of this.#pairs) {
        const at = buf.indexOf(x.v, pos);
        if (at >= 0 && (!best || at < best.at)) best = { at, ...x };
      }
      if (!best || best.at >= Math.max(cut, pos)) break;
      parts.push(buf.subarray(pos, best.at), best.p);
      pos = best.at + best.v.length;
    }
    const end = Math.max(pos, cut);
    parts.push(buf.subarray(pos, end));
    return { out: Buffer.concat(parts), end };
  }
}

/** `head`, then what `s` reads; writes go to `s`. */
class Prepend extends Duplex {
  constructor(
    private readonly s: Socket,
    head: Buffer,
  ) {
    super();
    this.push(head);
    s.on('data', (d: Buffer) => {
      if (!this.push(d)) s.pause();
    });
    s.on('end', () => this.push(null));
    s.on('close', () => this.destroy());
    s.resume();
  }
  override _read(): void {
    this.s.resume();
  }
  override _write(chunk: Buffer, enc: BufferEncoding, cb: (e?: Error | null) => void): void {
    this.s.write(chunk, enc, cb);
  }
  override _final(cb: (e?: Error | null) => void): void {
    this.s.end();
    cb();
  }
  override _destroy(e: Error | null, cb: (e?: Error | null) => void): void {
    this.s.destroy();
    cb(e);
  }
}
