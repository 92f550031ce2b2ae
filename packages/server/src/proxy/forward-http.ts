import { request, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { pipeline } from 'node:stream';
import { downstreamHeaders, upstreamHeaders } from './headers.js';
import { ProxyError, sendError, timeoutError, upstreamError } from './reply.js';
import type { ProxyTarget } from './targets.js';

/** Where and how one request is forwarded. */
export interface HttpForward {
  target: ProxyTarget;
  port: number;
  /** Origin-form request target sent to the sandbox. */
  path: string;
  /** Wait for the connection and then for the response headers (each), in ms; then 504. */
  timeoutMs: number;
  /** Called once with a refusal the client was told about (for logs). */
  onRefused?: (err: ProxyError) => void;
}

/**
 * Forwards one HTTP/1.1 request to the sandbox and its response back, streaming both
 * bodies with backpressure (`pipe`/`pipeline`; nothing is buffered whole), response
 * headers flushed at once so event streams start immediately. Connection errors answer
 * 502, no connection or no response headers within `timeoutMs` (counted from the
 * connection, then from the end of the request body) 504. A failure after the response
 * started cuts the client connection; a client that goes away cuts the sandbox connection.
 * A request without a body that meets a pooled connection the sandbox had just closed is
 * retried once on a fresh one.
 */
export function forwardHttp(req: IncomingMessage, res: ServerResponse, f: HttpForward): void {
  const where = { sandboxId: f.target.sandboxId, port: f.port };
  const bodyless = !req.headers['transfer-encoding'] && (req.headers['content-length'] === undefined || req.headers['content-length'] === '0');
  /** waiting: no answer yet; refused: the proxy answered; streaming: the sandbox's answer is being relayed. */
  let phase: 'waiting' | 'refused' | 'streaming' = 'waiting';
  const refuse = (err: ProxyError) => {
    if (phase !== 'waiting') return;
    phase = 'refused';
    f.onRefused?.(err);
    sendError(req, res, err);
  };

  const attempt = (retriesLeft: number): void => {
    const up = request({
      host: f.target.address, port: f.port, method: req.method, path: f.path, agent: f.target.agent,
      headers: upstreamHeaders(req, { upgrade: false }) as unknown as Record<string, string>, setHost: false,
    });
    // One timer: first the connection, then (once connected and the body is sent) the response headers.
    let timer: NodeJS.Timeout | undefined;
    let connected = false;
    let sent = false;
    const arm = () => {
      clearTimeout(timer);
      if (phase !== 'waiting') return;
      timer = setTimeout(() => {
        refuse(timeoutError(where, f.timeoutMs));
        up.destroy();
      }, f.timeoutMs);
    };
    const disarm = () => clearTimeout(timer);
    arm();
    const onConnect = () => {
      connected = true;
      if (sent) arm();
      else disarm(); // a long upload is not a slow sandbox
    };
    up.on('socket', (s: Socket) => {
      s.setNoDelay(true);
      if (s.connecting) s.once('connect', onConnect);
      else onConnect();
    });
    up.on('finish', () => {
      sent = true;
      if (connected) arm();
    });

    up.on('response', (upRes) => {
      disarm();
      if (phase !== 'waiting') {
        upRes.destroy();
        return;
      }
      phase = 'streaming';
      res.writeHead(upRes.statusCode ?? 502, upRes.statusMessage, downstreamHeaders(upRes));
      res.flushHeaders();
      pipeline(upRes, res, () => {
        // Finished, or one side failed (pipeline destroyed the other); free the sandbox side too.
        if (!res.writableFinished) up.destroy();
      });
    });

    up.on('error', (e: NodeJS.ErrnoException) => {
      disarm();
      if (phase === 'streaming') {
        if (!res.writableFinished) res.destroy();
        return;
      }
      if (phase === 'refused') return;
      if (retriesLeft > 0 && bodyless && up.reusedSocket && e.code === 'ECONNRESET') {
        attempt(retriesLeft - 1);
        return;
      }
      refuse(upstreamError(e, where));
    });

    res.once('close', () => {
      disarm();
      if (!res.writableFinished) up.destroy();
    });
    if (bodyless) {
      up.end();
      req.resume();
    } else {
      req.pipe(up);
      req.once('error', () => up.destroy());
    }
  };
  attempt(1);
}
