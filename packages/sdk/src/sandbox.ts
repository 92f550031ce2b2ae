/**
 * The Sandbox class: create, find, run commands in, extend, pause, stop, snapshot and delete
 * sandboxes.
 */
import {
  CodeInterpreter,
  type CodeContext,
  type CreateCodeContextOptions,
  type Execution,
  type RunCodeOptions,
} from './code.js';
import type { ClientOptions } from './config.js';
import { Files } from './files.js';
import { createSnapshot, listQueryParams, runBody, type SnapshotOptions } from './lifecycle.js';
import { HttpClient } from './http.js';
import type { ProcessHandle } from './process-handle.js';
import { hasHandlers, Processes, wireExecOptions, type ExecCallOptions } from './processes.js';
import { Terminals } from './terminal.js';
import type {
  Egress,
  ExecResult,
  ForkParams,
  PauseParams,
  SandboxCreateParams,
  SandboxInfo,
  SandboxListPage,
  SandboxListQuery,
  SandboxNetwork,
  SandboxRunParams,
  SnapshotInfo,
} from './types.js';

/** Where a static method sends its request: client options, or an existing client (anything with `http`). */
export type Connection = ClientOptions | { readonly http: HttpClient };

/** The HTTP client of a connection. */
export function httpOf(c: Connection | undefined): HttpClient {
  return c && 'http' in c && c.http instanceof HttpClient ? c.http : new HttpClient(c as ClientOptions | undefined);
}

export type { ExecCallOptions };

/** Exec options that make `exec` resolve with a {@link ProcessHandle}: `background` or `stdin`. */
export type ExecProcessOptions = ExecCallOptions & ({ background: true } | { stdin: true });
/** Exec options that make `exec` wait for the command and resolve with its {@link ExecResult}. */
export type ExecWaitOptions = ExecCallOptions & { background?: false; stdin?: false };

/** Extra time the HTTP request of a foreground exec gets beyond the command's own timeout. */
const EXEC_GRACE_MS = 15_000;
const DEFAULT_EXEC_TIMEOUT_MS = 60_000;
/** Page size and page bound of {@link Sandbox.list}. */
const LIST_PAGE = 1000;
const MAX_PAGES = 100;
/** A sandbox. Its fields are the server's description as of the last call that returned it. */
export class Sandbox {
  /** The server's description; `refresh()` updates it. */
  info: SandboxInfo;
  /** Interactive terminals of this sandbox. */
  readonly terminals: Terminals;
  /** The sandbox's files: read, write, list, watch. */
  readonly files: Files;
  /** Processes started through the API: list, connect, signal, stdin. */
  readonly processes: Processes;
  /** The code interpreter (sandboxes of `local/code-interpreter`); `runCode` and the context methods use it. */
  readonly code: CodeInterpreter;

  private constructor(
    info: SandboxInfo,
    readonly http: HttpClient,
  ) {
    this.info = info;
    this.terminals = new Terminals(http, info.id);
    this.files = new Files(http, info.id);
    this.processes = new Processes(http, info.id);
    this.code = new CodeInterpreter(http, info.id);
  }

  /** Wraps a description returned by the server (e.g. from a raw list). */
  static from(info: SandboxInfo, connection?: Connection): Sandbox {
    return new Sandbox(info, httpOf(connection));
  }

  /**
   * Creates a sandbox and resolves once a command can run in it. Never retried: one call
   * starts at most one sandbox. Throws ValidationError, InsufficientTokensError,
   * ConcurrencyLimitError, TemplateNotFoundError, ConflictError (volume size mismatch),
   * CapacityError (the host has no room now: `details.resource` names what is full, retry
   * after `retryAfterMs`).
   */
  static async create(params: SandboxCreateParams, connection?: Connection): Promise<Sandbox> {
    const http = httpOf(connection);
    const body = Object.fromEntries(Object.entries(params).filter(([, v]) => v !== undefined));
    const r = await http.request<{ sandbox: SandboxInfo }>('POST', '/api/v1/sandboxes', { json: body });
    return new Sandbox(r.sandbox, http);
  }

  /** One sandbox by id; throws NotFoundError. */
  static async get(id: string, connection?: Connection): Promise<Sandbox> {
    const http = httpOf(connection);
    const r = await http.request<{ sandbox: SandboxInfo }>('GET', `/api/v1/sandboxes/${encodeURIComponent(id)}`);
    return new Sandbox(r.sandbox, http);
  }

