/**
 * What a build sends as its context: a tar made here (of a directory, with the Node-only
 * walk of context-dir.ts, or of a map of files), or one the caller made, sent as it is;
 * an inline Dockerfile added under a name of its own, listed in `.dockerignore`.
 */
import { checkContextDir, directoryEntries } from './context-dir.js';
import { tarChunks, type TarEntry } from './tar.js';
import { iterableToStream } from './upload.js';

/**
 * A build's context: the directory at this path (Node only; packed as a tar as it is sent,
 * symlinks kept as symlinks; the server applies `.dockerignore`), a tar already made (bytes,
 * Blob, stream or async iterable of bytes; gzip or not), or a map of file paths to contents
 * (a small context made in memory, e.g. in a browser).
 */
export type BuildContext =
  | string
  | Uint8Array
  | ArrayBuffer
  | Blob
  | ReadableStream<Uint8Array>
  | AsyncIterable<Uint8Array>
  | Record<string, string | Uint8Array>;

/** The parts of a build's parameters that make its context (see BuildParams in builds.ts). */
export interface ContextParams {
  context?: BuildContext;
  dockerfile?: string;
  dockerfileText?: string;
  compress?: boolean;
}

const encoder = new TextEncoder();

const isBlob = (x: unknown): x is Blob => typeof Blob !== 'undefined' && x instanceof Blob;

function isBytesLike(x: unknown): x is Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array> {
  return (
    x instanceof Uint8Array ||
    x instanceof ArrayBuffer ||
    isBlob(x) ||
    (typeof ReadableStream !== 'undefined' && x instanceof ReadableStream)
  );
}

