import { Agent as HttpAgent, request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import type { Duplex } from 'node:stream';
import { SandboxdError } from '@sandboxd/protocol';
import WebSocket from 'ws';
import { fromErrorBody, RUNNER_PREFIX, TUNNEL_PROTOCOL } from './wire.js';
import { SocketHeartbeat } from './heartbeat.js';

/** How long a connection to the runner may take before the call fails `unavailable`. */
export const CONNECT_TIMEOUT_MS = 5_000;
/** Default limit of a unary call, answer included. */
export const CALL_TIMEOUT_MS = 120_000;

/** Options of {@link RunnerClient}. */
export interface RunnerClientOptions {
  /** Extra CA certificates (PEM) trusted for an `https` runner (besides the system's and NODE_EXTRA_CA_CERTS). */
  ca?: Buffer | string;
  /**
   * Ping period of the calls socket, ms (default {@link CALLS_PING_MS}): a socket whose
   * runner did not answer the previous ping is cut, failing its calls in flight.
   */
  callsPingMs?: number;
}

/**
 * Ping period of the calls socket. A runner whose host went away without closing the
 * connection (powered off, network cut) fails the calls in flight within two periods,
 * instead of each waiting for its own time limit.
 */
export const CALLS_PING_MS = 5_000;

/**
 * The HTTP side of the runner protocol (`wire.ts`) for one runner: keep-alive connections,
 * the token on every request, errors as `SandboxdError`s. A runner that refuses the
 * connection, resets it mid-call or does not answer in time gives `unavailable` naming
 * the runner, never a hang.
 */
export class RunnerClient {
  readonly url: URL;
  readonly name: string;
  private readonly agent: HttpAgent;
  private readonly tls: boolean;
  /** Unary calls, over one WebSocket (a third of an HTTP request's cost per call). */
  private readonly calls: CallSocket;

  constructor(
    url: string,
    private readonly token: string,
    private readonly o: RunnerClientOptions = {},
  ) {
    this.url = new URL(url);
    this.tls = this.url.protocol === 'https:';
    this.name = this.url.host;
    const agentOpts = { keepAlive: true, keepAliveMsecs: 1000, maxFreeSockets: 64 };
    this.agent = this.tls ? new HttpsAgent({ ...agentOpts, ca: o.ca }) : new HttpAgent(agentOpts);
    this.calls = new CallSocket(this, o.callsPingMs ?? CALLS_PING_MS);
  }

  /** Closes the idle keep-alive connections and the calls socket (calls in flight fail `unavailable`). */
  close(): void {
    this.agent.destroy();
    this.calls.close();
  }

  /**
   * A unary call: a `{id, method, args}` message on the calls socket (`/runner/v1/calls`),
   * resolves with its answer's `result`. A runner without that socket (an older version)
   * is called with `POST /runner/v1/<method>` `{args}` instead.
   */
  async call<T>(method: string, args: unknown[], timeoutMs = CALL_TIMEOUT_MS): Promise<T> {
    if (this.calls.supported) {
      const r = await this.calls.call<T>(method, args, timeoutMs);
      if (r.answered) return r.result;
    }
    return this.callOverHttp(method, args, timeoutMs);
  }

  /** A unary call as `POST /runner/v1/<method>` `{args}`. */
  async callOverHttp<T>(method: string, args: unknown[], timeoutMs = CALL_TIMEOUT_MS): Promise<T> {
    const body = JSON.stringify({ args });
    const res = await this.send(method, { body, timeoutMs, retryReset: true });
    const json = (await readJson(res, this.name)) as { result: T };
    return json.result;
  }

  /**
   * One request to `/runner/v1/<path>`; resolves with the response once its status is 200
   * (the body unread), rejects with the error body's `SandboxdError` otherwise.
   * `body`: a string sent whole, or a function that streams into the request.
   */
  async send(
    path: string,
    o: {
      method?: string;
      body?: string | ((req: ClientRequest) => void);
      headers?: Record<string, string>;
      timeoutMs?: number;
      /** Retry once when a reused keep-alive connection was closed under the request (the runner never saw it). */
      retryReset?: boolean;
    },
  ): Promise<IncomingMessage> {
    try {
      return await this.sendOnce(path, o);
    } catch (e) {
      if (o.retryReset && (e as { reusedSocket?: boolean }).reusedSocket) return this.sendOnce(path, o);
      throw e;
    }
  }

  private sendOnce(
    path: string,
    o: {
      method?: string;
      body?: string | ((req: ClientRequest) => void);
      headers?: Record<string, string>;
      timeoutMs?: number;
    },
  ): Promise<IncomingMessage> {
    const timeoutMs = o.timeoutMs ?? CALL_TIMEOUT_MS;
    return new Promise((resolve, reject) => {
      const req = (this.tls ? httpsRequest : httpRequest)(new URL(`${RUNNER_PREFIX}/${path}`, this.url), {
        method: o.method ?? 'POST',
        agent: this.agent,
        headers: {
          authorization: `Bearer ${this.token}`,
          ...(typeof o.body === 'string'
            ? { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(o.body)) }
            : {}),
          ...o.headers,
        },
      });
      let settled = false;
      const timer = setTimeout(() => {
        req.destroy(
          new SandboxdError(
            'unavailable',
            `Runner ${this.name} did not answer within ${Math.round(timeoutMs / 1000)} s`,
          ),
        );
      }, timeoutMs);
      req.on('socket', (s) => {
        if (s.connecting) {
          s.setTimeout(CONNECT_TIMEOUT_MS, () =>
            req.destroy(
              new SandboxdError(
                'unavailable',
                `Runner ${this.name} did not accept a connection within ${CONNECT_TIMEOUT_MS} ms`,
              ),
            ),
          );
          s.once('connect', () => s.setTimeout(0));
        }
      });
      req.on('error', (e) => {
        clearTimeout(timer);
        if (settled) return;
        settled = true;
        const err = this.unreachable(e);
        (err as { reusedSocket?: boolean }).reusedSocket = req.reusedSocket && isReset(e);
        reject(err);
      });
      req.on('response', (res) => {
        clearTimeout(timer);
        if (settled) return res.resume();
        settled = true;
        if (res.statusCode === 200) return resolve(res);
        readJson(res, this.name).then(
          (b) => reject(fromErrorBody(b, `Runner ${this.name} answered ${res.statusCode}`)),
          reject,
        );
      });
      if (typeof o.body === 'string') req.end(o.body);
      else if (o.body) o.body(req);
      else req.end();
    });
  }

  /**
   * A WebSocket to `/runner/v1/<kind>` (with `query`); rejects with the runner's error
   * (its refusal's body) or `unavailable` when it cannot be opened. `setup` runs before
   * the handshake, so listeners it adds miss nothing the runner sends at once.
   */
  socket(
    kind: 'spawn' | 'tty' | 'terminal' | 'process' | 'calls',
    o: { query?: Record<string, string>; setup?: (ws: WebSocket) => void } = {},
  ): Promise<WebSocket> {
    const u = new URL(`${RUNNER_PREFIX}/${kind}`, this.url);
    u.protocol = this.tls ? 'wss:' : 'ws:';
    for (const [k, v] of Object.entries(o.query ?? {})) u.searchParams.set(k, v);
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(u, {
        headers: { authorization: `Bearer ${this.token}` },
        handshakeTimeout: CONNECT_TIMEOUT_MS,
        perMessageDeflate: false,
        maxPayload: 64 << 20,
        ca: this.o.ca,
      });
      o.setup?.(ws);
      ws.once('open', () => resolve(ws));
      ws.once('unexpected-response', (_req, res) => {
        readJson(res, this.name).then(
          (b) => reject(fromErrorBody(b, `Runner ${this.name} refused the ${kind} socket (${res.statusCode})`)),
          reject,
        );
      });
      ws.once('error', (e) => reject(this.unreachable(e)));
    });
  }

  /**
   * A TCP connection to `port` of sandbox `sandboxId`, through the runner's tunnel. Rejects
   * with the runner's error (`not_found`, `upstream`) or `unavailable`.
   */
  tunnel(sandboxId: string, port: number): Promise<Duplex> {
    const u = new URL(`${RUNNER_PREFIX}/tunnel`, this.url);
    u.searchParams.set('sandbox', sandboxId);
    u.searchParams.set('port', String(port));
    return new Promise((resolve, reject) => {
      const req = (this.tls ? httpsRequest : httpRequest)(u, {
        method: 'GET',
        ca: this.o.ca,
        headers: { authorization: `Bearer ${this.token}`, connection: 'Upgrade', upgrade: TUNNEL_PROTOCOL },
      });
      req.setTimeout(CONNECT_TIMEOUT_MS * 3, () =>
        req.destroy(new SandboxdError('unavailable', `Runner ${this.name} did not open the tunnel in time`)),
      );
      req.on('upgrade', (_res, socket, head) => {
        req.setTimeout(0);
        socket.setTimeout(0);
        socket.setNoDelay(true);
        if (head.length) socket.unshift(head);
        resolve(socket);
      });
      req.on('response', (res) => {
        readJson(res, this.name).then(
          (b) => reject(fromErrorBody(b, `Runner ${this.name} refused the tunnel (${res.statusCode})`)),
          reject,
        );
      });
      req.on('error', (e) => reject(this.unreachable(e)));
      req.end();
    });
  }

  /** The `unavailable` error a failed connection stands for (a `SandboxdError` passes as is). */
  unreachable(e: unknown): SandboxdError {
    if (e instanceof SandboxdError) return e;
    const code = (e as NodeJS.ErrnoException).code;
    const why =
      code && !(e as Error).message.includes(code) ? `${code}: ${(e as Error).message}` : (e as Error).message;
    return new SandboxdError('unavailable', `Runner ${this.name} is unreachable (${why})`, { runner: this.name });
  }
}

