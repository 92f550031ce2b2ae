/**
 * The code interpreter of a sandbox made from `local/code-interpreter`: `sandbox.runCode`
 * runs code in a stateful kernel (Python by default; JavaScript, TypeScript, bash, R) and
 * collects what it gave: printed output, results in every representation (text, html,
 * markdown, svg, png, jpeg, pdf, latex, json, javascript, a DataFrame's data, a chart), an
 * error with its traceback. Contexts are kernels of their own. The server relays the calls
 * to the sandbox's in-sandbox server (docs/code-interpreter.md).
 */
import { ConnectionError, ServerError } from './errors.js';
import type { HttpClient } from './http.js';
import { ndjsonLines } from './ndjson.js';

/** A kernel language: `python` (default), `javascript`, `typescript`, `bash`, `r`. */
export type CodeLanguage = 'python' | 'javascript' | 'typescript' | 'bash' | 'r' | (string & {});

/** A context: one kernel with its own state, language and working directory. */
export interface CodeContext {
  id: string;
  language: string;
  cwd: string;
}

/** An error the code raised (or `TimeoutError` when the run was interrupted at its timeout). */
export interface ExecutionError {
  /** The exception's class, e.g. `ZeroDivisionError`; `TimeoutError` for a run past its timeout. */
  name: string;
  value: string;
  /** The traceback as the kernel printed it (may hold ANSI colours). */
  traceback: string;
}

/** The formats of a result with a field of their own, in the order {@link Result.formats} lists them. */
const FORMATS = [
  'text',
  'html',
  'markdown',
  'svg',
  'png',
  'jpeg',
  'pdf',
  'latex',
  'json',
  'javascript',
  'data',
  'chart',
] as const;

/** A result's fields as the server sends them. */
export interface ResultData {
  text?: string;
  html?: string;
  markdown?: string;
  svg?: string;
  /** Base64 of the PNG. */
  png?: string;
  /** Base64 of the JPEG. */
  jpeg?: string;
  /** Base64 of the PDF. */
  pdf?: string;
  latex?: string;
  json?: unknown;
  javascript?: string;
  /** A pandas DataFrame's data (E2B's `e2b/data`). */
  data?: Record<string, unknown>;
  /** A matplotlib figure read as a chart: `type`, `title`, `elements`, axes (E2B's `e2b/chart`). */
  chart?: Record<string, unknown>;
  /** Representations with no field of their own, by MIME type. */
  extra?: Record<string, unknown>;
  isMainResult: boolean;
}

/**
 * One result of a run: the value of the cell's last expression (`isMainResult`) or a
 * display output (a plot shown, `display(...)`), with every representation the kernel gave.
 */
export class Result implements ResultData {
  declare readonly text?: string;
  declare readonly html?: string;
  declare readonly markdown?: string;
  declare readonly svg?: string;
  declare readonly png?: string;
  declare readonly jpeg?: string;
  declare readonly pdf?: string;
  declare readonly latex?: string;
  declare readonly json?: unknown;
  declare readonly javascript?: string;
  declare readonly data?: Record<string, unknown>;
  declare readonly chart?: Record<string, unknown>;
  declare readonly extra?: Record<string, unknown>;
  readonly isMainResult: boolean;

  // Fields are declared, not initialised: a result has only the formats it was given.
  constructor(d: ResultData) {
    for (const k of FORMATS) if (d[k] !== undefined && d[k] !== null) (this as Record<string, unknown>)[k] = d[k];
    if (d.extra && Object.keys(d.extra).length) this.extra = d.extra;
    this.isMainResult = d.isMainResult === true;
  }

  /** The representations this result has: `text`, `html`, `png`, ..., then the MIME types of `extra`. */
  formats(): string[] {
    const out: string[] = FORMATS.filter((k) => this[k] !== undefined);
    if (this.extra) out.push(...Object.keys(this.extra));
    return out;
  }

  toJSON(): ResultData {
    const o: Record<string, unknown> = {};
    for (const k of FORMATS) if (this[k] !== undefined) o[k] = this[k];
    if (this.extra) o.extra = this.extra;
    o.isMainResult = this.isMainResult;
    return o as unknown as ResultData;
  }
}

/** What a run gave. */
export class Execution {
  /** Results in the order they came: display outputs and the main result. */
  results: Result[] = [];
  /** Printed output, in chunks as they came. */
  logs: { stdout: string[]; stderr: string[] } = { stdout: [], stderr: [] };
  /** The error the code raised, or `TimeoutError`; undefined when it ran through. */
  error?: ExecutionError;
  /** The kernel's execution counter after this run (Jupyter kernels). */
  executionCount?: number;

  /** The text of the main result (the last expression's value), if any. */
  get text(): string | undefined {
    return this.results.find((r) => r.isMainResult)?.text;
  }

  toJSON() {
    return {
      results: this.results,
      logs: this.logs,
      error: this.error,
      executionCount: this.executionCount,
      text: this.text,
    };
  }
}

/** Options of `sandbox.runCode`. */
export interface RunCodeOptions {
  /** The language's default context (created on first use). Not with `context`. */
  language?: CodeLanguage;
  /** Run in this context (see `createCodeContext`). Not with `language`. */
  context?: CodeContext | string;
  /** Env vars for this run only, over the sandbox's own; undone after it. */
  envs?: Record<string, string>;
  /** Interrupt the run after this long (default 300000): `error.name` is then `TimeoutError`. */
  timeoutMs?: number;
  /** Each chunk of stdout as it is printed. */
  onStdout?: (text: string, timestamp: Date) => unknown;
  onStderr?: (text: string, timestamp: Date) => unknown;
  /** Each result as it comes (a plot shown mid-cell comes before the cell ends). */
  onResult?: (result: Result) => unknown;
  onError?: (error: ExecutionError) => unknown;
  /** Aborting it interrupts the run in the sandbox; the call rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** Options of `sandbox.createCodeContext`. */
export interface CreateCodeContextOptions {
  language?: CodeLanguage;
  /** Absolute; default `/home/user`. */
  cwd?: string;
}

/** Time the server is given, past the run's own timeout, to answer. */
const GRACE_MS = 30_000;
const DEFAULT_TIMEOUT_MS = 300_000;

/** The code interpreter calls of one sandbox (what `sandbox.runCode` and the context methods use). */
export class CodeInterpreter {
  constructor(
    private readonly http: HttpClient,
    private readonly sandboxId: string,
  ) {}

