/**
 * Image builds (templates): a Dockerfile and its context built on the server into the image
 * `templates/<name>:<tag>`, private to the account, usable in creates like a snapshot.
 * `client.images.build(...)` starts one and follows it to its end; `client.builds` and
 * `client.templates` manage them. See docs/sdk.md#image-builds-templates.
 */
import { ConnectionError, SandboxdApiError } from './errors.js';
import { retryWaitMs, type HttpClient } from './http.js';
import { ndjsonLines } from './ndjson.js';
import { type BuildContext, catchErrors, contextBody, counted } from './build-context.js';
import type { Build, BuildFailure, BuildLogEvent, BuildState, TemplateInfo } from './types.js';

/** Default timeout of sending a build (the context's upload and the server's checks), ms. */
export const BUILD_SEND_TIMEOUT_MS = 30 * 60_000;
/** Reconnections of a followed log in a row without a line in between before it gives up. */
export const MAX_LOG_RECONNECTS = 10;

/** What a build is made of. */
export interface BuildParams {
  /** Template name: `a-z0-9_.-`, starting with a letter or digit, at most 63. */
  name: string;
  /** Default `latest`. */
  tag?: string;
  /** The context; may be left out with `dockerfileText` (a build that copies nothing). */
  context?: BuildContext;
  /** Path of the Dockerfile in the context; default `Dockerfile`. */
  dockerfile?: string;
  /**
   * The Dockerfile itself, instead of a file of the context (not with a tar context). It is
   * sent in the context's tar under a name of its own, listed in `.dockerignore` so that no
   * COPY picks it up (as `docker build -f -` does).
   */
  dockerfileText?: string;
  /** `ARG` values. */
  buildArgs?: Record<string, string>;
  /** Domains (`*.example.com` allowed) RUN steps may reach; default none. Bounded by the plan. */
  allowDomains?: string[];
  /** Run every step even when a cached result exists. */
  noCache?: boolean;
  /** Gzip the context on the way (saves bandwidth to a remote server; costs CPU). Default false. */
  compress?: boolean;
  /** Timeout of sending the build (until the server accepted it), ms. Default {@link BUILD_SEND_TIMEOUT_MS}. */
  timeoutMs?: number;
  /** Aborts sending; with `images.build`, aborting after the server accepted the build also cancels it. */
  signal?: AbortSignal;
  /** Called with the bytes of context sent so far, as they go. */
  onUploadProgress?: (sentBytes: number) => void;
}

/** Options of following a build to its end. */
export interface BuildWaitOptions {
  /** Called with each log line and, last, the `end` event. */
  onLog?: (e: BuildLogEvent) => void;
  /** Resume after this `seq` + 1 (default: from the start). */
  offset?: number;
  /** Stops waiting (the build goes on; `images.build` cancels it). */
  signal?: AbortSignal;
}

/** Options of `images.build`: the build, following it, and its start. */
export interface ImageBuildOptions extends BuildParams, Omit<BuildWaitOptions, 'offset'> {
  /** Called once the server accepted the build (`queued`): its id, e.g. to cancel it. */
  onStart?: (b: Build) => void;
}

/** Options of `builds.logs`. */
export interface BuildLogsOptions {
  /** First `seq` to get; default 0. */
  offset?: number;
  /** Keep going until the build ends (then one `end` event), reconnecting after a drop. */
  follow?: boolean;
  /** Reconnections in a row without a line in between before giving up; default {@link MAX_LOG_RECONNECTS}. */
  maxReconnects?: number;
  signal?: AbortSignal;
}

