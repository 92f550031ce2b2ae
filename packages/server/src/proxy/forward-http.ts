import type { IncomingMessage, ServerResponse } from 'node:http';
import type { RequestFraming } from './framing.js';
import { downstreamHeaders, upstreamHeaders } from './headers.js';
import {
  BodyDecoder,
  declaredLength,
  framingOf,
  MAX_HEAD_BYTES,
  parseResponseHead,
  type Framing,
  type ResponseHead,
} from './http1.js';
import { ProxyError, sendError, timeoutError, upstreamError } from './reply.js';
import { hostCookiesOnly } from './set-cookie.js';
import type { ProxyTarget } from './targets.js';
import type { TrustedProxies } from '../http/trusted-proxies.js';
import type { UpstreamConn } from './upstream.js';

/** Where and how one request is forwarded. */
/** Methods whose requests carry no body by convention (RFC 9110 9.3): one that does is not pooled after. */
const BODILESS_METHODS = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE', 'CONNECT']);

export interface HttpForward {
  target: ProxyTarget;
  port: number;
  /** Origin-form request target sent to the sandbox. */
  path: string;
  /** The request body's framing (`requestFraming`), which the proxy writes itself. */
  framing: RequestFraming;
  /** Wait for the connection, then (once the request is sent) for the response head, in ms; then 504. */
  timeoutMs: number;
  /** Called once with a refusal the client was told about (for logs). */
  onRefused?: (err: ProxyError) => void;
  /** `SANDBOXD_TRUSTED_PROXIES`: whose `X-Forwarded-Proto` is passed on. */
  trusted?: TrustedProxies;
}

/**
 * Forwards one HTTP/1.1 request to the sandbox over a pooled keep-alive connection and
 * relays the answer, streaming both bodies with backpressure and never holding more than
 * one read buffer of the response: the next read from the sandbox waits until the last one
 * reached the client's socket. Response headers are flushed at once, so event streams
 * start immediately. Before the response starts: connection errors answer 502, silence
 * past `timeoutMs` 504, an answer that is not HTTP/1.x 502. After it started, a failure on
 * either side cuts the other. A request without a body that meets a pooled connection the
 * sandbox had just closed is retried once on a fresh one. The request is framed by the
 * proxy (`f.framing`: one `Content-Length`, or chunked), and a connection goes back to the
 * pool only when both directions ended exactly at their framing: the whole request sent,
 * the answer's framing not in doubt, and no byte after its end.
 */
