import { errorBody, SandboxdError, type ServerControlMessage } from '@sandboxd/protocol';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { WebSocket, WebSocketServer, type RawData } from 'ws';
import type { Sandboxd } from '../app.js';
import type { AuthService, Principal } from '../services/auth.js';
import type { TerminalAttachment, TerminalClient, TerminalSession } from '../services/terminal-session.js';
import type { TerminalService } from '../services/terminals.js';
import { authenticate, sameOrigin } from './auth.js';
import { toHttpError } from './errors.js';
import { rejectUpgrade } from './front-door.js';
import type { Metrics } from './metrics.js';
import { limitAccount, limitIp, retryAfterSeconds, type RateLimits } from './rate-limit.js';
import { terminalRoutes } from './routes/terminals.js';

/** Largest client message (keyboard input or paste), bytes. */
export const MAX_INPUT_MESSAGE_BYTES = 1024 * 1024;
/** After a protocol error's close frame, how long the client has to answer it before the socket is cut. */
const CLOSE_GRACE_MS = 2000;
/** Ping period; a client that missed the previous ping's pong is cut. */
const HEARTBEAT_MS = 30_000;
const PATH = /^\/api\/v1\/sandboxes\/([^/]+)\/terminals\/([^/]+)\/ws\/?$/;

/**
 * The terminal WebSocket (spec 4.10, 6.2). Upgrades are authenticated BEFORE the
 * handshake and refused with plain HTTP and the Error body: 401 bad credentials (and a
 * session cookie without a same-origin `Origin`), 404 unknown sandbox or terminal, 409
 * sandbox not `started`, 400 bad `replay`. Output goes in binary frames, `ready`/`exit` in
 * text frames; input may be binary or text, and a text frame holding a JSON object with a
 * string `type` is a control message (`resize`; other types are ignored).
 */
export class TerminalGateway {
  private readonly wss = new WebSocketServer({
    noServer: true,
    maxPayload: MAX_INPUT_MESSAGE_BYTES,
    perMessageDeflate: false,
    clientTracking: false,
  });
  private readonly live = new Set<WebSocket>();
  /** Open (or opening) terminal sockets per account, against `terminalSocketsPerAccount`. */
  private readonly perAccount = new Map<string, number>();
  private readonly alive = new WeakSet<WebSocket>();
  /** Sockets whose reading the terminal paused (its program is not reading input). */
  private readonly inputPaused = new WeakSet<WebSocket>();
  private readonly heartbeat: NodeJS.Timeout;

  constructor(
    private readonly d: {
      terminals: TerminalService;
      auth: AuthService;
      log: Logger;
      limits?: RateLimits;
      metrics?: Metrics;
    },
  ) {
    this.heartbeat = setInterval(() => this.ping(), HEARTBEAT_MS);
    this.heartbeat.unref();
  }

  /** True for requests to a terminal WebSocket path (for `frontDoor.claimUpgrades`). */
  readonly matches = (req: IncomingMessage): boolean => PATH.test((req.url ?? '').split('?')[0]);