  /** One page of sandboxes, newest first; pass `nextCursor` back as `cursor` for the next. */
  static async listPage(
    query: SandboxListQuery = {},
    connection?: Connection,
  ): Promise<{ sandboxes: Sandbox[]; nextCursor?: string }> {
    const http = httpOf(connection);
    const page = await http.request<SandboxListPage>('GET', '/api/v1/sandboxes', { query: listQueryParams(query) });
    return { sandboxes: page.sandboxes.map((s) => new Sandbox(s, http)), nextCursor: page.nextCursor };
  }

  /** Deletes sandbox `id` without fetching it first; throws NotFoundError. See {@link Sandbox.prototype.delete}. */
  static async delete(id: string, connection?: Connection): Promise<void> {
    await httpOf(connection).request('DELETE', `/api/v1/sandboxes/${encodeURIComponent(id)}`);
  }

  /**
   * Every sandbox of the account, newest first, following pages (at most 100,000); `state`
   * keeps one state, `metadata` the sandboxes whose metadata has every pair given.
   */
  static async list(
    query: Pick<SandboxListQuery, 'state' | 'metadata'> = {},
    connection?: Connection,
  ): Promise<Sandbox[]> {
    const http = httpOf(connection);
    const out: Sandbox[] = [];
    let cursor: string | undefined;
    for (let i = 0; i < MAX_PAGES; i++) {
      const page = await Sandbox.listPage(
        { state: query.state, metadata: query.metadata, limit: LIST_PAGE, cursor },
        { http },
      );
      out.push(...page.sandboxes);
      cursor = page.nextCursor;
      if (!cursor) break;
    }
    return out;
  }

  get id(): string {
    return this.info.id;
  }
  get name(): string {
    return this.info.name;
  }
  /** `started`, `paused`, `stopped` or `error`, as of the last call that returned the sandbox. */
  get state(): SandboxInfo['state'] {
    return this.info.state;
  }
  /** The caller's labels given at create. */
  get metadata(): SandboxInfo['metadata'] {
    return this.info.metadata;
  }
  /** What happens at `stopAt`: `stop` or `pause`. */
  get onTimeout(): SandboxInfo['onTimeout'] {
    return this.info.onTimeout;
  }
  /** Its isolation tier: `container` or `gvisor`. */
  get isolation(): SandboxInfo['isolation'] {
    return this.info.isolation;
  }
  /** Paused: where its memory is kept, `ram` or `disk` (gVisor); undefined otherwise. */
  get pausedMemory(): SandboxInfo['pausedMemory'] {
    return this.info.pausedMemory;
  }
  /** Paused, stopped or error: when the sandbox and what it kept are deleted. */
  get expiresAt(): Date | undefined {
    return this.info.expiresAt === undefined ? undefined : new Date(this.info.expiresAt);
  }
  get image(): string {
    return this.info.image;
  }
  get createdAt(): Date {
    return new Date(this.info.createdAt);
  }
  /** Started: when the sandbox is due to stop (or pause). Paused or stopped: when it did. */
  get stopAt(): Date {
    return new Date(this.info.stopAt);
  }

  /** Reloads the description from the server; throws NotFoundError once deleted. */
  async refresh(): Promise<SandboxInfo> {
    const r = await this.http.request<{ sandbox: SandboxInfo }>(
      'GET',
      `/api/v1/sandboxes/${encodeURIComponent(this.id)}`,
    );
    this.info = r.sandbox;
    return this.info;
  }

