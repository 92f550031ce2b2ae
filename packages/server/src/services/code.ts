import { request, type IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import {
  CODE_INTERPRETER,
  type CodeContext,
  type CodeContextCreate,
  type CodeExecuteRequest,
  SandboxdError,
} from '@sandboxd/protocol';
import { DEFAULT_FAIR_SHARE } from '../config-fair-share.js';
import type { ServiceDeps } from './context.js';
import { codeEventStream } from './code-stream.js';
import { Slots } from './slots.js';
import type { SandboxService } from './sandboxes.js';
import { assertStarted } from './started.js';

/**
 * Opens a TCP connection to `port` of a running sandbox, as the port proxy reaches it
 * (directly on the host's bridge, or through its runner's tunnel). Resolves once connected;
 * rejects when nothing listens there or the sandbox cannot be reached.
 */
export type DialSandboxPort = (sandboxId: string, port: number) => Promise<Duplex>;

/** Options of {@link CodeService}. */
export interface CodeServiceOptions {
  dial: DialSandboxPort;
  /**
   * How long to wait for the in-sandbox server to answer a context call, its body
   * included (and a run's answer to start). Default 120 s (a kernel start on a busy host).
   */
  answerTimeoutMs?: number;
  /** Runs streaming at once per sandbox (`fairShare.codeRunsPerSandbox`); past it `rate_limited`. */
  runsPerSandbox?: number;
  /** The longest NDJSON line taken from the sandbox (code-stream.ts's default: 16 MiB). */
  maxLineBytes?: number;
}

/**
 * The code interpreter of a sandbox: relays sandboxd's authenticated calls to the
 * in-sandbox server on port 49999 (E2B's code-interpreter protocol) and translates its
 * answers to sandboxd's shapes. The sandbox must be the caller's (`not_found`) and started
 * (`conflict`, as exec). Nothing listening there: `no_code_interpreter` (409, naming the
 * image to use). The server's own refusals keep its message: 400 `validation` (and its
 * 500 for a language it has no kernel for, as E2B's answers it), 404 `not_found`; anything
 * else it answers is `upstream` (502). The sandbox's side is the tenant's (hostile, say):
 * runs in flight per sandbox are bounded (`runsPerSandbox`: each may hold a line of up to
 * `maxLineBytes` here), and a context call's answer is read within `answerTimeoutMs` and
 * at most 4 MiB (an error's 16 KiB), its connection closed past either.
 */
export class CodeService {
  private readonly answerTimeoutMs: number;
  private readonly runs = new Slots();

  constructor(
    private readonly d: Pick<ServiceDeps, 'clock'> & { sandboxes: Pick<SandboxService, 'get'> },
    private readonly o: CodeServiceOptions,
  ) {
    this.answerTimeoutMs = o.answerTimeoutMs ?? 120_000;
  }

  /**
   * Runs `req.code` and answers its events as NDJSON lines of {@link CodeEvent}s. Destroying
   * the stream (the client went) closes the connection to the sandbox, which interrupts the
   * run there. Past `timeoutMs` the same happens and the stream ends with an error event
   * named `TimeoutError`.
   */
  async execute(
    accountId: string,
    sandboxId: string,
    req: CodeExecuteRequest,
    signal?: AbortSignal,
  ): Promise<import('node:stream').Readable> {
    if (req.contextId !== undefined && req.language !== undefined)
      throw new SandboxdError('validation', 'Only one of contextId or language can be provided', [
        { in: 'body', path: '/contextId', message: 'cannot be given with language' },
      ]);
    const timeoutMs = req.timeoutMs ?? CODE_INTERPRETER.defaultTimeoutMs;
    const body = {
      code: req.code,
      ...(req.contextId !== undefined ? { context_id: req.contextId } : {}),
      ...(req.language !== undefined ? { language: req.language } : {}),
      ...(req.envs !== undefined ? { env_vars: req.envs } : {}),
    };
    const max = this.o.runsPerSandbox ?? DEFAULT_FAIR_SHARE.codeRunsPerSandbox;
    const release = this.runs.take(
      sandboxId,
      max,
      () =>
        new SandboxdError('rate_limited', `The sandbox already has ${max} code runs streaming; wait for one to end`, {
          limit: 'codeRunsPerSandbox',
          max,
        }),
    );
    try {
      const started = Date.now();
      const res = await this.call(accountId, sandboxId, 'POST', '/execute', body, { timeoutMs, signal });
      const out = codeEventStream(res, {
        timeoutMs: Math.max(1, timeoutMs - (Date.now() - started)),
        signal,
        maxLineBytes: this.o.maxLineBytes,
      });
      out.once('close', release);
      out.once('end', release);
      out.once('error', release);
      return out;
    } catch (e) {
      release();
      throw e;
    }
  }

  /** The sandbox's contexts (the default ones of each language started so far among them). */
  async listContexts(accountId: string, sandboxId: string): Promise<CodeContext[]> {
    const res = await this.call(accountId, sandboxId, 'GET', '/contexts');
    const list = await readJson(res, this.answerTimeoutMs);
    if (!Array.isArray(list)) throw badAnswer('a context list that is not an array');
    return list.map(toContext);
  }

  /** Starts a new context (its own kernel). */
  async createContext(accountId: string, sandboxId: string, req: CodeContextCreate): Promise<CodeContext> {
    const res = await this.call(accountId, sandboxId, 'POST', '/contexts', {
      ...(req.language !== undefined ? { language: req.language } : {}),
      ...(req.cwd !== undefined ? { cwd: req.cwd } : {}),
    });
    return toContext(await readJson(res, this.answerTimeoutMs));
  }

  /** Ends a context and its kernel. */
  async removeContext(accountId: string, sandboxId: string, contextId: string): Promise<void> {
    const res = await this.call(accountId, sandboxId, 'DELETE', `/contexts/${encodeURIComponent(contextId)}`);
    res.destroy(); // its body (null) is not needed, and may never end
  }

  /** Restarts a context's kernel: its state is gone, its id stays. */
  async restartContext(accountId: string, sandboxId: string, contextId: string): Promise<void> {
    const res = await this.call(
      accountId,
      sandboxId,
      'POST',
      `/contexts/${encodeURIComponent(contextId)}/restart`,
      undefined,
    );
    res.destroy(); // its body (null) is not needed, and may never end
  }

  /**
   * One request to the in-sandbox server, on a connection of its own (closed with the
   * answer). Resolves with a 2xx answer whose body is still to read; throws for the rest.
   */
  private async call(
    accountId: string,
    sandboxId: string,
    method: string,
    path: string,
    body?: unknown,
    o: { timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<IncomingMessage> {
    const r = await this.d.sandboxes.get(accountId, sandboxId);
    assertStarted(r, this.d.clock.now());
    let socket: Duplex;
    try {
      socket = await this.o.dial(r.id, CODE_INTERPRETER.port);
    } catch (e) {
      if (e instanceof SandboxdError && e.kind !== 'upstream') throw e;
      throw noCodeInterpreter(r.image);
    }
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const req = request({
      method,
      path,
      headers: {
        host: `localhost:${CODE_INTERPRETER.port}`,
        connection: 'close',
        accept: 'application/json, application/x-ndjson',
        ...(payload ? { 'content-type': 'application/json', 'content-length': payload.length } : {}),
      },
      createConnection: () => socket as never,
    });
    const wait = Math.min(o.timeoutMs ?? this.answerTimeoutMs, this.answerTimeoutMs);
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      const timer = setTimeout(() => {
        req.destroy();
        reject(new SandboxdError('upstream_timeout', `The code interpreter did not answer within ${wait} ms`));
      }, wait);
      const onAbort = () => {
        clearTimeout(timer);
        req.destroy();
        reject(new SandboxdError('upstream', 'The request was aborted'));
      };
      o.signal?.addEventListener('abort', onAbort, { once: true });
      req.once('response', (res) => {
        clearTimeout(timer);
        o.signal?.removeEventListener('abort', onAbort);
        resolve(res);
      });
      req.once('error', (err) => {
        clearTimeout(timer);
        o.signal?.removeEventListener('abort', onAbort);
        socket.destroy();
        reject(new SandboxdError('upstream', `The code interpreter closed the connection: ${(err as Error).message}`));
      });
      // A client gone before this point (the signal aborted already) fires no event.
      if (o.signal?.aborted) onAbort();
      else req.end(payload);
    });
    const status = res.statusCode ?? 502;
    if (status >= 200 && status < 300) return res;
    const text = await readText(res, 16 * 1024, this.answerTimeoutMs).catch(() => '');
    const message = errorMessage(text) || `The code interpreter answered ${status}`;
    if (status === 400 || status === 422)
      throw new SandboxdError('validation', message, [{ in: 'body', path: '', message }]);
    // E2B's server answers an unknown language 500 (its kernel cannot start): a bad request here.
    if (status === 500 && UNKNOWN_LANGUAGE.test(message))
      throw new SandboxdError('validation', message, [{ in: 'body', path: '/language', message }]);
    if (status === 404) throw new SandboxdError('not_found', message);
    throw new SandboxdError('upstream', `The code interpreter answered ${status}: ${message}`, { status });
  }
}

/** The in-sandbox server's message for a language it has no kernel for. */
const UNKNOWN_LANGUAGE = /no kernel for language|unsupported language|unknown language/i;

function noCodeInterpreter(image: string): SandboxdError {
  return new SandboxdError(
    'no_code_interpreter',
    `Sandbox serves no code interpreter (nothing answers its port ${CODE_INTERPRETER.port}); create it from ${CODE_INTERPRETER.image}`,
    { image: CODE_INTERPRETER.image, sandboxImage: image, port: CODE_INTERPRETER.port },
  );
}

function badAnswer(what: string): SandboxdError {
  return new SandboxdError('upstream', `The code interpreter answered ${what}`);
}

/** A context as the server described it, checked. */
function toContext(v: unknown): CodeContext {
  const c = v as Partial<Record<keyof CodeContext, unknown>> | null;
  if (!c || typeof c.id !== 'string' || typeof c.language !== 'string')
    throw badAnswer('a context without id or language');
  return { id: c.id, language: c.language, cwd: typeof c.cwd === 'string' ? c.cwd : '' };
}

/** The text of an error answer: E2B's are plain text; a JSON body's `message`/`detail`/`error` when it has one. */
function errorMessage(text: string): string {
  const t = text.trim();
  try {
    const j = JSON.parse(t) as Record<string, unknown>;
    for (const k of ['message', 'detail', 'error'])
      if (typeof j?.[k] === 'string' && j[k] !== '') return (j[k] as string).slice(0, 2000);
  } catch {}
  return t.slice(0, 2000);
}

/**
 * The first `max` bytes of `res`'s body as text: reading stops there (the connection is
 * closed: the rest, endless maybe, is never read), and at `timeoutMs` (`upstream_timeout`).
 * `overflow` true: a body longer than `max` is refused (`upstream`) instead of cut.
 */
function readText(res: IncomingMessage, max: number, timeoutMs: number, overflow = false): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let n = 0;
    const done = (err: Error | null) => {
      clearTimeout(timer);
      res.removeListener('data', onData);
      res.removeListener('end', onEnd);
      res.removeListener('error', onEnd);
      res.removeListener('close', onEnd);
      if (!res.complete) res.destroy();
      if (err) reject(err);
      else resolve(Buffer.concat(chunks).toString('utf8'));
    };
    const timer = setTimeout(
      () => done(new SandboxdError('upstream_timeout', `The code interpreter did not answer within ${timeoutMs} ms`)),
      timeoutMs,
    );
    const onData = (c: Buffer) => {
      if (n + c.length > max) {
        chunks.push(c.subarray(0, max - n));
        n = max;
        return done(overflow ? badAnswer(`a body over ${max} bytes`) : null);
      }
      chunks.push(c);
      n += c.length;
    };
    const onEnd = () =>
      done(res.complete ? null : new SandboxdError('upstream', 'The code interpreter cut its answer'));
    res.on('data', onData);
    res.once('end', onEnd);
    res.once('error', onEnd);
    res.once('close', onEnd);
  });
}

async function readJson(res: IncomingMessage, timeoutMs: number): Promise<unknown> {
  const text = await readText(res, 4 * 1024 * 1024, timeoutMs, true);
  try {
    return JSON.parse(text);
  } catch {
    throw badAnswer('a body that is not JSON');
  }
}