function isReset(e: unknown): boolean {
  const code = (e as NodeJS.ErrnoException).code;
  return code === 'ECONNRESET' || code === 'EPIPE';
}

/** The JSON body of `res`; an unreadable one is `internal`, a cut one `unavailable`. */
export async function readJson(res: IncomingMessage, runner: string): Promise<unknown> {
  const chunks: Buffer[] = [];
  try {
    for await (const c of res as AsyncIterable<Buffer>) chunks.push(c);
  } catch (e) {
    throw new SandboxdError('unavailable', `Runner ${runner} cut its answer (${(e as Error).message})`, { runner });
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new SandboxdError('internal', `Runner ${runner} answered ${res.statusCode} with a body that is not JSON`);
  }
}

/** A call sent on the calls socket, waiting for its answer. */
interface PendingCall {
  ws: WebSocket;
  resolve: (r: { answered: true; result: unknown }) => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
}

/**
 * The unary calls of one {@link RunnerClient}, multiplexed on one WebSocket to
 * `/runner/v1/calls`: each message `{id, method, args}` is answered by `{id, result}` or
 * `{id, error}` (an error body), in any order. Opened at the first call and again after it
 * closed; when it closes, the calls in flight on it fail `unavailable` (the runner may or
 * may not have run them, as when an HTTP request is cut).
 */
