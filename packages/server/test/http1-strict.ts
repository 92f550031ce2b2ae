/**
 * A strict HTTP/1.1 request parser (RFC 9112, no leniency) and a recording upstream built
 * on it, for the port proxy's framing tests. The parser is the test's reference: it says
 * what a correct recipient reads from a byte string. The upstream records every byte and
 * every request it parses, answering each with `X-Upstream-Seq: <n>`, so a test sees
 * exactly what reached the "sandbox": smuggled requests, merged or split bodies, leftovers.
 */
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';

/** One request as a strict recipient reads it. */
export interface StrictRequest {
  method: string;
  target: string;
  version: string;
  /** `[name, value]` in order and spelling; values without surrounding whitespace. */
  headers: Array<[string, string]>;
  /** The body, de-chunked. */
  body: Buffer;
}

/** What {@link parseRequests} found: complete requests, the unparsed rest, and the error that stopped it, if any. */
export interface Parsed {
  requests: StrictRequest[];
  rest: Buffer;
  error?: string;
}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
// biome-ignore lint/suspicious/noControlCharactersInRegex: field values may hold no control character but HTAB
const VALUE = /^[^\x00-\x08\x0a-\x1f\x7f]*$/;
const TARGET = /^[\x21-\x7e]+$/;

/** Thrown inside the parser for input that is not valid HTTP/1.1. */
class Invalid extends Error {}

/** Bytes up to the next CRLF from `at`, or null when incomplete; a bare CR or LF is invalid. */
function line(buf: Buffer, at: number): { text: string; next: number } | null {
  for (let i = at; i < buf.length; i++) {
    const c = buf[i];
    if (c === 0x0a) throw new Invalid('bare LF');
    if (c === 0x0d) {
      if (i + 1 >= buf.length) return null;
      if (buf[i + 1] !== 0x0a) throw new Invalid('bare CR');
      return { text: buf.toString('latin1', at, i), next: i + 2 };
    }
  }
  return null;
}

/**
 * Parses as many complete requests as `buf` holds. Stops at the first invalid one (`error`
 * set, that request and all after it not returned). Framing: `Transfer-Encoding` must be
 * exactly `chunked` and alone (an HTTP/1.0 request with it, or with `Content-Length`
 * too, is invalid); `Content-Length` values must all be one number. `Connection` changes
 * nothing about framing.
 */
export function parseRequests(buf: Buffer, o: { maxHead?: number } = {}): Parsed {
  const requests: StrictRequest[] = [];
  let at = 0;
  try {
    for (;;) {
      const r = parseOne(buf, at, o.maxHead ?? 64 * 1024);
      if (!r) break;
      requests.push(r.req);
      at = r.next;
    }
    return { requests, rest: buf.subarray(at) };
  } catch (e) {
    if (!(e instanceof Invalid)) throw e;
    return { requests, rest: buf.subarray(at), error: e.message };
  }
}