  /**
   * Runs `/bin/sh -c command` with the sandbox env (merged with `env`), as `user`, in `cwd`.
   *
   * - Plain: waits for the command (up to `timeoutMs`, default 60000; exit code 124 on
   *   expiry; the HTTP request waits that long plus a grace period) and resolves with
   *   `{stdout, stderr, exitCode, success}`, each stream cut at 1 MiB (`truncated`).
   * - With `onStdout`/`onStderr`/`onOutput`: the output is streamed, the callbacks get each
   *   chunk as it is written, and the same result comes when it exits (no time limit unless
   *   `timeoutMs`; a dropped connection is resumed without losing or repeating output).
   * - With `background: true` or `stdin: true`: resolves with a {@link ProcessHandle} as soon
   *   as the process runs (`pid`, `wait()`, `kill()`, `sendStdin()`, `closeStdin()`).
   *
   * A failing command is not an error: check `exitCode`/`success`. Throws ConflictError
   * when the sandbox is not started, NotFoundError, ValidationError.
   */
  exec(command: string, opts: ExecProcessOptions): Promise<ProcessHandle>;
  exec(command: string, opts?: ExecWaitOptions): Promise<ExecResult>;
  exec(command: string, opts?: ExecCallOptions): Promise<ExecResult | ProcessHandle>;
  async exec(command: string, opts: ExecCallOptions = {}): Promise<ExecResult | ProcessHandle> {
    if (opts.background || opts.stdin) return this.processes.start(command, opts);
    if (hasHandlers(opts)) return (await this.processes.start(command, opts)).wait();
    const requestMs = Math.max(this.http.config.timeoutMs, (opts.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS) + EXEC_GRACE_MS);
    return this.http.request<ExecResult>('POST', `/api/v1/sandboxes/${encodeURIComponent(this.id)}/exec`, {
      json: { command, options: wireExecOptions(opts) },
      timeoutMs: requestMs,
      signal: opts.signal,
    });
  }

  /**
   * Runs `code` in a stateful kernel of the sandbox's code interpreter (the sandbox must be
   * made from `local/code-interpreter`): Python by default, or `language`, or in `context`.
   * Resolves once the run ends with its {@link Execution}: `results` (each with every
   * representation, `formats()`), `logs`, `error` (a code error is not a rejection;
   * `TimeoutError` past `timeoutMs`), `executionCount`, `text`. Callbacks get events as they
   * come; `signal` interrupts the run. Throws ValidationError (unknown language),
   * NotFoundError (unknown context), NoCodeInterpreterError (not that image), ConflictError
   * (not started).
   */
  runCode(code: string, opts?: RunCodeOptions): Promise<Execution> {
    return this.code.run(code, opts);
  }

  /** Starts a new code context (a kernel of its own): `{language?, cwd?}`. */
  createCodeContext(opts?: CreateCodeContextOptions): Promise<CodeContext> {
    return this.code.createContext(opts);
  }

  /** The code contexts of the sandbox. */
  listCodeContexts(): Promise<CodeContext[]> {
    return this.code.listContexts();
  }

  /** Restarts a context's kernel: its state is lost, its id stays. */
  restartCodeContext(context: CodeContext | string): Promise<void> {
    return this.code.restartContext(context);
  }

  /** Ends a code context and its kernel. */
  removeCodeContext(context: CodeContext | string): Promise<void> {
    return this.code.removeContext(context);
  }

  /**
   * Sets the sandbox to stop `ms` from now (0 stops it at once). Resolves with the new
   * stop time. Throws ValidationError past the plan's lifetime (the message names the
   * largest value allowed), InsufficientTokensError, ConflictError when stopped.
   */
  async setTimeout(ms: number): Promise<Date> {
    const r = await this.http.request<{ id: string; stopAt: string }>(
      'PATCH',
      `/api/v1/sandboxes/${encodeURIComponent(this.id)}/timeout`,
      { json: { timeoutMs: ms } },
    );
    this.info = { ...this.info, stopAt: r.stopAt };
    return new Date(r.stopAt);
  }

  /**
   * Replaces what the sandbox may reach outside (`'none'`, `'internet'` or `{allow: [...]}`);
   * new connections follow it once this resolves (open ones stay). A stopped sandbox gets it
   * at its next start. Resolves with the network settings as the server keeps them (rules
   * canonical). Throws ValidationError naming the bad rule (`details[].path`,
   * `/egress/allow/<i>`), QuotaExceededError (beyond the plan), ConflictError, NotFoundError.
   *
   * Pass `{egress, secrets}` to replace the secret injection rules too (docs/secrets.md):
   * without `secrets` the rules stay as they are (and must still fit the new egress); with
   * `secrets: []` they are removed. A rule naming an unknown secret, or a domain the egress
   * does not allow, is a ValidationError naming it.
   *
   * ```ts
   * await sandbox.setNetwork({
   *   egress: { allow: ['api.openai.com'] },
   *   secrets: [{ secret: 'OPENAI', domains: ['api.openai.com'], header: 'Authorization', format: 'Bearer {value}' }],
   * });
   * ```
   */
  async setNetwork(network: Egress | SandboxNetwork): Promise<SandboxNetwork> {
    const json = typeof network === 'object' && 'egress' in network ? network : { egress: network };
    const r = await this.http.request<{ id: string; network: SandboxNetwork }>(
      'PATCH',
      `/api/v1/sandboxes/${encodeURIComponent(this.id)}/network`,
      { json },
    );
    this.info = { ...this.info, network: r.network };
    return r.network;
  }

