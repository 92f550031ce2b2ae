import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { SandboxdError } from '@sandboxd/protocol';
import { rawResponse } from '../http/front-door.js';

/**
 * A refusal of the port proxy: an error of the API's kinds (`upstream` 502 and
 * `upstream_timeout` 504 are the proxy's own), told apart from the proxy's own bugs.
 */
export class ProxyError extends SandboxdError {
  override name = 'ProxyError';
}

/** True when the client asks for HTML (a browser navigation), so it gets a page, not JSON. */
export function wantsHtml(req: IncomingMessage): boolean {
  return /\btext\/html\b/i.test(req.headers.accept ?? '');
}

/** The error as `{type, body}`: a small HTML page for browsers, the JSON body otherwise. */
export function renderError(req: IncomingMessage, err: ProxyError): { type: string; body: string } {
  if (!wantsHtml(req)) return { type: 'application/json', body: JSON.stringify(err.toBody()) };
  const title = `${err.status} ${STATUS_CODES[err.status] ?? 'Error'}`;
  const body =
    `<!doctype html><html><head><meta charset="utf-8"><title>${esc(title)}</title>` +
    '<style>body{font:16px system-ui,sans-serif;max-width:40em;margin:4em auto;padding:0 1em;color:#222}' +
    'h1{font-size:1.4em}code{background:#f3f3f3;padding:0 .2em}footer{color:#888;font-size:.85em;margin-top:2em}</style></head>' +
    `<body><h1>${esc(title)}</h1><p>${esc(err.message)}</p><footer>sandboxd port proxy</footer></body></html>\n`;
  return { type: 'text/html; charset=utf-8', body };
}

/**
 * Answers a proxied request with `err`. The connection is closed afterwards when the
 * request body was not read, so unread bytes are never taken for the next request. When
 * the response has already started, the only honest signal left is to cut it.
 */
export function sendError(
  req: IncomingMessage,
  res: ServerResponse,
  err: ProxyError,
  extraHeaders: Record<string, string> = {},
): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const { type, body } = renderError(req, err);
  const headers: Record<string, string | number> = {
    'content-type': type,
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
    'x-sandboxd-proxy': 'error',
    ...retryAfter(err),
    ...extraHeaders,
  };
  if (!req.complete) headers.connection = 'close';
  res.writeHead(err.status, headers);
  res.end(req.method === 'HEAD' ? undefined : body);
}

/** Answers an upgrade request on its raw socket with `err`, then closes it. */
export function writeUpgradeError(req: IncomingMessage, socket: Duplex, err: ProxyError): void {
  if (socket.destroyed || !socket.writable) return;
  const { type, body } = renderError(req, err);
  socket.end(
    rawResponse(err.status, body, {
      'Content-Type': type,
      'Cache-Control': 'no-store',
      'X-Sandboxd-Proxy': 'error',
      ...retryAfter(err),
    }),
  );
}

/** `Retry-After` (whole seconds, at least 1) of a refusal that asks for a retry (`details.retryAfterMs`), as the API sends it. */
function retryAfter(err: ProxyError): Record<string, string> {
  const ms = (err.details as { retryAfterMs?: unknown } | undefined)?.retryAfterMs;
  return typeof ms === 'number' ? { 'retry-after': String(Math.max(1, Math.ceil(ms / 1000))) } : {};
}

/** Maps a socket error of the connection to the sandbox to what the client is told. */
export function upstreamError(e: NodeJS.ErrnoException, where: { sandboxId: string; port: number }): ProxyError {
  const details = { sandboxId: where.sandboxId, port: where.port, reason: e.code ?? 'error' };
  switch (e.code) {
    case 'ECONNREFUSED':
      return new ProxyError(
        'upstream',
        `Nothing is listening on port ${where.port} of sandbox ${where.sandboxId}`,
        details,
      );
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
    case 'EHOSTDOWN':
      return new ProxyError('upstream', `Sandbox ${where.sandboxId} is unreachable`, details);
    default:
      return new ProxyError(
        'upstream',
        `Sandbox ${where.sandboxId} closed the connection on port ${where.port} without a valid answer`,
        details,
      );
  }
}

/** The 504 of a sandbox that did not answer in time. */
export function timeoutError(where: { sandboxId: string; port: number }, timeoutMs: number): ProxyError {
  return new ProxyError(
    'upstream_timeout',
    `Sandbox ${where.sandboxId} did not answer on port ${where.port} within ${timeoutMs} ms`,
    {
      sandboxId: where.sandboxId,
      port: where.port,
      timeoutMs,
    },
  );
}

function esc(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
