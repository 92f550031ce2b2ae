/**
 * A sandbox's live processes (`sandbox.processes`) and the streamed and background forms of
 * `sandbox.exec`: `POST .../exec` with `options.stream: true` answers NDJSON (`start`,
 * output chunks, `exit`); `GET .../processes/{pid}/output` replays and follows a process's
 * output; stdin and signals have routes of their own (docs/files-and-processes.md).
 */
import { ConnectionError, ServerError } from './errors.js';
import type { HttpClient } from './http.js';
import { ndjsonLines } from './ndjson.js';
import { ProcessHandle, type ProcessOutputHandlers } from './process-handle.js';
import type { ExecOptions, ExecResult, ProcessInfo, ProcessSignal } from './types.js';

/** Options of `sandbox.exec`. */
export interface ExecCallOptions extends ProcessOutputHandlers {
  /**
   * Resolve with a {@link ProcessHandle} as soon as the process has started, instead of
   * waiting for it. Without output callbacks the handle holds no connection until you call
   * `wait()` or add a listener (then it replays the kept output and follows it).
   */
  background?: boolean;
  /** Give the process a stdin pipe fed by `sendStdin` (else it reads /dev/null); resolves with a handle. */
  stdin?: boolean;
  cwd?: string;
  /** Merged with the sandbox's env. */
  env?: ExecOptions['env'];
  /** Who the command runs as: `root`, a uid, `uid:gid` or a user name of the sandbox. Default: the image's user. */
  user?: string;
  /**
   * Kill the command after this long (exit code 124). A one-shot exec defaults to 60000; a
   * streamed one (callbacks, handles) has no limit unless this says.
   */
  timeoutMs?: number;
  /** A label (at most 256 bytes) shown in `processes.list()`. */
  tag?: string;
  /** Aborts the request, or stops following the output; the command keeps running in the sandbox (use `kill`). */
  signal?: AbortSignal;
}

/** Options of {@link Processes.connect}. */
export interface ProcessConnectOptions extends ProcessOutputHandlers {
  /** Stops following the output. */
  signal?: AbortSignal;
}

/** @internal One output connection: its NDJSON lines, and a way to drop it. */
export interface OutputConnection {
  lines: AsyncGenerator<unknown, void, undefined>;
  abort(): void;
}

/** The exec options that go on the wire (the rest are the SDK's). */
export function wireExecOptions(o: ExecCallOptions): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k of ['cwd', 'env', 'user', 'timeoutMs', 'tag'] as const) if (o[k] !== undefined) out[k] = o[k];
  if (o.stdin) out.stdin = true;
  return out;
}

/** True when `o` asks for output callbacks. */
export function hasHandlers(o: ProcessOutputHandlers): boolean {
  return Boolean(o.onStdout || o.onStderr || o.onOutput);
}

/** The processes of one sandbox. */
export class Processes {
  constructor(
    private readonly http: HttpClient,
    private readonly sandboxId: string,
  ) {}

  private base(): string {
    return `/api/v1/sandboxes/${encodeURIComponent(this.sandboxId)}`;
  }

  private path(pid: number, sub = ''): string {
    if (!Number.isSafeInteger(pid) || pid < 1) throw new RangeError(`pid must be a positive integer (got ${pid})`);
    return `${this.base()}/processes/${pid}${sub}`;
  }

  /** Processes started through the API (background and streamed), running and recently exited. */
  async list(): Promise<ProcessInfo[]> {
    return (await this.http.request<{ processes: ProcessInfo[] }>('GET', `${this.base()}/processes`)).processes;
  }

  /**
   * Attaches to a process: its kept output (the last 1 MiB) is replayed to the callbacks,
   * then live output until it exits; `wait()` gives the exit code. Throws NotFoundError for
   * an unknown pid, ConflictError when the sandbox is not started.
   */
  async connect(pid: number, opts: ProcessConnectOptions = {}): Promise<ProcessHandle> {
    const conn = await this.openOutput(pid, opts.signal);
    const handle = new ProcessHandle(this, pid, opts, opts.signal);
    handle.follow(conn);
    return handle;
  }

