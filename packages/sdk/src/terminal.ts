/**
 * Interactive terminals (PTY sessions) of a sandbox over the terminal WebSocket: output in
 * binary frames, `ready`/`exit` control messages in text frames; input is sent as binary
 * frames and `{"type":"resize",cols,rows}` as text.
 */
import { ConnectionError, errorFromResponse, NotFoundError } from './errors.js';
import type { HttpClient } from './http.js';
import type { TerminalCreateParams, TerminalExit, TerminalInfo, TerminalListItem } from './types.js';
import { openWebSocket, type WebSocketLike } from './websocket.js';

/** Output kept for the first `onData` listener, at most this many bytes (older output is dropped). */
const MAX_PENDING_BYTES = 1 << 20;
const encoder = new TextEncoder();

function toBytes(data: unknown): Uint8Array | null {
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (typeof data === 'string') return encoder.encode(data);
  return null;
}

/** Options of connecting to a terminal. */
export interface TerminalConnectOptions {
  /** Receive the last 64 KiB of earlier output first. Default false. */
  replay?: boolean;
}

/** A connected terminal. Create one with `sandbox.terminals.create()` or `connect()`. */
export class Terminal {
  /** Shell name and pid inside the sandbox, from the `ready` message (pid 0 if it had already exited). */
  shell = '';
  pid = 0;
  private ws: WebSocketLike | undefined;
  private readonly dataListeners = new Set<(chunk: Uint8Array) => void>();
  private readonly exitListeners = new Set<(exit: TerminalExit) => void>();
  private pending: Uint8Array[] = [];
  private pendingBytes = 0;
  private exitInfo: TerminalExit | undefined;
  private lost: Error | undefined;
  private readonly settled: Promise<TerminalExit>;
  private settle!: { resolve: (e: TerminalExit) => void; reject: (e: Error) => void };
  private started: { resolve: () => void; reject: (e: Error) => void } | undefined;

  private constructor(
    private readonly http: HttpClient,
    readonly sandboxId: string,
    readonly id: string,
  ) {
    this.settled = new Promise((resolve, reject) => (this.settle = { resolve, reject }));
    this.settled.catch(() => {}); // only `wait()` callers see the rejection
  }

  /**
   * Connects to terminal `terminalId` of sandbox `sandboxId`; resolves after the `ready`
   * message (or `exit`, for a terminal whose shell has ended). Throws NotFoundError,
   * ConflictError (sandbox not started), AuthenticationError, ConnectionError.
   */
  static async connect(
    http: HttpClient,
    sandboxId: string,
    terminalId: string,
    opts: TerminalConnectOptions = {},
  ): Promise<Terminal> {
    const t = new Terminal(http, sandboxId, terminalId);
    await t.open(opts);
    return t;
  }

  private async open(opts: TerminalConnectOptions): Promise<void> {
    const path = `/api/v1/sandboxes/${encodeURIComponent(this.sandboxId)}/terminals/${encodeURIComponent(this.id)}/ws`;
    const url = this.http.url(path, { replay: opts.replay ? '1' : undefined }).replace(/^http/i, 'ws');
    const started = new Promise<void>((resolve, reject) => (this.started = { resolve, reject }));
    started.catch(() => {}); // a socket refused before open rejects it unawaited
    const timeoutMs = this.http.config.timeoutMs;
    const timer = setTimeout(
      () =>
        this.started?.reject(
          new ConnectionError(`Terminal ${this.id} sent no ready message within ${timeoutMs} ms`, {
            status: 0,
            kind: 'timeout',
          }),
        ),
      timeoutMs,
    );
    try {
      this.ws = await openWebSocket(url, {
        headers: this.http.authHeaders(),
        WebSocket: this.http.config.WebSocket,
        onMessage: (d) => this.onMessage(d),
        onClose: (code, reason) => this.onClose(code, reason),
        onRefused: (status, body) => {
          let parsed: unknown = body;
          try {
            parsed = JSON.parse(body);
          } catch {
            /* not JSON */
          }
          return errorFromResponse(status, parsed);
        },
        onFailed: (why) =>
          new ConnectionError(`Cannot connect to terminal ${this.id}: ${why}`, { status: 0, kind: 'connection' }),
      });
      await started;
    } catch (e) {
      this.ws?.close();
      throw e;
    } finally {
      clearTimeout(timer);
    }
  }

  private onMessage(data: unknown): void {
    if (typeof data === 'string' && data.startsWith('{')) {
      let msg: { type?: unknown; pid?: unknown; shell?: unknown; exitCode?: unknown; signal?: unknown } | undefined;
      try {
        msg = JSON.parse(data);
      } catch {
        msg = undefined;
      }
      if (msg?.type === 'ready') {
        this.pid = Number(msg.pid) || 0;
        this.shell = String(msg.shell ?? '');
        this.started?.resolve();
        return;
      }
      if (msg?.type === 'exit') {
        this.exited({ exitCode: Number(msg.exitCode), signal: typeof msg.signal === 'string' ? msg.signal : null });
        return;
      }
    }
    const bytes = toBytes(data);
    if (!bytes || bytes.length === 0) return;
    if (this.dataListeners.size === 0) {
      this.pending.push(bytes);
      this.pendingBytes += bytes.length;
      while (this.pendingBytes > MAX_PENDING_BYTES && this.pending.length > 1)
        this.pendingBytes -= this.pending.shift()!.length;
      return;
    }
    for (const fn of this.dataListeners) fn(bytes);
  }

  private exited(exit: TerminalExit): void {
    if (this.exitInfo) return;
    this.exitInfo = exit;
    this.started?.resolve();
    for (const fn of this.exitListeners) fn(exit);
    this.settle.resolve(exit);
  }

