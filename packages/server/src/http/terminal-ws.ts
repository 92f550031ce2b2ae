import { SandboxdError, type ServerControlMessage } from '@sandboxd/protocol';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { WebSocket, type RawData } from 'ws';
import { CLOSE, type TerminalAttachment, type TerminalClient } from '../runtime/terminals/types.js';
import { Slots } from '../services/slots.js';

/** Largest client message (keyboard input or paste), bytes. */
export const MAX_INPUT_MESSAGE_BYTES = 1024 * 1024;
/** After a protocol error's close frame, how long the client has to answer it before the socket is cut. */
const CLOSE_GRACE_MS = 2000;
/** Ping period; a client that missed the previous ping's pong is cut. */
const HEARTBEAT_MS = 30_000;
const PATH = /^\/api\/v1\/sandboxes\/[^/]+\/terminals\/[^/]+\/ws\/?$/;

/** True for a request to a terminal's WebSocket path (the front door hands such upgrades to fastify). */
export function isTerminalSocketPath(url: string | undefined): boolean {
  return PATH.test((url ?? '').split('?')[0]);
}

/** Options of the WebSocket server behind the terminal route: input messages up to 1 MiB, no compression. */
export const TERMINAL_WS_OPTIONS = {
  maxPayload: MAX_INPUT_MESSAGE_BYTES,
  perMessageDeflate: false,
  clientTracking: false,
};

/**
 * The terminal WebSocket (spec 4.10, 6.2) once the upgrade is accepted. The upgrade itself
 * is an ordinary fastify route (routes/terminals.ts, through @fastify/websocket): the same
 * authentication, rate limits and validation as every request, and refusals are plain HTTP
 * with the Error body (401, 404, 409, 400, 429). Output goes in binary frames, `ready`/`exit`
 * in text frames; input may be binary or text, and a text frame holding a JSON object with
 * a string `type` is a control message (`resize`; other types are ignored). Sockets that
 * miss a heartbeat are cut.
 */
export class TerminalGateway {
  private readonly live = new Set<WebSocket>();
  /** Open (or opening) terminal sockets per account, against `maxSocketsPerAccount`. */
  private readonly perAccount = new Slots();
  /** Open (or opening) terminal sockets per sandbox, against `maxSocketsPerSandbox`. */
  private readonly perSandbox = new Slots();
  private readonly alive = new WeakSet<WebSocket>();
  /** Sockets whose reading the terminal paused (its program is not reading input). */
  private readonly inputPaused = new WeakSet<WebSocket>();
  private readonly heartbeat: NodeJS.Timeout;

  /**
   * `maxSocketsPerAccount`: terminal sockets one account may hold open at once;
   * `maxSocketsPerSandbox`: to the terminals of one sandbox, so that one sandbox never takes
   * all of its account's (0 or absent: no limit).
   */
  constructor(private readonly d: { log: Logger; maxSocketsPerAccount: number; maxSocketsPerSandbox?: number }) {
    this.heartbeat = setInterval(() => this.ping(), HEARTBEAT_MS);
    this.heartbeat.unref();
  }

  /**
   * Counts one socket of `accountId` to a terminal of `sandboxId` until `socket` closes (the
   * handshake included), or throws `rate_limited` (429 without Retry-After: a count, not a
   * rate) when the sandbox or the account already holds its maximum.
   */
  admit(accountId: string, sandboxId: string, socket: Duplex): void {
    const perSandbox = this.d.maxSocketsPerSandbox ?? 0;
    const releaseSandbox = this.perSandbox.take(
      sandboxId,
      perSandbox,
      () =>
        new SandboxdError(
          'rate_limited',
          `This sandbox already has ${perSandbox} terminal connections open; close one first`,
          { limit: 'terminalSocketsPerSandbox', max: perSandbox },
        ),
    );
    const max = this.d.maxSocketsPerAccount;
    let releaseAccount: () => void;
    try {
      releaseAccount = this.perAccount.take(
        accountId,
        max,
        () =>
          new SandboxdError(
            'rate_limited',
            `This account already has ${max} terminal connections open; close one first`,
            { limit: 'connections', max },
          ),
      );
    } catch (e) {
      releaseSandbox();
      throw e;
    }
    let held = true;
    const release = () => {
      if (!held) return;
      held = false;
      releaseSandbox();
      releaseAccount();
    };
    socket.once('close', release);
    // A client that left while the request was being checked: its 'close' has been and
    // gone, and would never give the slots back.
    if (socket.destroyed) release();
  }

  /**
   * Attaches an accepted socket to its terminal through `attach` (where the terminal is
   * held: in this process, or on the runner). The socket is not read until the attachment
   * is made; when it fails (the terminal went meanwhile, the runner is unreachable) the
   * socket is closed (1000 `terminal not found`, or 1011 naming the cause).
   */
  connect(ws: WebSocket, attach: (client: TerminalClient) => Promise<TerminalAttachment>): void {
    this.live.add(ws);
    this.alive.add(ws);
    let attachment: TerminalAttachment | null = null;
    // Reading is paused while the attachment is made, and while the terminal asks so.
    const paused = { attaching: true, byTerminal: false };
    const applyPause = () => {
      if (paused.attaching || paused.byTerminal) {
        this.inputPaused.add(ws);
        ws.pause();
      } else {
        this.inputPaused.delete(ws);
        ws.resume();
      }
    };
    applyPause();
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
        paused.byTerminal = true;
        applyPause();
      },
      resumeInput: () => {
        paused.byTerminal = false;
        applyPause();
      },
    };
    ws.on('pong', () => this.alive.add(ws));
    ws.on('error', (err) => {
      this.d.log.debug({ err }, 'terminal socket error');
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
    attach(client).then(
      (a) => {
        attachment = a;
        // Read again (also a closing socket, so that its close handshake is read).
        paused.attaching = false;
        applyPause();
        if (ws.readyState !== WebSocket.OPEN) a.detach();
      },
      (err: unknown) => {
        const gone = err instanceof SandboxdError && err.kind === 'not_found';
        // The terminal got its share of clients since the upgrade was admitted: try again later.
        const full = err instanceof SandboxdError && err.kind === 'rate_limited';
        if (!gone && !full) this.d.log.warn({ err }, 'attaching a terminal socket failed');
        paused.attaching = false;
        applyPause();
        if (ws.readyState !== WebSocket.OPEN) return;
        if (gone) ws.close(CLOSE.normal, 'terminal not found');
        else ws.close(full ? CLOSE.tooSlow : CLOSE.lostRunner, closeReason(err));
      },
    );
  }

  /**
   * Closes every socket with `code` without ending its terminal (an API replica that shuts
   * down while the terminals live on the runner: the clients reconnect through another).
   */
  closeClients(code: number, reason: string): void {
    for (const ws of this.live) if (ws.readyState === WebSocket.OPEN) ws.close(code, reason);
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
   * Stops the heartbeat. Sockets get their close frame from the terminals' `closeAll` or {@link closeClients};
   * those still open `graceMs` later are cut, so server shutdown never waits on a client.
   */
  close(graceMs = 1000): void {
    clearInterval(this.heartbeat);
    setTimeout(() => {
      for (const ws of this.live) ws.terminate();
    }, graceMs).unref();
  }
}

/** A close reason (at most 123 bytes) naming why an attachment failed. */
function closeReason(err: unknown): string {
  const msg = err instanceof Error ? err.message : String(err);
  const b = Buffer.from(msg);
  return b.length <= 123
    ? msg
    : `${b
        .subarray(0, 120)
        .toString('utf8')
        .replace(/\uFFFD$/, '')}...`;
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