function parseOne(buf: Buffer, start: number, maxHead: number): { req: StrictRequest; next: number } | null {
  if (start >= buf.length) return null;
  const first = line(buf, start);
  if (!first) {
    if (buf.length - start > maxHead) throw new Invalid('head too large');
    return null;
  }
  const m = /^([^ ]+) ([^ ]+) (HTTP\/1\.[01])$/.exec(first.text);
  if (!m || !TOKEN.test(m[1]) || !TARGET.test(m[2]))
    throw new Invalid(`bad request line ${JSON.stringify(first.text)}`);
  const headers: Array<[string, string]> = [];
  let at = first.next;
  for (;;) {
    const l = line(buf, at);
    if (!l) {
      if (buf.length - start > maxHead) throw new Invalid('head too large');
      return null;
    }
    at = l.next;
    if (l.text === '') break;
    if (l.text[0] === ' ' || l.text[0] === '\t') throw new Invalid('obs-fold');
    const colon = l.text.indexOf(':');
    const name = colon > 0 ? l.text.slice(0, colon) : '';
    if (!TOKEN.test(name)) throw new Invalid(`bad field name ${JSON.stringify(name)}`);
    const value = l.text.slice(colon + 1).replace(/^[ \t]+|[ \t]+$/g, '');
    if (!VALUE.test(value)) throw new Invalid('control character in a field value');
    headers.push([name, value]);
  }
  if (at - start > maxHead) throw new Invalid('head too large');
  const version = m[3];
  const all = (n: string) => headers.filter(([k]) => k.toLowerCase() === n).map(([, v]) => v);
  if (version === 'HTTP/1.1' && all('host').length !== 1) throw new Invalid('HTTP/1.1 needs exactly one Host');
  const te = all('transfer-encoding');
  const cl = all('content-length');
  let body: Buffer;
  if (te.length > 0) {
    if (version === 'HTTP/1.0') throw new Invalid('Transfer-Encoding in HTTP/1.0');
    if (cl.length > 0) throw new Invalid('Content-Length with Transfer-Encoding');
    const codings = te
      .join(',')
      .split(',')
      .map((s) => s.trim().toLowerCase());
    if (codings.length !== 1 || codings[0] !== 'chunked') throw new Invalid(`transfer coding ${te.join(',')}`);
    const c = dechunk(buf, at);
    if (!c) return null;
    body = c.body;
    at = c.next;
  } else if (cl.length > 0) {
    const values = new Set(
      cl
        .join(',')
        .split(',')
        .map((s) => s.trim()),
    );
    if (values.size !== 1) throw new Invalid('conflicting Content-Length');
    const v = [...values][0];
    if (!/^[0-9]{1,15}$/.test(v)) throw new Invalid(`bad Content-Length ${JSON.stringify(v)}`);
    const n = Number(v);
    if (buf.length - at < n) return null;
    body = Buffer.from(buf.subarray(at, at + n));
    at += n;
  } else {
    body = Buffer.alloc(0);
  }
  return { req: { method: m[1], target: m[2], version, headers, body }, next: at };
}

/** chunk-ext (RFC 9112 7.1.1): `;name` or `;name=token` or `;name="quoted"`, with optional whitespace. */
const TCHAR = "[!#$%&'*+.^_`|~0-9A-Za-z-]";
const QDTEXT = String.raw`[^"\\\x00-\x08\x0a-\x1f\x7f]|\\[^\x00-\x08\x0a-\x1f\x7f]`;
const CHUNK_EXT = new RegExp(String.raw`^(?:[ \t]*;[ \t]*${TCHAR}+(?:[ \t]*=[ \t]*(?:${TCHAR}+|"(?:${QDTEXT})*"))?)*$`);

function dechunk(buf: Buffer, start: number): { body: Buffer; next: number } | null {
  const parts: Buffer[] = [];
  let at = start;
  for (;;) {
    const l = line(buf, at);
    if (!l) return null;
    const m = /^([0-9a-fA-F]+)(.*)$/.exec(l.text);
    if (!m || !CHUNK_EXT.test(m[2])) throw new Invalid(`bad chunk line ${JSON.stringify(l.text)}`);
    const big = BigInt(`0x${m[1]}`);
    if (big > 2n ** 40n) throw new Invalid('chunk too large for this parser');
    const size = Number(big);
    at = l.next;
    if (size === 0) break;
    if (buf.length - at < size + 2) return null;
    parts.push(buf.subarray(at, at + size));
    at += size;
    if (buf[at] !== 0x0d || buf[at + 1] !== 0x0a) throw new Invalid('no CRLF after chunk data');
    at += 2;
  }
  for (;;) {
    const l = line(buf, at);
    if (!l) return null;
    at = l.next;
    if (l.text === '') break;
    const colon = l.text.indexOf(':');
    if (colon <= 0 || !TOKEN.test(l.text.slice(0, colon))) throw new Invalid('bad trailer field');
  }
  return { body: Buffer.concat(parts), next: at };
}

/** One thing the recording upstream saw on one of its connections. */
export type Seen = { conn: number; seq: string; req: StrictRequest } | { conn: number; invalid: string; bytes: string };

/** A raw TCP server standing in for a sandbox; see the file comment. */
export interface RecordingUpstream {
  port: number;
  /** Everything parsed so far, in arrival order. */
  seen: Seen[];
  /** Bytes received but not yet a complete request, per open connection (a pending partial request). */
  pending(): number;
  connections(): number;
  close(): Promise<void>;
}

