/**
 * The HTTP core of the SDK: auth headers, per-request timeouts, typed errors, and bounded
 * retries of idempotent reads. Uses fetch, so it runs in Node and browsers; in Node, JSON
 * requests go over node:http with keep-alive instead (see node-transport.ts), unless a
 * `fetch` option was given.
 */
import { resolveConfig, type ClientOptions, type ResolvedConfig } from './config.js';
import { ConnectionError, errorFromResponse, RequestTimeoutError, SandboxdApiError } from './errors.js';
import { nodeTransport, type NodeTransport } from './node-transport.js';

/** Options of one request. */
export interface RequestOptions {
  /** Query parameters; `undefined` values are left out. */
  query?: Record<string, string | number | boolean | undefined>;
  /** A JSON body. */
  json?: unknown;
  /** A raw body (Blob, bytes, stream) sent with `contentType`. */
  body?: Blob | ArrayBuffer | Uint8Array | ReadableStream<Uint8Array> | string;
  contentType?: string;
  headers?: Record<string, string>;
  /** Overrides the client's per-request timeout, ms. Covers reading the body too. */
  timeoutMs?: number;
  /** Aborts the request; the promise rejects with the signal's reason. */
  signal?: AbortSignal;
}

const RETRY_STATUSES = new Set([429, 502, 503, 504]);
const IDEMPOTENT = new Set(['GET', 'HEAD']);
const MAX_BACKOFF_MS = 4_000;
const MAX_RETRY_AFTER_MS = 10_000;

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(done, ms);
    function done() {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }
    function onAbort() {
      clearTimeout(t);
      reject(signal!.reason);
    }
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Wait before retry `n` (0-based) after `e`: what the server asked for when it said
 * (a 429's `details.retryAfterMs`, to the millisecond, else `Retry-After`), at most 10 s;
 * else full jitter over 250 ms * 2^n, capped at 4 s.
 */
export function retryWaitMs(e: unknown, n: number): number {
  const err = e instanceof SandboxdApiError ? e : undefined;
  const precise = (err?.details as { retryAfterMs?: unknown } | null | undefined)?.retryAfterMs;
  const asked =
    err?.status === 429 && typeof precise === 'number' && Number.isFinite(precise) && precise >= 0
      ? precise
      : err?.retryAfterMs;
  if (asked !== undefined) return Math.min(asked, MAX_RETRY_AFTER_MS);
  return Math.random() * Math.min(250 * 2 ** n, MAX_BACKOFF_MS);
}

async function readJson(res: Response): Promise<unknown> {
  return parseJson(await res.text());
}

function parseJson(text: string): unknown {
  if (text === '') return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** Sends requests to one server with one set of credentials. Safe to share. */
export class HttpClient {
  readonly config: ResolvedConfig;

  /** Set in Node when no `fetch` option was given: JSON requests use it. */
  private readonly node: NodeTransport | undefined;

  /** Throws TypeError for a malformed `apiUrl` or when no fetch exists. */
  constructor(options: ClientOptions = {}) {
    this.config = resolveConfig(options);
    this.node = options.fetch ? undefined : sharedNodeTransport();
  }

  /** The absolute URL of an API path such as `/api/v1/sandboxes`. */
  url(path: string, query?: RequestOptions['query']): string {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) q.set(k, String(v));
    const qs = q.toString();
    return `${this.config.apiUrl}${path}${qs ? `?${qs}` : ''}`;
  }

  /** Headers that authenticate a request (empty without an API key). */
  authHeaders(): Record<string, string> {
    return this.config.apiKey ? { authorization: `Bearer ${this.config.apiKey}` } : {};
  }

  /** Sends a request and parses the JSON answer (`undefined` for 204). Throws {@link SandboxdApiError} subclasses. */
  request<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    const node = this.node;
    if (node && opts.body === undefined)
      return this.retrying(method, opts, () => this.onceNode<T>(node, method, path, opts));
    return this.call(method, path, opts, async (res) => (res.status === 204 ? undefined : await readJson(res)) as T);
  }

  /**
   * Sends a request and hands a successful response to `read`, within the same timeout.
   * GET and HEAD are retried (bounded, with backoff) on connection errors and 429/502/503/504;
   * nothing else is ever retried, so a create cannot run twice.
   */
  call<T>(method: string, path: string, opts: RequestOptions, read: (res: Response) => Promise<T>): Promise<T> {
    return this.retrying(method, opts, () => this.once(method, path, opts, read));
  }

  /**
   * Sends a request whose answer is read as a stream (file contents, NDJSON): resolves with
   * the response once its status and headers are in, within the timeout; the body is the
   * caller's to read or cancel, with no time limit, and `opts.signal` still aborts it. GET is
   * retried like {@link call}. Throws the typed error of an error answer.
   */
  open(method: string, path: string, opts: RequestOptions = {}): Promise<Response> {
    return this.retrying(method, opts, () => this.once(method, path, opts, async (res) => res, true));
  }

  private async retrying<T>(method: string, opts: RequestOptions, attempt: () => Promise<T>): Promise<T> {
    const retries = IDEMPOTENT.has(method) ? this.config.maxRetries : 0;
    for (let n = 0; ; n++) {
      try {
        return await attempt();
      } catch (e) {
        const retryable =
          (e instanceof ConnectionError && !(e instanceof RequestTimeoutError)) ||
          (e instanceof SandboxdApiError && RETRY_STATUSES.has(e.status));
        if (!retryable || n >= retries) throw e;
        await sleep(retryWaitMs(e, n), opts.signal);
      }
    }
  }

  /**
   * One attempt's set-up: headers (with the content type of a JSON body), the JSON body, a
   * timeout and the caller's signal joined into one abort signal; `noAnswer` turns what the
   * transport threw into the error to throw; `end` clears the timer.
   */
  private begin(method: string, path: string, opts: RequestOptions) {
    const headers: Record<string, string> = {
      accept: 'application/json',
      ...this.config.headers,
      ...this.authHeaders(),
      ...(opts.headers ?? {}),
    };
    const json = opts.json === undefined ? undefined : JSON.stringify(opts.json);
    if (json !== undefined) headers['content-type'] = 'application/json';
    const ctrl = new AbortController();
    let timedOut = false;
    const timeoutMs = opts.timeoutMs ?? this.config.timeoutMs;
    const timer = setTimeout(() => {
      timedOut = true;
      ctrl.abort();
    }, timeoutMs);
    const onAbort = () => ctrl.abort(opts.signal!.reason);
    if (opts.signal?.aborted) onAbort();
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    return {
      headers,
      json,
      signal: ctrl.signal,
      noAnswer: (e: unknown) => this.noAnswer(e, { timedOut, timeoutMs, method, path, signal: opts.signal }),
      /** Clears the timer; `keepSignal` leaves the caller's signal able to abort a body still being read. */
      end: (keepSignal = false) => {
        clearTimeout(timer);
        if (!keepSignal) opts.signal?.removeEventListener('abort', onAbort);
      },
    };
  }

  private async onceNode<T>(node: NodeTransport, method: string, path: string, opts: RequestOptions): Promise<T> {
    const a = this.begin(method, path, opts);
    try {
      let res: Awaited<ReturnType<NodeTransport>>;
      try {
        res = await node(this.url(path, opts.query), { method, headers: a.headers, body: a.json, signal: a.signal });
      } catch (e) {
        throw a.noAnswer(e);
      }
      if (res.status < 200 || res.status > 299) {
        throw errorFromResponse(res.status, parseJson(res.text), {
          statusText: res.statusText,
          retryAfter: res.header('retry-after'),
        });
      }
      return (res.status === 204 ? undefined : parseJson(res.text)) as T;
    } finally {
      a.end();
    }
  }

  private async once<T>(
    method: string,
    path: string,
    opts: RequestOptions,
    read: (res: Response) => Promise<T>,
    streaming = false,
  ): Promise<T> {
    const a = this.begin(method, path, opts);
    let ok = false;
    let body: BodyInit | undefined = a.json;
    if (body === undefined && opts.body !== undefined) {
      body = opts.body as BodyInit;
      if (opts.contentType) a.headers['content-type'] = opts.contentType;
    }
    const init: RequestInit & { duplex?: 'half' } = { method, headers: a.headers, body, signal: a.signal };
    if (typeof ReadableStream !== 'undefined' && body instanceof ReadableStream) init.duplex = 'half';
    if (!this.config.apiKey) init.credentials = 'include';
    try {
      let res: Response;
      try {
        res = await this.config.fetch(this.url(path, opts.query), init);
      } catch (e) {
        throw a.noAnswer(e);
      }
      if (!res.ok) {
        const parsed = await readJson(res).catch(() => undefined);
        throw errorFromResponse(res.status, parsed, {
          statusText: res.statusText,
          retryAfter: res.headers.get('retry-after'),
        });
      }
      try {
        const value = await read(res);
        ok = true;
        return value;
      } catch (e) {
        if (e instanceof SandboxdApiError) throw e;
        throw a.noAnswer(e);
      }
    } finally {
      a.end(streaming && ok);
    }
  }

  private noAnswer(
    e: unknown,
    c: { timedOut: boolean; timeoutMs: number; method: string; path: string; signal?: AbortSignal },
  ): unknown {
    if (c.signal?.aborted && !c.timedOut) return c.signal.reason ?? e;
    if (c.timedOut) {
      return new RequestTimeoutError(`${c.method} ${c.path} got no answer within ${c.timeoutMs} ms`, {
        status: 0,
        kind: 'timeout',
        cause: e,
      });
    }
    // fetch puts the system error in `cause`; node:http throws it itself.
    const cause = (e as { cause?: { code?: string; message?: string } })?.cause;
    const why = cause?.code ?? cause?.message ?? (e as { code?: string })?.code ?? (e as Error)?.message ?? String(e);
    return new ConnectionError(`Cannot reach the sandboxd API at ${this.config.apiUrl} (${why})`, {
      status: 0,
      kind: 'connection',
      cause: e,
    });
  }
}

let shared: NodeTransport | null | undefined;
/** One transport (and keep-alive pool) for every client of the process. */
function sharedNodeTransport(): NodeTransport | undefined {
  if (shared === undefined) shared = nodeTransport() ?? null;
  return shared ?? undefined;
}
