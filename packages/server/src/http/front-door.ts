import { EventEmitter } from 'node:events';
import { createServer, STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import type { Duplex } from 'node:stream';
import { errorBody, type ErrorBody } from '@sandboxd/protocol';

/** Idle keep-alive connections are closed after this (fastify's default, above common proxies' 60 s). */
export const KEEP_ALIVE_TIMEOUT_MS = 72_000;

export type RequestMatcher = (req: IncomingMessage) => boolean;
export type RequestHandler = (req: IncomingMessage, res: ServerResponse) => void;
export type UpgradeHandler = (req: IncomingMessage, socket: Duplex, head: Buffer) => void;

/**
 * The raw HTTP entry in front of fastify. Features that must see requests before fastify
 * routes them claim them here: the port proxy claims requests and upgrades by Host header.
 * Upgrades nobody claims go to fastify's WebSocket routes when their path is one of them
 * (terminals), and are answered 404 with the error body otherwise. Claims are made at
 * start-up, before the server listens.
 */
export class FrontDoor {
  private readonly requests: { match: RequestMatcher; handle: RequestHandler }[] = [];
  private readonly rewrites: { match: RequestMatcher; url: (url: string) => string }[] = [];
  private readonly upgrades: { match: RequestMatcher; handle: UpgradeHandler }[] = [];
  private readonly fastifySockets: RequestMatcher[] = [];
  /**
   * Where upgrades for fastify's own WebSocket routes are emitted (`'upgrade'`), for
   * @fastify/websocket to listen on instead of the server itself: the claims above must see
   * every upgrade first, and only the paths given to {@link routeUpgradesToFastify} reach it.
   */
  readonly fastifyUpgrades = new EventEmitter();

  /** `tls`: PEM certificate (chain) and key; the one port then speaks HTTPS only. */
  constructor(private readonly tls: { cert: Buffer; key: Buffer } | null = null) {}

  claimRequests(match: RequestMatcher, handle: RequestHandler): void {
    this.requests.push({ match, handle });
  }

  /**
   * Requests `match` accepts go to fastify with their URL rewritten, before any claim sees
   * them (E2B's control API on the host `api.<publicHost>`, served under `/e2b`).
   */
  rewriteToFastify(match: RequestMatcher, url: (url: string) => string): void {
    this.rewrites.push({ match, url });
  }

  claimUpgrades(match: RequestMatcher, handle: UpgradeHandler): void {
    this.upgrades.push({ match, handle });
  }

  /** Upgrades that no claim takes and `match` accepts go to fastify's WebSocket routes. */
  routeUpgradesToFastify(match: RequestMatcher): void {
    this.fastifySockets.push(match);
  }

  /**
   * For fastify's `serverFactory` option: the HTTP server with the claims in front. Fastify
   * applies its `keepAliveTimeout` (72 s) only to servers it makes itself, so it is applied
   * here: with node's 5 s, a client reusing a connection idle for ~5 s (a burst after a lull)
   * races the server's close and gets ECONNRESET on a request the server never saw.
   */
  readonly serverFactory = (fastifyHandler: RequestHandler, opts: { keepAliveTimeout?: number } = {}): Server => {
    const dispatch = (req: IncomingMessage, res: ServerResponse) => {
      const rewrite = this.rewrites.find((r) => r.match(req));
      if (rewrite) {
        req.url = rewrite.url(req.url ?? '/');
        fastifyHandler(req, res);
        return;
      }
      const claim = this.requests.find((c) => c.match(req));
      (claim ? claim.handle : fastifyHandler)(req, res);
    };
    // An https.Server is an http.Server in all that fastify and the claims use.
    const server = this.tls ? (createTlsServer(this.tls, dispatch) as unknown as Server) : createServer(dispatch);
    server.keepAliveTimeout = opts.keepAliveTimeout ?? KEEP_ALIVE_TIMEOUT_MS;
    server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      socket.on('error', () => socket.destroy());
      const claim = this.upgrades.find((c) => c.match(req));
      if (claim) claim.handle(req, socket, head);
      else if (this.fastifySockets.some((m) => m(req))) this.fastifyUpgrades.emit('upgrade', req, socket, head);
      else
        socket.end(
          rawErrorResponse(errorBody('not_found', `No WebSocket endpoint at ${req.url?.split('?')[0] ?? '/'}`)),
        );
    });
    return server;
  };
}

/**
 * A whole HTTP/1.1 response (`Connection: close`) for sockets that no HTTP machinery
 * answers: refused upgrades and requests node's parser could not read.
 */
export function rawResponse(status: number, body: string, headers: Record<string, string>): string {
  const lines = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`);
  return (
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Error'}\r\n${lines.join('')}` +
    `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`
  );
}

/** {@link rawResponse} with an Error body (`{code, kind, message, details?}`). */
export function rawErrorResponse(body: ErrorBody, headers: Record<string, string> = {}): string {
  return rawResponse(body.code, JSON.stringify(body), { 'Content-Type': 'application/json', ...headers });
}
