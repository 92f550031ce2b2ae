/**
 * The little of HTTP/1.1 (RFC 9112) the proxy reads itself from a sandbox: the response
 * head, and the body's framing (none, Content-Length, chunked, or until close). The body
 * decoder hands out views of the caller's buffer, so relaying a body allocates nothing.
 */

/** A parsed response head; `rawHeaders` is flat `[name, value, ...]` in the sandbox's order and spelling. */
export interface ResponseHead {
  statusCode: number;
  statusMessage: string;
  /** 0 for HTTP/1.0, 1 for HTTP/1.1. */
  minor: number;
  rawHeaders: string[];
}

/** Largest response head accepted, in bytes. */
export const MAX_HEAD_BYTES = 64 * 1024;

const STATUS_LINE = /^HTTP\/1\.([01]) ([1-9][0-9]{2})(?: ([^\r\n]*))?$/;
const HEADER_LINE = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*(.*?)[ \t]*$/;

/** Parses a head (without the final empty line). Throws an Error saying what is wrong. */
export function parseResponseHead(text: string): ResponseHead {
  const lines = text.split('\r\n');
  const m = STATUS_LINE.exec(lines[0]);
  if (!m) throw new Error('malformed status line');
  const rawHeaders: string[] = [];
  for (let i = 1; i < lines.length; i++) {
    const h = HEADER_LINE.exec(lines[i]);
    // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what a header value must not hold
    if (!h || /[\0-\x08\x0a-\x1f\x7f]/.test(h[2])) throw new Error('malformed header line');
    rawHeaders.push(h[1], h[2]);
  }
  return { statusCode: Number(m[2]), statusMessage: m[3] ?? '', minor: Number(m[1]), rawHeaders };
}

/** How the body of a response is delimited. */
export type Framing = { kind: 'none' } | { kind: 'length'; length: number } | { kind: 'chunked' } | { kind: 'close' };

/**
 * The framing of a response to `method` (RFC 9112 6.3), and whether the connection may be
 * reused after it. Throws for framing the proxy cannot relay faithfully (a transfer coding
 * other than chunked, conflicting Content-Length values). `Connection` never changes the
 * framing (a `Connection: Content-Length` is only a hop-by-hop token). Framing that is
 * valid but in doubt, where another reader could see another boundary, is relayed and the
 * connection then closed, never reused: `Transfer-Encoding` together with
 * `Content-Length`, `Content-Length` sent more than once (even with equal values), and
 * `Transfer-Encoding` in an HTTP/1.0 answer.
 */
export function framingOf(head: ResponseHead, method: string): { framing: Framing; keepAlive: boolean } {
  let te: string | null = null;
  const lengths = new Set<string>();
  let lengthValues = 0;
  const connection: string[] = [];
  for (let i = 0; i < head.rawHeaders.length; i += 2) {
    const name = head.rawHeaders[i].toLowerCase();
    const value = head.rawHeaders[i + 1];
    if (name === 'transfer-encoding') te = te === null ? value : `${te}, ${value}`;
    else if (name === 'content-length')
      for (const v of value.split(',')) {
        lengths.add(v.trim());
        lengthValues++;
      }
    else if (name === 'connection')
      connection.push(
        ...value
          .toLowerCase()
          .split(',')
          .map((s) => s.trim()),
      );
  }
  const doubt = (te !== null && (lengthValues > 0 || head.minor === 0)) || lengthValues > 1;
  const keepAlive = !doubt && (head.minor === 1 ? !connection.includes('close') : connection.includes('keep-alive'));
  const s = head.statusCode;
  if (method === 'HEAD' || s < 200 || s === 204 || s === 304) return { framing: { kind: 'none' }, keepAlive };
  if (te !== null) {
    if (te.trim().toLowerCase() !== 'chunked') throw new Error(`unsupported transfer coding "${te}"`);
    return { framing: { kind: 'chunked' }, keepAlive };
  }
  if (lengths.size > 1) throw new Error('conflicting Content-Length values');
  if (lengths.size === 1) {
    const v = [...lengths][0];
    if (!/^[0-9]{1,15}$/.test(v)) throw new Error('malformed Content-Length');
    return { framing: { kind: 'length', length: Number(v) }, keepAlive };
  }
  return { framing: { kind: 'close' }, keepAlive: false };
}