  private onClose(code: number, reason: string): void {
    if (this.exitInfo) return;
    this.lost = new ConnectionError(
      `Terminal ${this.id} connection closed (code ${code}${reason ? `: ${reason}` : ''})`,
      { status: 0, kind: 'connection' },
    );
    this.started?.reject(this.lost);
    this.settle.reject(this.lost);
  }

  /** Sends keyboard input (strings as UTF-8), always as a binary frame. Throws ConnectionError once exited or closed. */
  write(data: string | Uint8Array): void {
    this.socket().send(typeof data === 'string' ? encoder.encode(data) : data);
  }

  /** Resizes the PTY to `cols` x `rows` (integers >= 1). */
  resize(cols: number, rows: number): void {
    if (!Number.isInteger(cols) || !Number.isInteger(rows) || cols < 1 || rows < 1)
      throw new RangeError('cols and rows must be integers >= 1');
    this.socket().send(JSON.stringify({ type: 'resize', cols, rows }));
  }

  /** Calls `fn` with each output chunk (raw bytes, ANSI codes included). Output that came before the first listener is delivered to it at once. Returns an unsubscribe function. */
  onData(fn: (chunk: Uint8Array) => void): () => void {
    this.dataListeners.add(fn);
    const backlog = this.pending;
    this.pending = [];
    this.pendingBytes = 0;
    for (const b of backlog) fn(b);
    return () => this.dataListeners.delete(fn);
  }

  /** Calls `fn` once when the shell exits (at once if it already has). Returns an unsubscribe function. */
  onExit(fn: (exit: TerminalExit) => void): () => void {
    if (this.exitInfo) {
      const e = this.exitInfo;
      queueMicrotask(() => fn(e));
      return () => {};
    }
    this.exitListeners.add(fn);
    return () => this.exitListeners.delete(fn);
  }

  /** Resolves with the shell's exit; rejects with ConnectionError if the connection ends first. */
  wait(): Promise<TerminalExit> {
    return this.settled;
  }

  /** The exit of the shell, once known. */
  get exit(): TerminalExit | undefined {
    return this.exitInfo;
  }

  /** Closes this connection only; the shell keeps running and can be reconnected. */
  disconnect(): void {
    if (!this.exitInfo && !this.lost)
      this.lost = new ConnectionError(`Terminal ${this.id} was disconnected`, { status: 0, kind: 'connection' });
    this.ws?.close(1000);
  }

  /** Disconnects and deletes the terminal, ending its shell. A terminal already gone is fine. */
  async close(): Promise<void> {
    this.disconnect();
    await deleteTerminal(this.http, this.sandboxId, this.id);
  }

  private socket(): WebSocketLike {
    if (this.exitInfo)
      throw new ConnectionError(`Terminal ${this.id} has exited (exit code ${this.exitInfo.exitCode})`, {
        status: 0,
        kind: 'connection',
      });
    if (this.ws?.readyState !== 1)
      throw this.lost ?? new ConnectionError(`Terminal ${this.id} is not connected`, { status: 0, kind: 'connection' });
    return this.ws;
  }
}

async function deleteTerminal(http: HttpClient, sandboxId: string, id: string): Promise<void> {
  try {
    await http.request(
      'DELETE',
      `/api/v1/sandboxes/${encodeURIComponent(sandboxId)}/terminals/${encodeURIComponent(id)}`,
    );
  } catch (e) {
    if (!(e instanceof NotFoundError)) throw e;
  }
}

/** The terminals of one sandbox (`sandbox.terminals`). */
export class Terminals {
  constructor(
    private readonly http: HttpClient,
    private readonly sandboxId: string,
  ) {}

  private path(id?: string): string {
    const base = `/api/v1/sandboxes/${encodeURIComponent(this.sandboxId)}/terminals`;
    return id === undefined ? base : `${base}/${encodeURIComponent(id)}`;
  }

  /**
   * Starts a shell on a new PTY (defaults: bash if present else sh, 80x24) and connects to it.
   * Throws ValidationError (shell or cwd missing in the image), ConflictError (sandbox not
   * started), NotFoundError. If connecting fails the new terminal is deleted.
   */
  async create(params: TerminalCreateParams = {}, opts: TerminalConnectOptions = {}): Promise<Terminal> {
    const body: TerminalCreateParams = {};
    for (const k of ['shell', 'cwd', 'cols', 'rows'] as const)
      if (params[k] !== undefined) (body as Record<string, unknown>)[k] = params[k];
    const created = await this.http.request<{ terminal: { id: string } }>('POST', this.path(), { json: body });
    try {
      return await Terminal.connect(this.http, this.sandboxId, created.terminal.id, opts);
    } catch (e) {
      await deleteTerminal(this.http, this.sandboxId, created.terminal.id).catch(() => {});
      throw e;
    }
  }

  /** Connects to an existing terminal (several clients may share one). */
  connect(terminalId: string, opts: TerminalConnectOptions = {}): Promise<Terminal> {
    return Terminal.connect(this.http, this.sandboxId, terminalId, opts);
  }

  /** The sandbox's terminals. */
  async list(): Promise<TerminalListItem[]> {
    return (await this.http.request<{ terminals: TerminalListItem[] }>('GET', this.path())).terminals;
  }

  /** One terminal; throws NotFoundError. */
  get(terminalId: string): Promise<TerminalInfo> {
    return this.http.request<TerminalInfo>('GET', this.path(terminalId));
  }

  /** Deletes a terminal, ending its shell; throws NotFoundError. */
  async delete(terminalId: string): Promise<void> {
    await this.http.request('DELETE', this.path(terminalId));
  }
}