/** Starts a {@link RecordingUpstream} on 127.0.0.1. */
export async function recordingUpstream(): Promise<RecordingUpstream> {
  const seen: Seen[] = [];
  const bufs = new Map<Socket, Buffer>();
  let conns = 0;
  let seq = 0;
  const server: Server = createServer((sock) => {
    const id = ++conns;
    bufs.set(sock, Buffer.alloc(0));
    sock.on('error', () => {});
    sock.on('close', () => bufs.delete(sock));
    sock.on('data', (d: Buffer) => {
      const buf = Buffer.concat([bufs.get(sock) ?? Buffer.alloc(0), d]);
      const p = parseRequests(buf);
      for (const req of p.requests) {
        const n = String(++seq);
        seen.push({ conn: id, seq: n, req });
        const body = req.method === 'HEAD' ? '' : n;
        sock.write(`HTTP/1.1 200 OK\r\nX-Upstream-Seq: ${n}\r\nContent-Length: ${n.length}\r\n\r\n${body}`);
      }
      if (p.error) {
        seen.push({ conn: id, invalid: p.error, bytes: p.rest.toString('latin1').slice(0, 200) });
        bufs.delete(sock);
        sock.destroy();
        return;
      }
      bufs.set(sock, Buffer.from(p.rest));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as AddressInfo).port,
    seen,
    pending: () => [...bufs.values()].reduce((n, b) => n + b.length, 0),
    connections: () => conns,
    close: () => {
      for (const s of bufs.keys()) s.destroy();
      return new Promise((r) => server.close(() => r()));
    },
  };
}

/** One response as the client got it. */
export interface ClientResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * Sends `raw` on a new connection to 127.0.0.1:`port` and collects what comes back until
 * `responses` final answers (default 1) arrived, the server closes, or `limitMs` passes
 * (with `responses: 0`, 100 ms);
 * parses it as a sequence of responses (Content-Length or chunked bodies, 1xx dropped).
 */
export async function exchange(
  port: number,
  raw: Buffer,
  o: { limitMs?: number; responses?: number } = {},
): Promise<{ responses: ClientResponse[]; bytes: string }> {
  const want = o.responses ?? 1;
  const bytes = await new Promise<string>((resolve) => {
    const s = connect({ host: '127.0.0.1', port });
    let out = '';
    s.setEncoding('latin1');
    // Nothing to wait for (an incomplete request): give the server a moment, then hang up.
    const timer = setTimeout(() => s.destroy(), want > 0 ? (o.limitMs ?? 3000) : 100);
    s.on('data', (c: string) => {
      out += c;
      if (parseResponses(out).length >= want) s.destroy();
    });
    s.on('error', () => {});
    s.on('close', () => {
      clearTimeout(timer);
      resolve(out);
    });
    s.write(raw);
  });
  return { responses: parseResponses(bytes), bytes };
}

/** Parses complete responses from `text` (latin1); stops at the first incomplete one. */
export function parseResponses(text: string): ClientResponse[] {
  const out: ClientResponse[] = [];
  let at = 0;
  while (at < text.length) {
    const end = text.indexOf('\r\n\r\n', at);
    if (end === -1) break;
    const lines = text.slice(at, end).split('\r\n');
    const status = Number(lines[0].split(' ')[1]);
    const headers: Record<string, string> = {};
    for (const l of lines.slice(1)) {
      const i = l.indexOf(':');
      headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
    }
    at = end + 4;
    let body = '';
    if (status < 200 || status === 204 || status === 304) {
      // no body, whatever the headers say
    } else if (headers['transfer-encoding']?.toLowerCase() === 'chunked') {
      for (;;) {
        const nl = text.indexOf('\r\n', at);
        if (nl === -1) return out;
        const n = parseInt(text.slice(at, nl), 16);
        at = nl + 2;
        if (n === 0) {
          const t = text.indexOf('\r\n\r\n', at - 2);
          at = t === -1 ? text.length : t + 4;
          break;
        }
        body += text.slice(at, at + n);
        at += n + 2;
      }
    } else if (headers['content-length'] !== undefined) {
      const n = Number(headers['content-length']);
      if (text.length - at < n) return out;
      body = text.slice(at, at + n);
      at += n;
    }
    if (status >= 200) out.push({ status, headers, body });
  }
  return out;
}