/** A build that ended `error` or `cancelled`. `failure` says why (step, line, instruction, exit code, output). */
export class BuildError extends Error {
  readonly build: Build;
  constructor(build: Build) {
    const f = build.error;
    super(
      build.state === 'cancelled'
        ? `Build ${build.id} (${build.image}) was cancelled`
        : (f?.message ?? `Build ${build.id} (${build.image}) failed`),
    );
    this.name = 'BuildError';
    this.build = build;
  }
  /** `error` or `cancelled`. */
  get state(): BuildState {
    return this.build.state;
  }
  get failure(): BuildFailure | undefined {
    return this.build.error;
  }
  /** The failing step, from 1. */
  get step(): number | undefined {
    return this.build.error?.details?.step;
  }
  /** Its line in the Dockerfile. */
  get line(): number | undefined {
    return this.build.error?.details?.line;
  }
  /** The instruction as written. */
  get instruction(): string | undefined {
    return this.build.error?.details?.instruction;
  }
  get exitCode(): number | undefined {
    return this.build.error?.details?.exitCode;
  }
  /** The end of the step's output. */
  get output(): string | undefined {
    return this.build.error?.details?.output;
  }
}

const FINAL: readonly BuildState[] = ['ready', 'error', 'cancelled'];

/** `client.builds`: the account's builds. */
export class BuildsApi {
  constructor(private readonly http: HttpClient) {}

  /**
   * Sends a build (its context streamed) and resolves with it `queued` once the server
   * checked everything (the Dockerfile, the images it names, args and domains); it runs in
   * the background. Throws ValidationError naming the Dockerfile's line, TemplateNotFoundError
   * for a FROM image that does not exist, QuotaExceededError, PayloadTooLargeError.
   */
  async create(p: BuildParams): Promise<Build> {
    const c = await contextBody(p);
    let packError: unknown;
    // An error of the directory walk (an unreadable file) is the one to report, not the
    // failed upload it causes.
    const body = c.body instanceof ReadableStream ? catchErrors(c.body, (e) => (packError = e)) : c.body;
    try {
      const r = await this.http.request<{ build: Build }>('POST', '/api/v1/images/builds', {
        query: {
          name: p.name,
          tag: p.tag,
          dockerfile: c.dockerfile,
          buildArgs: p.buildArgs === undefined ? undefined : JSON.stringify(p.buildArgs),
          allowDomains: p.allowDomains === undefined ? undefined : p.allowDomains.join(','),
          noCache: p.noCache ? true : undefined,
        },
        body: counted(body, p.onUploadProgress),
        contentType: c.type,
        timeoutMs: p.timeoutMs ?? BUILD_SEND_TIMEOUT_MS,
        signal: p.signal,
      });
      return r.build;
    } catch (e) {
      if (packError !== undefined && !(e instanceof SandboxdApiError && e.status > 0)) throw packError;
      throw e;
    }
  }

  /** The account's builds, newest first; `name` keeps one template's. */
  async list(o: { name?: string; limit?: number } = {}): Promise<Build[]> {
    return (await this.http.request<{ builds: Build[] }>('GET', '/api/v1/images/builds', { query: o })).builds;
  }

  /** One build. Throws NotFoundError (another account's build too). */
  async get(id: string): Promise<Build> {
    return (await this.http.request<{ build: Build }>('GET', `/api/v1/images/builds/${encodeURIComponent(id)}`)).build;
  }

  /** Cancels a queued or running build (it ends `cancelled`). Throws ConflictError once it is final. */
  async cancel(id: string): Promise<Build> {
    return (await this.http.request<{ build: Build }>('POST', `/api/v1/images/builds/${encodeURIComponent(id)}/cancel`))
      .build;
  }

  /** Forgets a build and its log (a running one is cancelled first); the template it made stays. */
  async delete(id: string): Promise<void> {
    await this.http.request('DELETE', `/api/v1/images/builds/${encodeURIComponent(id)}`);
  }

