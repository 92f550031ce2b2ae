import { InjectionQueue } from '../runtime/remote/injections.js';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { type ErrorBody, errorBody, SandboxdError } from '@sandboxd/protocol';
import type { Logger } from 'pino';
import { type WebSocket, WebSocketServer } from 'ws';
import { KEEP_ALIVE_TIMEOUT_MS, rawErrorResponse } from '../http/front-door.js';
import type { RecoveryReport, RuntimeDriver } from '../runtime/driver.js';
import type { DriverProcesses } from '../runtime/processes/types.js';
import type { ProcessHost } from '../runtime/processes/host.js';
import type { TerminalHost } from '../runtime/terminals/host.js';
import {
  bearerMatches,
  fromWireArgs,
  RUNNER_PREFIX,
  toErrorBody,
  UNARY_METHODS,
  type RunnerHealth,
} from '../runtime/remote/wire.js';
import { serveFilePack, serveFileRead, serveFileUnpack, serveFileWatch, serveFileWrite } from './files.js';
import { processTarget, serveProcessCall, serveProcessSocket, serveProcessStdin } from './processes.js';
import { serveStreamSocket } from './sockets.js';
import { serveTerminalCall, serveTerminalSocket, terminalTarget } from './terminals.js';
import { serveTunnel } from './tunnel.js';

/** Largest JSON body of a unary call (a create's spec, an exec's command), bytes. */
const MAX_JSON_BYTES = 4 * 1024 * 1024;
/** Ping period of terminal and process sockets; one whose replica missed the previous pong is cut (its client detached). */
const HEARTBEAT_MS = 30_000;
/**
 * The kubelet's probes, answered without the token (docs/runners.md#probes): `/livez` while
 * the process serves HTTP, `/readyz` while it takes calls. A fixed body that reveals nothing;
 * the runner's figures stay behind the token (`/runner/v1/health`).
 */
const PROBES = new Set(['/livez', '/readyz']);
/** Driver calls after which the sandbox has no process left: its terminals are ended, its tracked processes forgotten. */
const ENDS_SANDBOX = new Set(['kill', 'stop', 'delete']);

/** Options of {@link RunnerServer}. */
export interface RunnerServerOptions {
  /** The host's runtime, initialised and recovered by the caller (see {@link RunnerServer.recovered}). */
  driver: RuntimeDriver;
  /** The terminals of the runtime's PTYs, served to every replica (`terminals.*` calls, `/runner/v1/terminal`). */
  terminals: TerminalHost;
  /** The processes started through the API, tracked here and served to every replica (`processes.*` calls, `/runner/v1/process`). */
  processes: DriverProcesses;
  /** `SANDBOXD_RUNNER_TOKEN`: every request and upgrade must carry it as a bearer token. */
  token: string;
  /** `SANDBOXD_NODE_NAME`: reported by the health endpoint. */
  nodeName: string;
  /** PEM certificate (chain) and key: the port speaks HTTPS only. Null: plain HTTP. */
  tls: { cert: Buffer; key: Buffer } | null;
  log: Logger;
}

/**
 * The runner's server: one host's runtime served to API replicas (protocol in
 * `runtime/remote/wire.ts`). Requests and upgrades without the token are refused with 401
 * before anything else is read, but for the probes' GETs ({@link PROBES}). The runner holds no records: what the driver knows is all
 * it knows.
 */