  /**
   * Starts `command` and resolves with its handle once it runs: what `exec` does with
   * `background` or `stdin`. With output callbacks the output is streamed from the start;
   * without, the process starts in the background and the handle connects on demand.
   */
  async start(command: string, opts: ExecCallOptions = {}): Promise<ProcessHandle> {
    const options = wireExecOptions(opts);
    if (!hasHandlers(opts)) {
      const r = await this.http.request<ExecResult>('POST', `${this.base()}/exec`, {
        json: { command, options: { ...options, background: true } },
        signal: opts.signal,
      });
      if (typeof r.pid !== 'number')
        throw new ServerError('The server started no process (no pid)', { status: 200, kind: 'internal' });
      return new ProcessHandle(this, r.pid, {}, opts.signal);
    }
    const ctrl = link(opts.signal);
    const res = await this.http.open('POST', `${this.base()}/exec`, {
      json: { command, options: { ...options, stream: true } },
      headers: { accept: 'application/x-ndjson' },
      signal: ctrl.signal,
    });
    const conn = await startOf(res, ctrl);
    const handle = new ProcessHandle(this, conn.pid, opts, opts.signal);
    handle.follow(conn);
    return handle;
  }

  /** @internal Opens `GET .../output?follow=true` and reads its `start` line. */
  async openOutput(pid: number, signal?: AbortSignal): Promise<OutputConnection> {
    const ctrl = link(signal);
    const res = await this.http.open('GET', this.path(pid, '/output'), {
      query: { follow: 'true' },
      headers: { accept: 'application/x-ndjson' },
      signal: ctrl.signal,
    });
    return startOf(res, ctrl);
  }

  /** Sends `signal` to the process's group. Throws NotFoundError, ConflictError (it has exited). */
  async signal(pid: number, signal: ProcessSignal): Promise<void> {
    await this.http.request('POST', this.path(pid, '/signal'), { json: { signal } });
  }

  /**
   * Appends `data` to the process's stdin; resolves once handed to the process. Await each
   * call before the next: two requests in flight may arrive in either order (a handle's
   * `sendStdin` queues them). Throws ConflictError (no stdin pipe, closed, or exited).
   */
  async sendStdin(pid: number, data: string | Uint8Array): Promise<void> {
    await this.http.request('POST', this.path(pid, '/stdin'), { body: data, contentType: 'application/octet-stream' });
  }

  /** Closes the process's stdin: it reads EOF. */
  async closeStdin(pid: number): Promise<void> {
    await this.http.request('POST', this.path(pid, '/stdin/close'));
  }
}

/** A controller of one connection, aborted with `signal` too. */
function link(signal?: AbortSignal): AbortController {
  const ctrl = new AbortController();
  if (signal?.aborted) ctrl.abort(signal.reason);
  else signal?.addEventListener('abort', () => ctrl.abort(signal.reason), { once: true });
  return ctrl;
}

/** Reads the `start` line of an NDJSON answer; the connection goes on from the next line. */
async function startOf(res: Response, ctrl: AbortController): Promise<OutputConnection & { pid: number }> {
  if (!res.body) throw new ServerError('Empty process output stream', { status: res.status, kind: 'internal' });
  const lines = ndjsonLines(res.body);
  const abort = () => ctrl.abort();
  let first: IteratorResult<unknown>;
  try {
    first = await lines.next();
  } catch (e) {
    abort();
    if (ctrl.signal.aborted) throw ctrl.signal.reason ?? e;
    throw e instanceof ServerError
      ? e
      : new ConnectionError('The process output stream broke before it started', {
          status: 0,
          kind: 'connection',
          cause: e,
        });
  }
  const line = first.value as { type?: unknown; pid?: unknown } | undefined;
  if (first.done || line?.type !== 'start' || typeof line.pid !== 'number') {
    abort();
    if (first.done)
      throw new ConnectionError('The process output stream ended before it started', { status: 0, kind: 'connection' });
    throw new ServerError('The process output stream did not begin with a start line', {
      status: res.status,
      kind: 'internal',
    });
  }
  return { pid: line.pid, lines, abort };
}