  /**
   * A build's log from `offset`. With `follow`, new lines as they come and, last, one `end`
   * event (at once for a final build); a dropped connection is resumed from the last `seq`
   * + 1, so no line is lost or repeated (`maxReconnects` attempts in a row at most, then
   * ConnectionError). Breaking out of the loop closes the stream.
   */
  async *logs(id: string, o: BuildLogsOptions = {}): AsyncGenerator<BuildLogEvent, void, undefined> {
    const max = o.maxReconnects ?? MAX_LOG_RECONNECTS;
    let next = o.offset ?? 0;
    let failures = 0;
    const path = `/api/v1/images/builds/${encodeURIComponent(id)}/logs`;
    for (;;) {
      let lastError: unknown;
      try {
        const res = await this.http.open('GET', path, {
          query: { offset: next, follow: o.follow ? true : undefined },
          headers: { accept: 'application/x-ndjson' },
          signal: o.signal,
        });
        if (!res.body)
          throw new ConnectionError('The log answer has no body', { status: res.status, kind: 'connection' });
        for await (const line of ndjsonLines(res.body)) {
          const e = line as BuildLogEvent;
          if (e.type === 'log') {
            if (e.seq < next) continue; // a server that resent what was had
            next = e.seq + 1;
            failures = 0;
            yield e;
          } else if (e.type === 'end') {
            yield e;
            return;
          }
        }
        if (!o.follow) return;
      } catch (e) {
        if (o.signal?.aborted) throw o.signal.reason ?? e;
        // Answers of the server (404, 401, ...) are final; only lost connections are retried.
        if (e instanceof SandboxdApiError && !(e instanceof ConnectionError)) throw e;
        lastError =
          e instanceof ConnectionError
            ? e
            : new ConnectionError(`The log of build ${id} was cut (${(e as Error)?.message ?? String(e)})`, {
                status: 0,
                kind: 'connection',
                cause: e,
              });
        if (!o.follow) throw lastError;
      }
      // The stream ended without `end` (the server went away mid-follow) or broke: resume.
      if (++failures > max)
        throw new ConnectionError(`Lost the log of build ${id} ${failures} times in a row`, {
          status: 0,
          kind: 'connection',
          cause: lastError,
        });
      await sleep(retryWaitMs(lastError, failures - 1), o.signal);
    }
  }

  /**
   * Follows a build to its end (its log lines to `onLog`) and resolves with it `ready`.
   * Throws BuildError when it ended `error` or `cancelled`.
   */
  async wait(id: string, o: BuildWaitOptions = {}): Promise<Build> {
    let end: BuildLogEvent | undefined;
    for await (const e of this.logs(id, { offset: o.offset, follow: true, signal: o.signal })) {
      o.onLog?.(e);
      if (e.type === 'end') end = e;
    }
    const build = await this.get(id);
    // The record is read after the end line: a store that lags still says what the line said.
    const final = FINAL.includes(build.state)
      ? build
      : { ...build, state: end?.type === 'end' ? end.state : build.state };
    if (final.state === 'ready') return final;
    if (final.error === undefined && end?.type === 'end' && end.error) final.error = end.error;
    throw new BuildError(final);
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** `client.templates`: the account's templates (`templates/<name>:<tag>`). */
export class TemplatesApi {
  constructor(private readonly http: HttpClient) {}
  /** Every template of the account; `name` keeps its tags. */
  async list(o: { name?: string } = {}): Promise<TemplateInfo[]> {
    return (await this.http.request<{ templates: TemplateInfo[] }>('GET', '/api/v1/templates', { query: o })).templates;
  }
  /** Deletes one tag of a template, or every tag without `tag`. Sandboxes made from it keep their files. Throws NotFoundError. */
  async delete(name: string, tag?: string): Promise<void> {
    await this.http.request('DELETE', `/api/v1/templates/${encodeURIComponent(name)}`, { query: { tag } });
  }
}

/**
 * Starts a build and follows it to its end: `images.build`. Aborting `signal` once the
 * server accepted the build cancels it there too.
 */
export async function buildImage(builds: BuildsApi, o: ImageBuildOptions): Promise<Build> {
  const build = await builds.create(o);
  o.onStart?.(build);
  try {
    return await builds.wait(build.id, { onLog: o.onLog, signal: o.signal });
  } catch (e) {
    if (o.signal?.aborted) await builds.cancel(build.id).catch(() => {});
    throw e;
  }
}