export class RunnerServer {
  readonly server: Server;
  private readonly wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload: 1 << 20 });
  /** The calls sockets of API replicas (`/runner/v1/calls`): a message is one unary call. */
  private readonly callsWss = new WebSocketServer({
    noServer: true,
    perMessageDeflate: false,
    maxPayload: MAX_JSON_BYTES,
  });
  private readonly sockets = new Set<Duplex>();
  /** Terminal sockets of API replicas, process readers' sockets, and those that answered the last ping. */
  private readonly terminalSockets = new Set<WebSocket>();
  private readonly processSockets = new Set<WebSocket>();
  private readonly callSockets = new Set<WebSocket>();
  private readonly alive = new WeakSet<WebSocket>();
  private readonly heartbeat: NodeJS.Timeout;
  /** What the driver's `recover()` found at start-up; `recover` calls of clients get it. */
  recovered: RecoveryReport = { adopted: [], cleaned: [] };
  /** The driver's secret injections, until an API process fetches them (`injections` calls). */
  readonly injections = new InjectionQueue();
  /** `/readyz`: set once listening (the driver is initialised and recovered by then), cleared by {@link drain}. */
  private ready = false;

  constructor(private readonly o: RunnerServerOptions) {
    const handler = (req: IncomingMessage, res: ServerResponse) => void this.request(req, res);
    this.server = o.tls ? (createTlsServer(o.tls, handler) as unknown as Server) : createServer(handler);
    this.server.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS;
    this.server.on('connection', (s: Duplex) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    if (o.tls)
      this.server.on('secureConnection', (s: Duplex) => {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
      });
    this.server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => this.upgrade(req, socket, head));
    this.heartbeat = setInterval(() => this.ping(), HEARTBEAT_MS);
    this.heartbeat.unref();
    o.driver.onInjection?.((e) => this.injections.push(e));
  }

  /** Calls sockets open now (one per API replica that called since it connected), for tests. */
  get callSocketCount(): number {
    return this.callSockets.size;
  }

  /** Listens on `host:port`; resolves with the address (`http(s)://host:port`). */
  async listen(host: string, port: number): Promise<string> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    this.ready = true;
    const a = this.server.address() as AddressInfo;
    const h = a.family === 'IPv6' ? `[${a.address}]` : a.address;
    return `${this.o.tls ? 'https' : 'http'}://${h}:${a.port}`;
  }

  /**
   * Stops listening and cuts every connection (streams included); sandboxes keep running.
   * The terminals end with this process (`TerminalHost.closeAll`, by the caller).
   */
  async close(): Promise<void> {
    this.drain();
    clearInterval(this.heartbeat);
    const closed = new Promise<void>((r) => this.server.close(() => r()));
    for (const ws of [...this.wss.clients, ...this.callsWss.clients]) ws.terminate();
    for (const s of this.sockets) s.destroy();
    await closed;
  }

  private authorized(req: IncomingMessage): boolean {
    return bearerMatches(req.headers.authorization, this.o.token);
  }

  /** Shutdown began: `/readyz` answers 503 from now on (the kubelet takes the runner out of its Service). */
  drain(): void {
    this.ready = false;
  }

  private async request(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const probe = (req.url ?? '/').split('?')[0];
    if (PROBES.has(probe) && (req.method === 'GET' || req.method === 'HEAD')) {
      req.resume();
      if (probe === '/readyz' && !this.ready) return reply(res, 503, errorBody('unavailable', 'Not ready'));
      return reply(res, 200, { status: 'ok' });
    }
    if (!this.authorized(req)) {
      req.resume();
      return reply(res, 401, errorBody('unauthorized', 'The runner token is missing or wrong'));
    }
    const path = (req.url ?? '/').split('?')[0];
    const method = path.startsWith(`${RUNNER_PREFIX}/`) ? path.slice(RUNNER_PREFIX.length + 1) : '';
    try {
      if (method === 'health' && req.method === 'GET') {
        const d = this.o.driver;
        const [capacity, sandboxes] = await Promise.all([d.capacity(), d.list()]);
        const body: RunnerHealth = {
          node: this.o.nodeName,
          capacity,
          warmPool: d.warmPool ? d.warmPool() : {},
          sandboxes: sandboxes.filter((s) => s.state !== 'stopped').length,
          ...(d.isolations ? { isolations: d.isolations() } : {}),
        };
        return reply(res, 200, body);
      }
      if (req.method !== 'POST') {
        req.resume();
        return reply(res, 404, errorBody('not_found', `No runner endpoint ${req.method} ${path}`));
      }
      if (method === 'files.write') return await serveFileWrite(this.o.driver, req, res);
      if (method === 'files.unpack') return await serveFileUnpack(this.o.driver, req, res);
      if (method === 'processes.stdin') return await serveProcessStdin(this.o.processes, req, res);
      const args = await readArgs(req);
      if (method === 'files.read') return await serveFileRead(this.o.driver, args, res);
      if (method === 'files.watch') return await serveFileWatch(this.o.driver, args, res);
      if (method === 'files.pack') return await serveFilePack(this.o.driver, args, res);
      if (!(UNARY_METHODS as readonly string[]).includes(method))
        return reply(res, 404, errorBody('not_found', `No runner endpoint ${req.method} ${path}`));
      const result = await this.unary(method, args);
      return reply(res, 200, { result: result ?? null });
    } catch (e) {
      const body = this.failure(e, method);
      if (res.headersSent) res.destroy();
      else reply(res, body.code, body);
    }
  }

  /** The error body of a failed call; a failure that is no `SandboxdError` (`internal`) is logged. */
  private failure(e: unknown, method: string): ErrorBody {
    const body = toErrorBody(e);
    if (body.kind === 'internal') this.o.log.warn({ err: e, method }, 'runner: a driver call failed');
    return body;
  }

  /** Keeps `ws` in `set` while it is open and under the heartbeat (cut once it misses a pong). */
  private watched(ws: WebSocket, set: Set<WebSocket>): void {
    set.add(ws);
    this.alive.add(ws);
    ws.on('pong', () => this.alive.add(ws));
    ws.on('close', () => set.delete(ws));
  }

  private async unary(method: string, args: unknown[]): Promise<unknown> {
    const d = this.o.driver;
    if (method === 'recover') {
      const { background: _, ...report } = this.recovered;
      return report;
    }
    if (method === 'injections') return this.injections.take(args[0] as string | null);
    if (method.startsWith('files.')) {
      const f = d.files as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;
      return f[method.slice(6)].apply(d.files, args);
    }
    if (method.startsWith('terminals.')) return serveTerminalCall(this.o.terminals, method.slice(10), args);
    if (method.startsWith('processes.')) return serveProcessCall(this.o.processes, method.slice(10), args);
    if (method.startsWith('images.')) {
      if (!d.images) throw new SandboxdError('unsupported', 'This runner has no image store');
      const [ref] = args as [string];
      return method === 'images.pull' ? d.images.pull(ref) : d.images.build(ref);
    }
    if (method === 'fork' && !d.fork) throw new SandboxdError('unsupported', 'This runner cannot fork sandboxes');
    const fn = (d as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>)[method];
    const result = await fn.apply(d, args);
    // A sandbox without processes has no terminal left: end them here too, whichever replica asked.
    if (ENDS_SANDBOX.has(method) && typeof args[0] === 'string') {
      await this.o.terminals.closeSandbox(args[0], 'sandbox stopped');
      await this.o.processes.closeSandbox(args[0]);
    }
    return result;
  }

  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    if (!this.authorized(req)) {
      socket.end(rawErrorResponse(errorBody('unauthorized', 'The runner token is missing or wrong')));
      return;
    }
    const url = new URL(req.url ?? '/', 'http://runner');
    const kind = url.pathname.slice(RUNNER_PREFIX.length + 1);
    if (url.pathname.startsWith(RUNNER_PREFIX) && (kind === 'spawn' || kind === 'tty')) {
      this.wss.handleUpgrade(req, socket, head, (ws) => serveStreamSocket(this.o.driver, kind, ws, this.o.log));
      return;
    }
    if (url.pathname === `${RUNNER_PREFIX}/terminal`) {
      void this.upgradeTerminal(url, req, socket, head);
      return;
    }
    if (url.pathname === `${RUNNER_PREFIX}/process`) {
      void this.upgradeProcess(url, req, socket, head);
      return;
    }
    if (url.pathname === `${RUNNER_PREFIX}/tunnel`) {
      void serveTunnel(this.o.driver, url, socket, head);
      return;
    }
    if (url.pathname === `${RUNNER_PREFIX}/calls`) {
      this.callsWss.handleUpgrade(req, socket, head, (ws) => this.serveCalls(ws));
      return;
    }
    socket.end(rawErrorResponse(errorBody('not_found', `No runner endpoint ${url.pathname}`)));
  }

  /**
   * A calls socket: each text message `{id, method, args}` is one unary call, answered by
   * `{id, result}` or `{id, error}` when it ends (calls run concurrently; answers come in the
   * order they end).
   */
  private serveCalls(ws: WebSocket): void {
    this.watched(ws, this.callSockets);
    ws.on('error', () => undefined); // followed by close
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      let id: unknown = null;
      let method = '';
      const answered = (async () => {
        let m: { id?: unknown; method?: unknown; args?: unknown };
        try {
          m = JSON.parse(isBinary ? '' : data.toString('utf8'));
        } catch {
          throw new SandboxdError('validation', 'A call is a JSON text message {"id", "method", "args"}');
        }
        id = m.id;
        if (typeof m.id !== 'number' || typeof m.method !== 'string' || !Array.isArray(m.args))
          throw new SandboxdError('validation', 'A call is {"id": number, "method": string, "args": [...]}');
        method = m.method;
        if (!(UNARY_METHODS as readonly string[]).includes(method))
          throw new SandboxdError('not_found', `No runner call ${method}`);
        return { id, result: (await this.unary(method, fromWireArgs(m.args))) ?? null };
      })();
      answered.then(
        (answer) => {
          if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(answer));
        },
        (e: unknown) => {
          const error = this.failure(e, method);
          if (ws.readyState === ws.OPEN) ws.send(JSON.stringify({ id, error }));
        },
      );
    });
  }

  /** A client of a terminal: refused with 404 before the handshake when the terminal is not held here. */
  private async upgradeTerminal(url: URL, req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const target = terminalTarget(url);
    const held = target && (await this.o.terminals.get(target.sandboxId, target.terminalId));
    if (!target || !held) {
      socket.end(rawErrorResponse(errorBody('not_found', 'Terminal not found')));
      return;
    }
    // The terminal's share of clients: refused like a missing terminal, with the limit's error.
    const full = refusal(() => this.o.terminals.admitClient(target.sandboxId, target.terminalId));
    if (full) {
      socket.end(rawErrorResponse(full));
      return;
    }
    this.wss.handleUpgrade(req, socket, head, (ws) => {
      this.watched(ws, this.terminalSockets);
      serveTerminalSocket(this.o.terminals, target, ws, this.o.log);
    });
  }

  /** A reader of a tracked process: refused with 404 before the handshake when the process is not tracked here. */
  private async upgradeProcess(url: URL, req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const target = processTarget(url);
    const held = target && (await this.o.processes.get(target.sandboxId, target.pid));
    if (!target || !held) {
      const pid = target?.pid ?? url.searchParams.get('pid');
      socket.end(rawErrorResponse(errorBody('not_found', `No process ${pid} started through the API in this sandbox`)));
      return;
    }
    // The readers' shares of the process and its sandbox: refused before the handshake.
    const processes = this.o.processes as Partial<Pick<ProcessHost, 'admitReader'>>;
    const full = refusal(() => processes.admitReader?.(target.sandboxId, target.pid, target));
    if (full) {
      socket.end(rawErrorResponse(full));
      return;
    }
    this.wss.handleUpgrade(req, socket, head, (ws) => {
      this.watched(ws, this.processSockets);
      serveProcessSocket(this.o.processes, target, ws, this.o.log);
    });
  }

  /**
   * Resolves once every terminal socket has closed (their close frames answered by the api
   * replicas), or after `graceMs`: call after ending the terminals, before {@link close},
   * so the replicas read each client's `exit` and close code instead of a cut connection.
   */
  async drainTerminalSockets(graceMs = 1000): Promise<void> {
    const deadline = Date.now() + graceMs;
    while (this.terminalSockets.size && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  }

  private ping(): void {
    for (const ws of [...this.terminalSockets, ...this.processSockets, ...this.callSockets]) {
      if (!this.alive.has(ws)) {
        ws.terminate();
        continue;
      }
      this.alive.delete(ws);
      ws.ping();
    }
  }
}

/** The `args` array of a unary call's JSON body. Throws `validation`/`payload_too_large`. */
async function readArgs(req: IncomingMessage): Promise<unknown[]> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > MAX_JSON_BYTES) throw new SandboxdError('payload_too_large', 'The call is over 4 MiB');
    chunks.push(c);
  }
  let body: { args?: unknown };
  try {
    body = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}');
  } catch {
    throw new SandboxdError('validation', 'The call body is not JSON');
  }
  if (!Array.isArray(body.args)) throw new SandboxdError('validation', 'The call body must be {"args": [...]}');
  return fromWireArgs(body.args);
}

function reply(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

/** The error body of a `rate_limited` that `check` throws, or null (other errors are the attach's to report). */
function refusal(check: () => void): ErrorBody | null {
  try {
    check();
    return null;
  } catch (e) {
    if (e instanceof SandboxdError && e.kind === 'rate_limited') return e.toBody();
    return null;
  }
}
