import type { IncomingMessage } from 'node:http';
import { ProxyError } from './reply.js';

/**
 * How the body of a client's request is delimited, as the proxy forwards it: the proxy
 * always frames what it sends to a sandbox itself, from this and nothing else.
 */
export type RequestFraming = { kind: 'none' } | { kind: 'length'; length: number } | { kind: 'chunked' };

/** Framing headers: never hop-by-hop, whatever `Connection` names. */
export const FRAMING_HEADERS: ReadonlySet<string> = new Set(['content-length', 'transfer-encoding']);

/**
 * The framing of `req` (node's parser has read it; this reads the raw headers again and
 * refuses what node lets through but the proxy cannot forward exactly). Throws a 400
 * `validation` {@link ProxyError} for: `Transfer-Encoding` in an HTTP/1.0 request (RFC 9112
 * 6.1: framing faulty), `Transfer-Encoding` together with `Content-Length`, a transfer
 * coding other than exactly `chunked` (`gzip, chunked` would reach the sandbox as plain
 * chunked), and `Content-Length` values that are not all one number. `Connection` plays no
 * part: a framing header it names still frames the body.
 */
export function requestFraming(req: IncomingMessage): RequestFraming {
  const te: string[] = [];
  const cl: string[] = [];
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    const lower = raw[i].toLowerCase();
    if (lower === 'transfer-encoding') te.push(raw[i + 1]);
    else if (lower === 'content-length') cl.push(raw[i + 1]);
  }
  if (te.length > 0) {
    if (req.httpVersionMajor === 1 && req.httpVersionMinor === 0)
      throw refused('Transfer-Encoding in an HTTP/1.0 request', 'te_http10');
    if (cl.length > 0) throw refused('Content-Length and Transfer-Encoding in one request', 'cl_te');
    const codings = te
      .join(',')
      .split(',')
      .map((s) => s.trim().toLowerCase());
    if (codings.length !== 1 || codings[0] !== 'chunked')
      throw refused(`Transfer-Encoding "${te.join(', ')}": the proxy relays only "chunked"`, 'transfer_coding');
    return { kind: 'chunked' };
  }
  if (cl.length === 0) return { kind: 'none' };
  const values = new Set(
    cl
      .join(',')
      .split(',')
      .map((s) => s.trim()),
  );
  const v = [...values][0];
  if (values.size !== 1 || !/^[0-9]{1,15}$/.test(v))
    throw refused('Content-Length is not one number', 'content_length');
  return { kind: 'length', length: Number(v) };
}

function refused(why: string, reason: string): ProxyError {
  return new ProxyError('validation', `Ambiguous request framing: ${why}`, { reason });
}