  /** Handles one claimed upgrade request; never throws. */
  readonly handleUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer): void => {
    this.accept(req, socket, head).catch((err) => {
      this.d.log.error({ err }, 'terminal upgrade failed');
      if (!socket.destroyed) rejectUpgrade(socket, errorBody('internal', 'Internal server error'));
    });
  };

  private async accept(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://x');
    const [, sandboxId, terminalId] = PATH.exec(url.pathname)!;
    let session: TerminalSession;
    let accountId: string;
    try {
      const replayParam = url.searchParams.get('replay');
      const principal = await this.authenticate(req);
      session = await this.d.terminals.forAttach(principal.account.id, decode(sandboxId), decode(terminalId));
      if (replayParam !== null && replayParam !== '0' && replayParam !== '1') {
        throw new SandboxdError('validation', 'replay must be 0 or 1');
      }
      accountId = principal.account.id;
      const max = this.d.limits?.config.terminalSocketsPerAccount ?? 0;
      if (max > 0 && (this.perAccount.get(accountId) ?? 0) >= max) {
        throw new SandboxdError(
          'rate_limited',
          `This account already has ${max} terminal connections open; close one first`,
          { limit: 'connections', max },
        );
      }
    } catch (e) {
      const { status, body } = toHttpError(e);
      this.d.metrics?.errors.inc({ code: String(status) });
      const retryAfter = retryAfterSeconds(body);
      if (!socket.destroyed) rejectUpgrade(socket, body, retryAfter ? { 'Retry-After': retryAfter } : {});
      return;
    }
    if (socket.destroyed) return;
    // Counted from here (synchronously after the check) until the socket closes, handshake failures included.
    this.perAccount.set(accountId, (this.perAccount.get(accountId) ?? 0) + 1);
    socket.once('close', () => {
      const n = (this.perAccount.get(accountId) ?? 1) - 1;
      if (n > 0) this.perAccount.set(accountId, n);
      else this.perAccount.delete(accountId);
    });
    const replay = url.searchParams.get('replay') === '1';
    this.wss.handleUpgrade(req, socket, head, (ws) => this.connect(ws, session, replay));
  }

  /** API key headers first; a session cookie only with a same-origin `Origin` (CSRF). */
  private async authenticate(req: IncomingMessage) {
    const r = req as unknown as FastifyRequest;
    const limits = this.d.limits;
    let principal: Principal;
    try {
      principal = await authenticate(r, this.d.auth);
      const byKey =
        req.headers.authorization !== undefined ||
        (typeof req.headers['x-api-key'] === 'string' && req.headers['x-api-key'] !== '');
      if (!byKey && !sameOrigin(r)) {
        throw new SandboxdError(
          'unauthorized',
          'A WebSocket authenticated by session cookie must carry a same-origin Origin header',
        );
      }
    } catch (e) {
      if (limits) limitIp(limits, req.socket.remoteAddress);
      throw e;
    }
    if (limits) limitAccount(limits, principal.account.id);
    return principal;
  }

  private connect(ws: WebSocket, session: TerminalSession, replay: boolean): void {
    this.live.add(ws);
    this.alive.add(ws);
    let attachment: TerminalAttachment | null = null;
    const client: TerminalClient = {
      sendOutput: (chunk) => {
        if (ws.readyState === WebSocket.OPEN) ws.send(chunk, { binary: true }, () => attachment?.written());
      },
      sendControl: (msg: ServerControlMessage) => {
        if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(msg), { binary: false });
      },
      get bufferedBytes() {
        return ws.bufferedAmount;
      },
      close: (code, reason) => ws.close(code, reason),
      // Paused by the terminal, not dead: the heartbeat leaves it alone (its pongs wait unread).
      pauseInput: () => {
        this.inputPaused.add(ws);
        ws.pause();
      },
      resumeInput: () => {
        this.inputPaused.delete(ws);
        ws.resume();
      },
    };
    ws.on('pong', () => this.alive.add(ws));
    ws.on('error', (err) => {
      this.d.log.debug({ err, terminalId: session.info.id }, 'terminal socket error');
      // A protocol error (invalid UTF-8, a message over 1 MiB, a malformed frame) has already
      // sent its close frame (1007, 1009, 1002) and ws drops whatever else arrives. Cutting
      // the socket at once would reset a connection the client is still writing to, and the
      // reset can destroy the close frame before the client reads it (it would see 1006).
      if (ws.readyState !== WebSocket.CLOSING) return ws.terminate();
      const cut = setTimeout(() => ws.terminate(), CLOSE_GRACE_MS);
      cut.unref();
      ws.once('close', () => clearTimeout(cut)); // the timer would keep the socket and its buffers alive
    });
    ws.on('close', () => {
      this.live.delete(ws);
      attachment?.detach();
    });
    ws.on('message', (data: RawData, isBinary: boolean) => {
      const bytes = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
      if (isBinary) return attachment?.input(bytes);
      const control = parseControl(bytes);
      if (!control) return attachment?.input(bytes);
      if (control.type === 'resize') attachment?.resize(control.cols as number, control.rows as number);
    });
    attachment = session.attach(client, { replay });
    if (ws.readyState !== WebSocket.OPEN) attachment.detach();
  }

  private ping(): void {
    for (const ws of this.live) {
      if (!this.alive.has(ws) && !this.inputPaused.has(ws)) {
        ws.terminate();
        continue;
      }
      this.alive.delete(ws);
      ws.ping();
    }
  }

  /**
   * Stops the heartbeat. Sockets get their close frame from `TerminalService.closeAll`;
   * those still open `graceMs` later are cut, so server shutdown never waits on a client.
   */
  close(graceMs = 1000): void {
    clearInterval(this.heartbeat);
    setTimeout(() => {
      for (const ws of this.live) ws.terminate();
    }, graceMs).unref();
  }
}

/** A JSON object with a string `type` in a text frame starting with `{`; otherwise null (input). */
export function parseControl(text: Buffer): { type: string; [k: string]: unknown } | null {
  let i = 0;
  while (i < text.length && (text[i] === 0x20 || text[i] === 0x09 || text[i] === 0x0a || text[i] === 0x0d)) i++;
  if (text[i] !== 0x7b /* { */) return null;
  try {
    const v: unknown = JSON.parse(text.toString('utf8'));
    if (v && typeof v === 'object' && !Array.isArray(v) && typeof (v as { type?: unknown }).type === 'string')
      return v as { type: string };
  } catch {
    /* not JSON: keyboard input */
  }
  return null;
}

function decode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    throw new SandboxdError('not_found', 'Terminal not found');
  }
}

/**
 * Wires terminals into the server (an `extraRoutes` entry): the REST routes, the
 * WebSocket upgrade claim on the front door, and shutdown (clients get close 1001).
 */
export async function terminalFeature(app: FastifyInstance, sd: Sandboxd): Promise<void> {
  const { terminals, auth } = sd.services;
  const gateway = new TerminalGateway({ terminals, auth, log: sd.log, limits: sd.rateLimits, metrics: sd.metrics });
  sd.frontDoor.claimUpgrades(gateway.matches, gateway.handleUpgrade);
  app.addHook('preClose', async () => {
    terminals.closeAll();
    gateway.close();
  });
  const fallbackHost = () => {
    const a = sd.http.server.address();
    return a && typeof a === 'object' ? `${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}` : 'localhost';
  };
  await app.register(terminalRoutes, { terminals, fallbackHost });
}