  private base(): string {
    return `/api/v1/sandboxes/${encodeURIComponent(this.sandboxId)}/code`;
  }

  /**
   * Runs `code` and resolves with what it gave once the run ends. Callbacks get each event
   * as it comes. A code error is not a rejection: check `execution.error`. Rejects with
   * ValidationError (unknown language, `context` with `language`), NotFoundError (unknown
   * context or sandbox), NoCodeInterpreterError (the sandbox is not of the image),
   * ConflictError (not started), or the signal's reason when aborted.
   */
  async run(code: string, opts: RunCodeOptions = {}): Promise<Execution> {
    if (opts.context !== undefined && opts.language !== undefined)
      throw new TypeError('runCode: give context or language, not both');
    const contextId = typeof opts.context === 'string' ? opts.context : opts.context?.id;
    const body: Record<string, unknown> = { code };
    if (opts.language !== undefined) body.language = opts.language;
    if (contextId !== undefined) body.contextId = contextId;
    if (opts.envs !== undefined) body.envs = opts.envs;
    if (opts.timeoutMs !== undefined) body.timeoutMs = opts.timeoutMs;
    const ctrl = new AbortController();
    const onAbort = () => ctrl.abort(opts.signal?.reason);
    if (opts.signal?.aborted) onAbort();
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const res = await this.http.open('POST', `${this.base()}/execute`, {
        json: body,
        headers: { accept: 'application/x-ndjson' },
        timeoutMs: Math.max(this.http.config.timeoutMs, (opts.timeoutMs ?? DEFAULT_TIMEOUT_MS) + GRACE_MS),
        signal: ctrl.signal,
      });
      if (!res.body) throw new ServerError('The run answered no stream', { status: res.status, kind: 'internal' });
      const execution = new Execution();
      let ended = false;
      try {
        for await (const line of ndjsonLines(res.body)) {
          const ev = line as Record<string, unknown>;
          if (ev.type === 'end') ended = true;
          await apply(execution, ev, opts);
        }
      } catch (e) {
        if (ctrl.signal.aborted) throw ctrl.signal.reason ?? e;
        if (e instanceof ServerError) throw e;
        throw new ConnectionError("The run's stream broke before its end", { status: 0, kind: 'connection', cause: e });
      }
      // A run ends with `end`, or with an error event (timeout, the kernel gone); else the connection was cut.
      if (!ended && !execution.error)
        throw new ConnectionError("The run's stream ended before its end", { status: 0, kind: 'connection' });
      return execution;
    } finally {
      opts.signal?.removeEventListener('abort', onAbort);
      ctrl.abort();
    }
  }

  /** Starts a context: a kernel of its own. Rejects ValidationError for an unknown language. */
  createContext(opts: CreateCodeContextOptions = {}): Promise<CodeContext> {
    const json: Record<string, unknown> = {};
    if (opts.language !== undefined) json.language = opts.language;
    if (opts.cwd !== undefined) json.cwd = opts.cwd;
    return this.http.request<CodeContext>('POST', `${this.base()}/contexts`, { json });
  }

  /** The sandbox's contexts, the default ones of the languages used so far among them. */
  async listContexts(): Promise<CodeContext[]> {
    return (await this.http.request<{ contexts: CodeContext[] }>('GET', `${this.base()}/contexts`)).contexts;
  }

  /** Restarts a context's kernel: its state is lost, its id stays. Rejects NotFoundError for an unknown one. */
  async restartContext(context: CodeContext | string): Promise<void> {
    await this.http.request('POST', `${this.base()}/contexts/${encodeURIComponent(idOf(context))}/restart`);
  }

  /** Ends a context and its kernel. Rejects NotFoundError for an unknown one. */
  async removeContext(context: CodeContext | string): Promise<void> {
    await this.http.request('DELETE', `${this.base()}/contexts/${encodeURIComponent(idOf(context))}`);
  }
}

function idOf(context: CodeContext | string): string {
  return typeof context === 'string' ? context : context.id;
}

/** Adds one event of the stream to the execution and calls its callback. */
async function apply(ex: Execution, ev: Record<string, unknown>, o: RunCodeOptions): Promise<void> {
  switch (ev.type) {
    case 'stdout':
    case 'stderr': {
      const text = typeof ev.text === 'string' ? ev.text : '';
      ex.logs[ev.type].push(text);
      const at = new Date(typeof ev.timestamp === 'string' ? ev.timestamp : Date.now());
      await (ev.type === 'stdout' ? o.onStdout : o.onStderr)?.(text, at);
      return;
    }
    case 'result': {
      const r = new Result((ev.result ?? {}) as ResultData);
      ex.results.push(r);
      await o.onResult?.(r);
      return;
    }
    case 'error': {
      ex.error = { name: String(ev.name ?? ''), value: String(ev.value ?? ''), traceback: String(ev.traceback ?? '') };
      await o.onError?.(ex.error);
      return;
    }
    case 'executionCount':
      if (typeof ev.count === 'number') ex.executionCount = ev.count;
      return;
    default:
      return;
  }
}
