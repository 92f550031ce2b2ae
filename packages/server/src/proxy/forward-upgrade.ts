import type { IncomingMessage } from 'node:http';
import { connect } from 'node:net';
import type { Duplex } from 'node:stream';
import { upstreamHeaders } from './headers.js';
import { type ProxyError, timeoutError, upstreamError, writeUpgradeError } from './reply.js';
import type { ProxyTarget } from './targets.js';
import type { TrustedProxies } from '../http/trusted-proxies.js';

/** Where one upgrade request (WebSocket) is forwarded. */
export interface UpgradeForward {
  target: ProxyTarget;
  port: number;
  /** Origin-form request target sent to the sandbox. */
  path: string;
  /** Wait for the connection and then for the first byte of the answer, in ms; then 504. */
  timeoutMs: number;
  onRefused?: (err: ProxyError) => void;
  /** Called with the tunnel's sandbox-side socket, for shutdown; it is destroyed on close. */
  onTunnel?: (socket: Duplex) => void;
  /** `SANDBOXD_TRUSTED_PROXIES`: whose `X-Forwarded-Proto` is passed on. */
  trusted?: TrustedProxies;
}

/**
 * Forwards an upgrade request over a new TCP connection to the sandbox port and then
 * splices the two connections byte for byte in both directions (with backpressure), so the
 * sandbox's own answer, 101 or a refusal, reaches the client as is. Before any answer
 * byte arrives, connection errors answer 502 and silence past `timeoutMs` 504.
 */
export function forwardUpgrade(req: IncomingMessage, client: Duplex, head: Buffer, f: UpgradeForward): void {
  const where = { sandboxId: f.target.sandboxId, port: f.port };
  const up = f.target.open ? f.target.open(f.port) : connect({ host: f.target.address, port: f.port, noDelay: true });
  f.onTunnel?.(up);
  let answered = false;
  let refused = false;
  const refuse = (err: ProxyError) => {
    if (answered || refused) return;
    refused = true;
    clearTimeout(timer);
    if (!client.destroyed) f.onRefused?.(err);
    writeUpgradeError(req, client, err);
    up.destroy();
  };
  let timer = setTimeout(() => refuse(timeoutError(where, f.timeoutMs)), f.timeoutMs);

  up.once('connect', () => {
    clearTimeout(timer);
    timer = setTimeout(() => refuse(timeoutError(where, f.timeoutMs)), f.timeoutMs);
    const h = upstreamHeaders(req, { upgrade: true, trusted: f.trusted });
    let block = `${req.method} ${f.path} HTTP/1.1\r\n`;
    for (let i = 0; i < h.length; i += 2) block += `${h[i]}: ${h[i + 1]}\r\n`;
    up.write(`${block}\r\n`, 'latin1'); // header bytes as they came (node reads them as latin1)
    if (head.length) up.write(head);
    client.pipe(up);
  });
  up.once('data', () => {
    answered = true;
    clearTimeout(timer);
  });
  up.pipe(client, { end: false });

  up.on('error', (e: NodeJS.ErrnoException) => {
    if (!answered) refuse(upstreamError(e, where));
    else client.destroy();
  });
  const closed = () => {
    clearTimeout(timer);
    if (!answered) refuse(upstreamError(Object.assign(new Error('closed'), { code: 'EOF' }), where));
    else if (!client.writableEnded) client.end();
  };
  up.once('end', closed);
  up.once('close', closed);
  client.on('error', () => up.destroy());
  client.once('close', () => {
    clearTimeout(timer);
    up.destroy();
  });
}