export function forwardHttp(req: IncomingMessage, res: ServerResponse, f: HttpForward): void {
  const where = { sandboxId: f.target.sandboxId, port: f.port };
  const method = req.method ?? 'GET';
  const chunkedBody = f.framing.kind === 'chunked';
  const hasBody = chunkedBody || (f.framing.kind === 'length' && f.framing.length > 0);
  const head = requestHead(req, f.path, f.framing, f.trusted);
  /** waiting: no answer yet; refused: the proxy answered; streaming: the sandbox's answer is being relayed. */
  let phase: 'waiting' | 'refused' | 'streaming' = 'waiting';
  const refuse = (err: ProxyError) => {
    if (phase !== 'waiting') return;
    phase = 'refused';
    f.onRefused?.(err);
    sendError(req, res, err);
  };

  const attempt = (fresh: boolean): void => {
    const conn: UpstreamConn = f.target.pool.acquire(f.port, { fresh });
    const sock = conn.socket;
    const retryable = conn.reused && !hasBody;
    let connected = !sock.connecting;
    let sent = false;
    let gotBytes = false;
    let headBuf: Buffer | null = null;
    let decoder: BodyDecoder | null = null;
    let framing: Framing = { kind: 'close' };
    let reusable = false;
    let bodyDone = false;
    let over = false;
    let bodyBytes = 0;
    let timer: NodeJS.Timeout | undefined;

    const arm = () => {
      clearTimeout(timer);
      if (phase === 'waiting')
        timer = setTimeout(() => {
          refuse(timeoutError(where, f.timeoutMs));
          end(false);
        }, f.timeoutMs);
    };
    /** Ends this attempt: the connection goes back to the pool only after a clean, complete exchange. */
    const end = (clean: boolean) => {
      if (over) return;
      over = true;
      clearTimeout(timer);
      sock.off('connect', onConnect).off('error', onError).off('end', onEof).off('drain', onDrain);
      req.off('data', onReqData).off('end', onReqEnd);
      res.off('close', onClientClose);
      conn.onData = null;
      if (clean && reusable && sent && !sock.destroyed) f.target.pool.release(conn);
      else sock.destroy();
    };
    const fail = (e: NodeJS.ErrnoException | null) => {
      if (
        phase === 'waiting' &&
        !gotBytes &&
        retryable &&
        (e === null || e.code === 'ECONNRESET' || e.code === 'EPIPE')
      ) {
        end(false);
        attempt(true);
        return;
      }
      if (phase === 'waiting')
        refuse(e ? upstreamError(e, where) : upstreamError(Object.assign(new Error('eof'), { code: 'EOF' }), where));
      else if (phase === 'streaming' && !res.writableEnded) res.destroy();
      end(false);
    };
    const invalid = (e: Error) => {
      if (phase === 'waiting')
        refuse(
          new ProxyError(
            'upstream',
            `Sandbox ${where.sandboxId} sent an invalid HTTP answer on port ${where.port}: ${e.message}`,
            { ...where, reason: 'invalid_response' },
          ),
        );
      else if (!res.writableEnded) res.destroy();
      end(false);
    };

    /** Relays body bytes (views of the read buffer or of the copied head); false pauses reading until they are flushed. */
    const relay = (input: Buffer): boolean => {
      const fed = decoder!.feed(input);
      if (fed.done) {
        bodyDone = true;
        if (fed.extra > 0) reusable = false;
      }
      if (fed.data.length === 0) {
        if (bodyDone) res.end(() => end(true));
        return !bodyDone;
      }
      for (let i = 0; i < fed.data.length - 1; i++) res.write(fed.data[i]);
      res.write(fed.data[fed.data.length - 1], () => {
        if (over) return;
        if (bodyDone) end(true);
        else sock.resume();
      });
      if (bodyDone) res.end();
      return false;
    };

    const start = (h: ResponseHead): void => {
      clearTimeout(timer);
      ({ framing, keepAlive: reusable } = framingOf(h, method));
      // Apps often never read the body of a GET, HEAD or OPTIONS: it would stay on the
      // connection and be read as the next visitor's request. Such a connection is not pooled.
      if (hasBody && BODILESS_METHODS.has(method)) reusable = false;
      decoder = new BodyDecoder(framing);
      // A HEAD or 304 answer's Content-Length describes the resource, not this message: passed on. A 204 has none.
      const contentLength =
        framing.kind === 'length'
          ? String(framing.length)
          : framing.kind === 'none' && (method === 'HEAD' || h.statusCode === 304)
            ? declaredLength(h.rawHeaders)
            : null;
      res.writeHead(
        h.statusCode,
        h.statusMessage || undefined,
        hostCookiesOnly(downstreamHeaders(h.rawHeaders, { contentLength }), req.headers.host),
      );
      phase = 'streaming';
      res.flushHeaders();
    };

    conn.onData = (n, buf) => {
      gotBytes = true;
      try {
        if (decoder) return relay(buf.subarray(0, n));
        headBuf = headBuf ? Buffer.concat([headBuf, buf.subarray(0, n)]) : Buffer.from(buf.subarray(0, n));
        for (;;) {
          const endAt = headBuf.indexOf('\r\n\r\n');
          if (endAt > MAX_HEAD_BYTES || (endAt === -1 && headBuf.length > MAX_HEAD_BYTES))
            throw new Error('response head too large');
          if (endAt === -1) return true;
          const h = parseResponseHead(headBuf.toString('latin1', 0, endAt));
          headBuf = headBuf.subarray(endAt + 4);
          if (h.statusCode === 101) throw new Error('101 Switching Protocols without an upgrade');
          if (h.statusCode >= 200) {
            start(h);
            break;
          }
          // 1xx informational (100, 103): not relayed; the final answer follows.
        }
        const rest = headBuf;
        headBuf = null;
        if (decoder!.empty) {
          if (rest.length > 0) reusable = false;
          bodyDone = true;
          res.end(() => end(true));
          return false;
        }
        return rest.length ? relay(rest) : true;
      } catch (e) {
        invalid(e as Error);
        return false;
      }
    };

    const onConnect = () => {
      connected = true;
      if (sent) arm();
      else clearTimeout(timer); // a long upload is not a slow sandbox
    };
    const onError = (e: NodeJS.ErrnoException) => fail(e);
    const onEof = () => {
      if (decoder && framing.kind === 'close' && !bodyDone && phase === 'streaming') {
        bodyDone = true;
        res.end(() => end(false));
        return;
      }
      if (!bodyDone) fail(null);
    };
    const onDrain = () => req.resume();
    const onReqData = (d: Buffer) => {
      bodyBytes += d.length;
      if (chunkedBody) sock.write(`${d.length.toString(16)}\r\n`);
      const ok = sock.write(d);
      if (chunkedBody) sock.write('\r\n');
      if (!ok) req.pause();
    };
    const onReqEnd = () => {
      if (f.framing.kind === 'length' && bodyBytes !== f.framing.length) {
        // node's parser delivers exactly Content-Length bytes; anything else and the sandbox's
        // connection would be out of step with its framing.
        fail(Object.assign(new Error('request body length'), { code: 'EFRAMING' }));
        return;
      }
      if (chunkedBody) sock.write('0\r\n\r\n');
      sent = true;
      if (connected && phase === 'waiting' && !decoder) arm();
    };
    const onClientClose = () => {
      if (!res.writableFinished) end(false);
    };

    arm();
    if (sock.connecting) sock.once('connect', onConnect);
    sock.on('error', onError).on('end', onEof).on('drain', onDrain);
    res.on('close', onClientClose);
    sock.write(head, 'latin1'); // node reads header bytes as latin1: this writes them back as they came
    if (hasBody) {
      req.on('data', onReqData).on('end', onReqEnd);
      req.resume();
    } else {
      req.resume();
      onReqEnd();
    }
    if (connected) sock.resume();
  };
  attempt(false);
}

/** The request line and headers sent to the sandbox (HTTP/1.1, keep-alive), framed by `framing` alone. */
function requestHead(
  req: IncomingMessage,
  path: string,
  framing: RequestFraming,
  trusted: TrustedProxies | undefined,
): string {
  const h = upstreamHeaders(req, { upgrade: false, trusted });
  let s = `${req.method} ${path} HTTP/1.1\r\n`;
  for (let i = 0; i < h.length; i += 2) s += `${h[i]}: ${h[i + 1]}\r\n`;
  if (framing.kind === 'chunked') s += 'Transfer-Encoding: chunked\r\n';
  else if (framing.kind === 'length') s += `Content-Length: ${framing.length}\r\n`;
  return `${s}Connection: keep-alive\r\n\r\n`;
}
