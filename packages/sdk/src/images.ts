/**
 * Admin image management: list, pull, build and import, with progress streamed as NDJSON
 * when a listener is given.
 */
import { errorFromResponse, ServerError } from './errors.js';
import type { HttpClient } from './http.js';
import type { BuildableImage, ImageInfo, ImageProgress, ImageProgressEvent } from './types.js';

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

/** `client.images`: admin-only (others get NotFoundError). */
export class ImagesApi {
  constructor(private readonly http: HttpClient) {}

  /** Every image in the server's cache. */
  async list(): Promise<ImageInfo[]> {
    return (await this.http.request<{ images: ImageInfo[] }>('GET', '/api/v1/images')).images;
  }

  /** Pulls `ref` from its registry (even when cached). Throws TemplateNotFoundError, ValidationError, ServerError. */
  pull(ref: string, opts: ImageJobOptions = {}): Promise<ImageInfo> {
    return this.job('/api/v1/images/pull', ref, opts);
  }

  /** (Re)builds `local/debian:bookworm` or `local/busybox:latest` offline on the server. */
  build(ref: BuildableImage, opts: ImageJobOptions = {}): Promise<ImageInfo> {
    return this.job('/api/v1/images/build', ref, opts);
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