function isAsyncIterable(x: unknown): x is AsyncIterable<Uint8Array> {
  return (
    typeof x === 'object' && x !== null && typeof (x as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function'
  );
}

/** `.dockerfile.` and 20 random hex digits: the name an inline Dockerfile is sent under. */
function inlineDockerfileName(): string {
  const b = new Uint8Array(10);
  crypto.getRandomValues(b);
  return `.dockerfile.${[...b].map((x) => x.toString(16).padStart(2, '0')).join('')}`;
}

/** Reads a small body (a `.dockerignore`) whole. */
async function readAll(body: TarEntry['body']): Promise<Uint8Array> {
  if (body === undefined) return new Uint8Array(0);
  if (body instanceof Uint8Array) return body;
  const parts: Uint8Array[] = [];
  let n = 0;
  for await (const c of body()) {
    parts.push(c);
    n += c.byteLength;
    if (n > 16 << 20) throw new Error('.dockerignore is over 16 MiB');
  }
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}

/**
 * `entries` plus an inline Dockerfile as `name`, and a root `.dockerignore` that lists it
 * (the context's own, with the line added, or a new one that also lists itself).
 */
async function* withInlineDockerfile(
  entries: AsyncIterable<TarEntry>,
  text: string,
  name: string,
): AsyncGenerator<TarEntry> {
  let ignore: TarEntry | undefined;
  for await (const e of entries) {
    if (e.path === '.dockerignore' && e.type === 'file') ignore = e;
    else yield e;
  }
  const own = ignore ? new TextDecoder().decode(await readAll(ignore.body)) : '.dockerignore';
  const base: TarEntry = ignore ?? { path: '.dockerignore', type: 'file', mode: 0o644 };
  yield { ...base, size: undefined, body: encoder.encode(`${own}\n${name}\n`) };
  yield { path: name, type: 'file', mode: 0o644, body: encoder.encode(text) };
}

async function* fromMap(files: Record<string, string | Uint8Array>): AsyncGenerator<TarEntry> {
  const dirs = new Set<string>();
  for (const [path, content] of Object.entries(files).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    const clean = path.replace(/^\.?\/+/, '');
    const parts = clean.split('/');
    for (let i = 1; i < parts.length; i++) {
      const d = parts.slice(0, i).join('/');
      if (!dirs.has(d)) {
        dirs.add(d);
        yield { path: d, type: 'dir', mode: 0o755 };
      }
    }
    yield {
      path: clean,
      type: 'file',
      mode: 0o644,
      body: typeof content === 'string' ? encoder.encode(content) : content,
    };
  }
}

/** The body to send and its media type; a tar made here may be gzipped. */
export async function contextBody(
  p: ContextParams,
): Promise<{ body: Uint8Array | Blob | ReadableStream<Uint8Array>; type: string; dockerfile?: string }> {
  if (p.dockerfile !== undefined && p.dockerfileText !== undefined)
    throw new TypeError('Give either dockerfile (a path in the context) or dockerfileText, not both');
  const ctx = p.context;
  if (ctx === undefined && p.dockerfileText === undefined)
    throw new TypeError('A build needs a context, or dockerfileText for a build that copies nothing');
  if (ctx !== undefined && (isBytesLike(ctx) || isAsyncIterable(ctx))) {
    if (p.dockerfileText !== undefined)
      throw new TypeError(
        'dockerfileText cannot be added to a tar context: put the Dockerfile in the tar, or pass the context as a directory or a map of files',
      );
    return { ...(await rawTar(ctx)), dockerfile: p.dockerfile };
  }
  let entries: AsyncIterable<TarEntry>;
  if (typeof ctx === 'string') {
    await checkContextDir(ctx);
    entries = directoryEntries(ctx);
  } else if (ctx === undefined) entries = fromMap({});
  else if (typeof ctx === 'object') entries = fromMap(ctx);
  else throw new TypeError('context must be a directory path, a tar (bytes, Blob, stream) or a map of files');
  let dockerfile = p.dockerfile;
  if (p.dockerfileText !== undefined) {
    dockerfile = inlineDockerfileName();
    entries = withInlineDockerfile(entries, p.dockerfileText, dockerfile);
  }
  let stream = iterableToStream(tarChunks(entries));
  if (p.compress)
    stream = stream.pipeThrough(new CompressionStream('gzip') as unknown as TransformStream<Uint8Array, Uint8Array>);
  return { body: stream, type: p.compress ? 'application/gzip' : 'application/x-tar', dockerfile };
}

/** A tar given by the caller, sent as it is; gzip is told by its first two bytes. */
async function rawTar(
  ctx: Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>,
): Promise<{ body: Uint8Array | Blob | ReadableStream<Uint8Array>; type: string }> {
  const gz = (b: Uint8Array) =>
    b.length >= 2 && b[0] === 0x1f && b[1] === 0x8b ? 'application/gzip' : 'application/x-tar';
  if (ctx instanceof ArrayBuffer) ctx = new Uint8Array(ctx);
  if (ctx instanceof Uint8Array) return { body: ctx, type: gz(ctx) };
  if (isBlob(ctx)) return { body: ctx, type: gz(new Uint8Array(await ctx.slice(0, 2).arrayBuffer())) };
  const stream = ctx instanceof ReadableStream ? ctx : iterableToStream(ctx);
  // Peek at the first chunk, then send it and the rest.
  const reader = stream.getReader();
  const first = await reader.read();
  const head = first.done ? new Uint8Array(0) : first.value;
  let sentHead = false;
  const body = new ReadableStream<Uint8Array>(
    {
      async pull(c) {
        if (!sentHead) {
          sentHead = true;
          if (head.byteLength) return c.enqueue(head);
        }
        const r = await reader.read();
        if (r.done) c.close();
        else c.enqueue(r.value);
      },
      cancel: (why) => reader.cancel(why),
    },
    { highWaterMark: 0 },
  );
  return { body, type: gz(head) };
}

/** Counts what goes through, for `onUploadProgress`. */
export function counted(
  body: Uint8Array | Blob | ReadableStream<Uint8Array>,
  on: ((n: number) => void) | undefined,
): Uint8Array | Blob | ReadableStream<Uint8Array> {
  if (!on) return body;
  const stream =
    body instanceof ReadableStream
      ? body
      : body instanceof Uint8Array
        ? new Blob([body as BlobPart]).stream()
        : body.stream();
  let sent = 0;
  return stream.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, c) {
        sent += chunk.byteLength;
        on(sent);
        c.enqueue(chunk);
      },
    }),
  );
}

/** Passes a stream through, noting the error it fails with. */
export function catchErrors(s: ReadableStream<Uint8Array>, on: (e: unknown) => void): ReadableStream<Uint8Array> {
  const reader = s.getReader();
  return new ReadableStream<Uint8Array>(
    {
      async pull(c) {
        try {
          const r = await reader.read();
          if (r.done) c.close();
          else c.enqueue(r.value);
        } catch (e) {
          on(e);
          c.error(e);
        }
      },
      cancel: (why) => reader.cancel(why),
    },
    { highWaterMark: 0 },
  );
}
