/**
 * Images: builds of templates from a Dockerfile (any account: `build({name, context, ...})`),
 * and the admin's image management (list, pull, offline build of the default images,
 * import), with progress streamed as NDJSON when a listener is given.
 */
import { buildImage, BuildsApi, type ImageBuildOptions } from './builds.js';
import { errorFromResponse, ServerError } from './errors.js';
import type { HttpClient } from './http.js';
import type { Build, BuildableImage, ImageInfo, ImageProgress, ImageProgressEvent } from './types.js';

/** Default timeout of a pull, build or import, ms (a Debian build takes minutes). */
export const IMAGE_JOB_TIMEOUT_MS = 30 * 60_000;

/** Options of pull and build. */
export interface ImageJobOptions {
  /** Called with each progress report; makes the server stream NDJSON. */
  onProgress?: (p: ImageProgress) => void;
  /** Default {@link IMAGE_JOB_TIMEOUT_MS}. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** Options of import. */
export interface ImageImportOptions {
  /** The name to give the image; default the name the archive records. */
  ref?: string;
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** Reads NDJSON lines from a response body and returns the image of the `done` line. */
async function readProgress(res: Response, onProgress: (p: ImageProgress) => void): Promise<ImageInfo> {
  if (!res.body) throw new ServerError('Empty progress stream', { status: res.status, kind: 'internal' });
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  const handle = (line: string): ImageInfo | undefined => {
    if (line.trim() === '') return undefined;
    const ev = JSON.parse(line) as ImageProgressEvent;
    if (ev.type === 'progress') onProgress(ev);
    else if (ev.type === 'error') throw errorFromResponse(ev.error.code, ev.error);
    else if (ev.type === 'done') return ev.image;
    return undefined;
  };
  for (;;) {
    const { value, done } = await reader.read();
    buf += done ? dec.decode() : dec.decode(value, { stream: true });
    for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
      const image = handle(buf.slice(0, nl));
      buf = buf.slice(nl + 1);
      if (image) {
        await reader.cancel().catch(() => {});
        return image;
      }
    }
    if (done) break;
  }
  const last = handle(buf);
  if (last) return last;
  throw new ServerError('The progress stream ended without a result', { status: res.status, kind: 'internal' });
}

/** `client.images`: `build({name, ...})` for any account; the rest admin-only (others get NotFoundError). */
export class ImagesApi {
  private readonly builds: BuildsApi;
  constructor(
    private readonly http: HttpClient,
    builds?: BuildsApi,
  ) {
    this.builds = builds ?? new BuildsApi(http);
  }

  /** Every image in the server's cache. */
  async list(): Promise<ImageInfo[]> {
    return (await this.http.request<{ images: ImageInfo[] }>('GET', '/api/v1/images')).images;
  }

  /** Pulls `ref` from its registry (even when cached). Throws TemplateNotFoundError, ValidationError, ServerError. */
  pull(ref: string, opts: ImageJobOptions = {}): Promise<ImageInfo> {
    return this.job('/api/v1/images/pull', ref, opts);
  }

  /**
   * Builds the template `templates/<name>:<tag>` from a Dockerfile and its context (any
   * account): sends the build, follows its log (`onLog`, reconnecting after a drop) and
   * resolves with the build once `ready`; create sandboxes from `build.image`. Throws
   * BuildError (with `failure`: step, line, instruction, exit code, output) when it ends
   * `error` or `cancelled`, and what `builds.create` throws when it is refused. Aborting
   * `signal` after the server accepted the build cancels it.
   *
   * ```ts
   * const b = await client.images.build({ name: 'web', context: './app', onLog: (e) => e.type === 'log' && console.log(e.text) });
   * const sandbox = await client.sandboxes.create({ image: b.image });
   * ```
   */
  build(params: ImageBuildOptions): Promise<Build>;
  /** Admin: (re)builds `local/debian:bookworm` or `local/busybox:latest` offline on the server. */
  build(ref: BuildableImage, opts?: ImageJobOptions): Promise<ImageInfo>;
  build(a: ImageBuildOptions | BuildableImage, opts: ImageJobOptions = {}): Promise<Build | ImageInfo> {
    if (typeof a === 'object') return buildImage(this.builds, a);
    return this.job('/api/v1/images/build', a, opts);
  }

  /**
   * Uploads an OCI archive or `docker save` tar. In Node, pass `await fs.openAsBlob(path)`
   * to stream a file without reading it into memory. Throws ValidationError
   * (unreadable archive, or no `ref` and the archive names none), PayloadTooLargeError.
   */
  async import(
    archive: Blob | ArrayBuffer | Uint8Array | ReadableStream<Uint8Array>,
    opts: ImageImportOptions = {},
  ): Promise<ImageInfo> {
    const r = await this.http.request<{ image: ImageInfo }>('POST', '/api/v1/images/import', {
      query: { ref: opts.ref },
      body: archive,
      contentType: 'application/x-tar',
      timeoutMs: opts.timeoutMs ?? IMAGE_JOB_TIMEOUT_MS,
      signal: opts.signal,
    });
    return r.image;
  }

  private async job(path: string, ref: string, opts: ImageJobOptions): Promise<ImageInfo> {
    const base = { json: { ref }, timeoutMs: opts.timeoutMs ?? IMAGE_JOB_TIMEOUT_MS, signal: opts.signal };
    const onProgress = opts.onProgress;
    if (!onProgress) return (await this.http.request<{ image: ImageInfo }>('POST', path, base)).image;
    return this.http.call('POST', path, { ...base, headers: { accept: 'application/x-ndjson' } }, async (res) => {
      if (!(res.headers.get('content-type') ?? '').includes('ndjson'))
        return ((await res.json()) as { image: ImageInfo }).image;
      return readProgress(res, onProgress);
    });
  }
}