class CallSocket {
  /** False once the runner refused the socket with 404 (a runner that predates it). */
  supported = true;
  private ws: WebSocket | null = null;
  private opening: Promise<WebSocket | null> | null = null;
  private nextId = 1;
  private readonly pending = new Map<number, PendingCall>();
  /** Bumped by {@link close}: a socket whose opening began before is closed once open. */
  private generation = 0;
  private readonly heartbeat: SocketHeartbeat;

  constructor(
    private readonly client: RunnerClient,
    pingMs: number,
  ) {
    this.heartbeat = new SocketHeartbeat(pingMs);
  }

  /** Resolves with the answer, or `{answered: false}` when the runner has no calls socket. */
  async call<T>(
    method: string,
    args: unknown[],
    timeoutMs: number,
  ): Promise<{ answered: true; result: T } | { answered: false }> {
    const ws = await this.open();
    if (!ws) return { answered: false };
    const id = this.nextId++;
    const message = JSON.stringify({ id, method, args });
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(
          new SandboxdError(
            'unavailable',
            `Runner ${this.client.name} did not answer within ${Math.round(timeoutMs / 1000)} s`,
            { runner: this.client.name },
          ),
        );
      }, timeoutMs);
      this.pending.set(id, { ws, resolve: resolve as PendingCall['resolve'], reject, timer });
      ws.send(message, (err) => {
        if (err) this.settle(id)?.reject(this.client.unreachable(err));
      });
    });
  }

  /** Closes the socket; calls in flight fail `unavailable`. */
  close(): void {
    this.generation++;
    const ws = this.ws;
    this.ws = null;
    ws?.terminate();
    this.heartbeat.close();
    for (const id of [...this.pending.keys()]) this.settle(id)?.reject(this.closed());
  }

  private closed(): SandboxdError {
    return new SandboxdError('unavailable', `The connection to runner ${this.client.name} was closed`, {
      runner: this.client.name,
    });
  }

  private open(): Promise<WebSocket | null> {
    if (this.ws?.readyState === WebSocket.OPEN) return Promise.resolve(this.ws);
    if (!this.supported) return Promise.resolve(null);
    const generation = this.generation;
    this.opening ??= this.client
      .socket('calls', { setup: (ws) => this.watch(ws) })
      .then(
        (ws) => {
          if (generation !== this.generation) {
            ws.terminate();
            throw this.closed();
          }
          this.ws = ws;
          this.heartbeat.watch(ws);
          return ws;
        },
        (e: unknown) => {
          if (e instanceof SandboxdError && e.kind === 'not_found') {
            this.supported = false;
            return null;
          }
          throw e;
        },
      )
      .finally(() => {
        this.opening = null;
      });
    return this.opening;
  }

  private watch(ws: WebSocket): void {
    ws.on('pong', () => this.heartbeat.pong(ws));
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      if (isBinary) return;
      let m: { id?: unknown; result?: unknown; error?: unknown };
      try {
        m = JSON.parse(data.toString('utf8'));
      } catch {
        return;
      }
      if (typeof m.id !== 'number') return;
      const p = this.settle(m.id);
      if (!p) return;
      if (m.error !== undefined)
        p.reject(fromErrorBody(m.error, `Runner ${this.client.name} answered an error without a body`));
      else p.resolve({ answered: true, result: m.result ?? null });
    });
    ws.on('close', (code: number) => {
      if (this.ws === ws) this.ws = null;
      for (const [id, p] of [...this.pending])
        if (p.ws === ws)
          this.settle(id)?.reject(
            new SandboxdError(
              'unavailable',
              `Runner ${this.client.name} closed the connection before answering (${code})`,
              { runner: this.client.name },
            ),
          );
    });
    ws.on('error', () => undefined); // followed by close
  }

  /** Removes call `id` from those in flight, its timer stopped; undefined when it was settled already. */
  private settle(id: number): PendingCall | undefined {
    const p = this.pending.get(id);
    if (!p) return undefined;
    this.pending.delete(id);
    clearTimeout(p.timer);
    return p;
  }
}