/**
 * The one `Content-Length` a head declares (every value the same number), or null. For a
 * body-less answer (HEAD, 304) it is metadata the client gets; it frames nothing.
 */
export function declaredLength(rawHeaders: string[]): string | null {
  let found: string | null = null;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if (rawHeaders[i].toLowerCase() !== 'content-length') continue;
    for (const v of rawHeaders[i + 1].split(',')) {
      const t = v.trim();
      if (!/^[0-9]{1,15}$/.test(t) || (found !== null && found !== t)) return null;
      found = t;
    }
  }
  return found;
}

/** What one {@link BodyDecoder.feed} call found. */
export interface Fed {
  /** Body bytes, as views of the fed buffer (valid until it is reused). */
  data: Buffer[];
  /** The body ended within this input. */
  done: boolean;
  /** Bytes of input after the end of the body (a protocol violation on an idle connection). */
  extra: number;
}

/** States of the chunked decoder. */
const Chunk = { Size: 0, Data: 1, DataEnd: 2, Trailer: 3 } as const;
const MAX_LINE = 4096;

/** Incremental body decoder for one {@link Framing}; throws on malformed chunked framing. */
export class BodyDecoder {
  private left: number;
  private state: number = Chunk.Size;
  private line = '';

  constructor(private readonly framing: Framing) {
    this.left = framing.kind === 'length' ? framing.length : 0;
  }

  /** True when the body is complete before any input (no body, or Content-Length: 0). */
  get empty(): boolean {
    return this.framing.kind === 'none' || (this.framing.kind === 'length' && this.left === 0);
  }

  feed(buf: Buffer): Fed {
    switch (this.framing.kind) {
      case 'none':
        return { data: [], done: true, extra: buf.length };
      case 'close':
        return { data: buf.length ? [buf] : [], done: false, extra: 0 };
      case 'length': {
        const n = Math.min(this.left, buf.length);
        this.left -= n;
        return { data: n ? [buf.subarray(0, n)] : [], done: this.left === 0, extra: buf.length - n };
      }
      case 'chunked':
        return this.chunked(buf);
    }
  }

  private chunked(buf: Buffer): Fed {
    const data: Buffer[] = [];
    let i = 0;
    while (i < buf.length) {
      if (this.state === Chunk.Data) {
        const n = Math.min(this.left, buf.length - i);
        data.push(buf.subarray(i, i + n));
        i += n;
        this.left -= n;
        if (this.left === 0) this.state = Chunk.DataEnd;
        continue;
      }
      const nl = buf.indexOf(10, i);
      const end = nl === -1 ? buf.length : nl;
      this.line += buf.toString('latin1', i, end);
      if (this.line.length > MAX_LINE) throw new Error('chunked framing: line too long');
      i = end;
      if (nl === -1) break;
      i++; // past the LF
      if (!this.line.endsWith('\r')) throw new Error('chunked framing: line not ended by CRLF');
      const line = this.line.slice(0, -1);
      this.line = '';
      // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what a chunk line must not hold
      if (/[\0-\x08\x0a-\x1f\x7f]/.test(line)) throw new Error('chunked framing: control character');
      if (this.state === Chunk.DataEnd) {
        if (line !== '') throw new Error('chunked framing: missing CRLF after data');
        this.state = Chunk.Size;
      } else if (this.state === Chunk.Size) {
        const m = /^([0-9a-fA-F]{1,12})[ \t]*(?:;.*)?$/.exec(line);
        if (!m) throw new Error('chunked framing: bad chunk size');
        this.left = parseInt(m[1], 16);
        this.state = this.left === 0 ? Chunk.Trailer : Chunk.Data;
      } else if (line === '') {
        return { data, done: true, extra: buf.length - i };
      }
    }
    return { data, done: false, extra: 0 };
  }
}