  /** POSTs a lifecycle action and takes the sandbox the server answers with. */
  private async transition(action: string, json?: unknown): Promise<this> {
    const r = await this.http.request<{ sandbox: SandboxInfo }>(
      'POST',
      `/api/v1/sandboxes/${encodeURIComponent(this.id)}/${action}`,
      json === undefined ? {} : { json },
    );
    this.info = r.sandbox;
    return this;
  }

  /**
   * Freezes a started sandbox: its processes and memory are kept, nothing runs, and it no
   * longer counts against the plan's concurrency. Resolves with this sandbox, now `paused`.
   * Throws ConflictError (not started; `details.state` names the state), QuotaExceededError
   * (the plan's `maxPaused` reached). `{memory: 'disk'}` (gVisor sandboxes) checkpoints it to
   * disk instead: no RAM held, and `resume` restores every process where it was
   * (ValidationError on a container sandbox).
   */
  pause(opts: PauseParams = {}): Promise<this> {
    return this.transition('pause', opts.memory === undefined ? undefined : { memory: opts.memory });
  }

  /**
   * Makes `count` (1 to 10, default 1) new sandboxes from this started gVisor sandbox: its
   * processes, memory and files, each with its own address and writable layer, named
   * `<name>-fork-<n>`. This one keeps running. Throws ValidationError (not gVisor, or count),
   * ConflictError (not started, or volumes), ConcurrencyLimitError, InsufficientTokensError
   * (checked for all `count`: none is made then), CapacityError.
   */
  async fork(opts: ForkParams = {}): Promise<Sandbox[]> {
    const r = await this.http.request<{ sandboxes: SandboxInfo[] }>(
      'POST',
      `/api/v1/sandboxes/${encodeURIComponent(this.id)}/fork`,
      { json: opts.count === undefined ? {} : { count: opts.count } },
    );
    return r.sandboxes.map((s) => new Sandbox(s, this.http));
  }

  /**
   * Thaws a paused sandbox: its processes go on where they were. `timeoutMs` is the new
   * lifetime from now (default 10 minutes). Throws ConflictError (not paused),
   * InsufficientTokensError, ConcurrencyLimitError, ValidationError.
   */
  resume(opts: SandboxRunParams = {}): Promise<this> {
    return this.transition('resume', runBody(opts));
  }

  /**
   * Stops a started or paused sandbox: its processes end, its root layer (files outside
   * volumes) is kept for {@link start}. Throws ConflictError (already stopped, or error).
   */
  stop(): Promise<this> {
    return this.transition('stop');
  }

  /**
   * Starts a stopped sandbox again from its kept root layer (a fresh boot: no processes
   * survive a stop). `timeoutMs` as in {@link resume}. Throws ConflictError (not stopped),
   * InsufficientTokensError, ConcurrencyLimitError, CapacityError.
   */
  start(opts: SandboxRunParams = {}): Promise<this> {
    return this.transition('start', runBody(opts));
  }

  /**
   * Saves the sandbox's root layer as the account's image `snapshots/<name>` (pass that as
   * `image` to create). Works in any state but `error`. Throws ValidationError (bad name),
   * ConflictError (the name is taken, or the state), QuotaExceededError (`snapshotBytes`).
   */
  snapshot(name: string, opts: SnapshotOptions = {}): Promise<SnapshotInfo> {
    return createSnapshot(this.http, this.id, name, opts);
  }

  /** Kills the sandbox and removes its record (named volumes are kept). Throws NotFoundError. */
  async delete(): Promise<void> {
    await Sandbox.delete(this.id, this);
  }

  /**
   * The public address of `port` in the sandbox, from `publicAccessUrlTemplate`, with the
   * scheme of the API URL (`http://8080-sbx_....sandbox.localhost:8080`).
   */
  publicUrl(port: number): string {
    if (!Number.isInteger(port) || port < 1 || port > 65535)
      throw new RangeError(`port must be an integer from 1 to 65535 (got ${port})`);
    const scheme = new URL(this.http.config.apiUrl).protocol;
    return `${scheme}//${this.info.publicAccessUrlTemplate.replace('{{PORT}}', String(port))}`;
  }

  /** The description as plain JSON. */
  toJSON(): SandboxInfo {
    return this.info;
  }
}
