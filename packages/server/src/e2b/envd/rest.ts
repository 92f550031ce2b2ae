import type { IncomingMessage, ServerResponse } from 'node:http';
import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip, createGzip } from 'node:zlib';
import { SandboxdError } from '@sandboxd/protocol';
import type { Logger } from 'pino';
import { parseRange } from '../../http/routes/files.js';
import type { FileEntryWithMetadata, FileMetadata } from '../../runtime/files.js';
import type { FileService } from '../../services/files.js';
import type { EnvdCall } from './context.js';
import { envdErrorBody } from './errors.js';
import { forEachFilePart, guarded } from './multipart.js';
import type { EnvdPaths } from './paths.js';

/** What envd's HTTP paths use. */
export interface EnvdRestDeps {
  files: Pick<FileService, 'read' | 'write'>;
  paths: Pick<EnvdPaths, 'resolve'>;
  log: Logger;
}

/** One written file in envd's answer to an upload (`metadata` only when the file has some). */
export interface WrittenFile {
  name: string;
  type: 'file';
  path: string;
  metadata?: FileMetadata;
}

/** The request-header prefix of a file's metadata on upload (`X-Metadata-<key>: <value>`). */
const METADATA_HEADER_PREFIX = 'x-metadata-';
/** The xattr namespace metadata lives in (the file tool adds it): keys are at most 255 bytes with it. */
const METADATA_XATTR_PREFIX = 'user.e2b.';
/** Most bytes of metadata on one file (names with their prefix, plus values): one ext4 block, as envd. */
export const MAX_METADATA_BYTES = 4096;
const PRINTABLE_ASCII = /^[\x20-\x7e]*$/;

/**
 * The metadata of an upload, as envd reads it: every `X-Metadata-<key>` header (key
 * lower-cased, as HTTP names are; the first value of a repeated one), checked as envd checks
 * it (`validation`, a 400: printable ASCII, keys at most 246 bytes, 4,096 bytes in all).
 * Undefined when there is none: an upload without metadata clears what the file had.
 */
export function uploadMetadata(headers: IncomingMessage['headersDistinct']): FileMetadata | undefined {
  let out: FileMetadata | undefined;
  let total = 0;
  for (const [name, values] of Object.entries(headers)) {
    if (!name.startsWith(METADATA_HEADER_PREFIX) || !values?.length) continue;
    const key = name.slice(METADATA_HEADER_PREFIX.length);
    const value = values[0];
    if (!key) continue;
    if (key.length > 255 - METADATA_XATTR_PREFIX.length)
      throw new SandboxdError(
        'validation',
        `invalid metadata: metadata key "${key}" exceeds ${255 - METADATA_XATTR_PREFIX.length} bytes`,
      );
    if (!PRINTABLE_ASCII.test(key) || !PRINTABLE_ASCII.test(value))
      throw new SandboxdError('validation', `invalid metadata: metadata for key "${key}" is not printable ASCII`);
    total += METADATA_XATTR_PREFIX.length + key.length + value.length;
    out ??= {};
    out[key] = value;
  }
  if (total > MAX_METADATA_BYTES)
    throw new SandboxdError(
      'validation',
      `invalid metadata: total metadata size ${total} exceeds ${MAX_METADATA_BYTES} bytes`,
    );
  return out;
}

/**
 * envd's plain HTTP paths: `GET /health` (204), `GET /files` (download) and `POST /files`
 * (upload: multipart, or a raw `application/octet-stream` body, gzip allowed). Files are
 * read and written inside the sandbox as `?username=` (else the call's user, else the
 * template's default); `?path=` resolves like envd's (relative to that user's home). A
 * signed call (no token) uses only its grant's user and path. Errors
 * are envd's JSON `{code, message}`. False: not a path of envd.
 */
export function envdRest(d: EnvdRestDeps) {
  return async (call: EnvdCall, req: IncomingMessage, res: ServerResponse): Promise<boolean> => {
    const url = new URL(req.url ?? '/', 'http://envd');
    if (url.pathname === '/health' && (req.method === 'GET' || req.method === 'HEAD')) {
      res.writeHead(204).end();
      return true;
    }
    // Other methods: the door's 404, as for any path envd does not serve.
    if (url.pathname !== '/files' || (req.method !== 'GET' && req.method !== 'POST')) return false;
    // A signed call acts only as its grant: its user and path, nothing the request adds.
    const user = call.signed
      ? (call.user ?? call.defaultUser)
      : url.searchParams.get('username') || call.user || call.defaultUser;
    const path = call.signed ? call.signed.path : url.searchParams.get('path');
    if (call.signed && call.signed.operation !== (req.method === 'GET' ? 'read' : 'write')) return false;
    try {
      if (req.method === 'GET') await download(d, call, user, path ?? '', req, res);
      else await upload(d, call, user, path, req, res);
    } catch (e) {
      const { status, message, kind } = httpError(e, user);
      if (status === 500) d.log.error({ err: e, sandboxId: call.sandbox.id }, 'envd /files failed');
      sendError(req, res, status, message, kind);
    }
    return true;
  };
}

async function download(
  d: EnvdRestDeps,
  call: EnvdCall,
  user: string | undefined,
  rawPath: string,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const path = await d.paths.resolve(call, rawPath, user);
  const range = parseRange(req.headers.range);
  const r = await d.files.read(call.accountId, call.sandbox.id, path, { range, user });
  const common = { 'accept-ranges': 'bytes', vary: 'Accept-Encoding' };
  if (r.unsatisfiable) {
    res.setHeader('content-range', `bytes */${r.size}`);
    throw new SandboxdError(
      'range_not_satisfiable',
      `Range ${req.headers.range} is outside the file (${r.size} bytes)`,
    );
  }
  const partial = range !== undefined && range !== '';
  const gzip = !partial && asksForGzip(req.headers['accept-encoding']);
  const headers: Record<string, string> = { ...common, 'content-type': 'application/octet-stream' };
  if (gzip) headers['content-encoding'] = 'gzip';
  else headers['content-length'] = String(r.end - r.start + 1);
  if (partial) headers['content-range'] = `bytes ${r.start}-${r.end}/${r.size}`;
  res.writeHead(partial ? 206 : 200, headers);
  // A body that fails midway (the sandbox stopped) ends the response short: the client
  // sees the connection close before Content-Length, never a truncated file as whole.
  await (gzip ? pipeline(r.body, createGzip(), res) : pipeline(r.body, res)).catch(() => res.destroy());
}

async function upload(
  d: EnvdRestDeps,
  call: EnvdCall,
  user: string | undefined,
  rawPath: string | null,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const contentType = req.headers['content-type'] ?? '';
  const media = contentType.split(';')[0].trim().toLowerCase();
  const encoding = (req.headers['content-encoding'] ?? '').trim().toLowerCase();
  if (encoding !== '' && encoding !== 'identity' && encoding !== 'gzip')
    throw new SandboxdError('validation', `Unsupported Content-Encoding ${encoding}: send gzip or none`);
  const body: Readable = encoding === 'gzip' ? req.pipe(createGunzip()) : req;
  if (body !== req) req.on('error', (e) => body.destroy(e));
  // Errors reach whoever reads the body (an errored stream throws when iterated); until
  // then, and after a failed write stopped reading, they must not go unheard.
  body.on('error', () => {});
  req.on('error', () => {});
  const aborted = new AbortController();
  const onClose = () => {
    if (!req.complete) aborted.abort();
  };
  req.once('close', onClose);
  const metadata = uploadMetadata(req.headersDistinct);
  const written: WrittenFile[] = [];
  const done = new Set<string>();
  const write = async (target: string, data: AsyncIterable<Uint8Array>, length?: number) => {
    const path = await d.paths.resolve(call, target, user);
    if (done.has(path))
      throw new SandboxdError(
        'validation',
        `You cannot upload multiple files to the same path '${path}' in one request; only the first was written`,
      );
    // envd writes as root: missing directories on the way are made and handed to the user.
    const e: FileEntryWithMetadata = await d.files.write(call.accountId, call.sandbox.id, path, data, {
      user,
      length,
      signal: aborted.signal,
      metadata,
      parentsAsRoot: true,
    });
    done.add(path);
    written.push({
      name: posix.basename(e.path) || e.name,
      type: 'file',
      path: e.path,
      ...(e.metadata ? { metadata: e.metadata } : {}),
    });
  };
  try {
    if (media === 'application/octet-stream') {
      if (!rawPath) throw new SandboxdError('validation', 'The path query parameter is required for a raw body upload');
      const n = Number(req.headers['content-length']);
      await write(rawPath, guarded(body), encoding !== 'gzip' && Number.isSafeInteger(n) && n >= 0 ? n : undefined);
    } else if (media.startsWith('multipart/')) {
      await forEachFilePart(body, contentType, async (part) => {
        const target = rawPath || part.filename;
        if (!target)
          throw new SandboxdError('validation', 'A file part has no file name and the request no path parameter');
        await write(target, part.body);
      });
    } else
      throw new SandboxdError(
        'validation',
        `Unsupported content type ${contentType || '(none)'}: expected multipart/form-data or application/octet-stream`,
      );
  } finally {
    req.off('close', onClose);
  }
  const json = JSON.stringify(written);
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json) });
  res.end(json);
}

/**
 * Whether a download is sent gzipped: when `Accept-Encoding` asks for gzip and no other
 * compression (`gzip`, as E2B's SDK sends for `read(..., {gzip: true})`). A client that
 * merely accepts several (fetch's default `gzip, deflate, br`) gets the file as it is, with
 * its Content-Length: compressing every download would cost the server a core per stream
 * for files that are often binary already (HTTP leaves the choice to the server).
 */
export function asksForGzip(header: string | string[] | undefined): boolean {
  const v = Array.isArray(header) ? header.join(',') : (header ?? '');
  let gzip = false;
  for (const item of v.split(',')) {
    const [name, ...params] = item.trim().toLowerCase().split(';');
    if (!name) continue;
    const q = params.map((p) => /^\s*q\s*=\s*([0-9.]+)\s*$/.exec(p)?.[1]).find((x) => x !== undefined);
    if (q !== undefined && Number(q) === 0) continue;
    if (name === 'gzip' || name === 'x-gzip') gzip = true;
    else if (name !== 'identity') return false;
  }
  return gzip;
}

/**
 * The status and message of envd's answer for a failed `/files` call: an unknown user is
 * 401 (envd's "error looking up user"), a sandbox that went meanwhile 502 (the SDK's
 * "sandbox was killed"), a full disk 507; other sandboxd errors keep their status (400
 * bad path, 403 permission, 404 missing, ...); anything else is a 500.
 */
export function httpError(
  e: unknown,
  user: string | undefined,
): { status: number; message: string; kind?: SandboxdError['kind'] } {
  if (!(e instanceof SandboxdError)) return { status: 500, message: 'Internal error' };
  const d = (typeof e.details === 'object' && e.details !== null ? e.details : {}) as Record<string, unknown>;
  if (e.kind === 'validation' && d.unknownUser === true)
    return { status: 401, message: `error looking up user '${user ?? ''}': no such user in the sandbox` };
  if (e.kind === 'conflict' && 'state' in d) return { status: 502, message: e.message };
  return { status: e.status, message: e.message, kind: e.kind };
}

/** An unread rest of a failed upload is read and dropped up to this much, then the connection closed. */
const DRAIN_MAX_BYTES = 256 << 20;
const DRAIN_MAX_MS = 30_000;

/**
 * envd's error answer (`{code, kind, message}`). When the request's body was not all read
 * (an upload that failed midway: no space, no permission) the rest is read and dropped,
 * bounded, so that the client, still sending, gets to read the answer (closing at once
 * would fail its send instead: "fetch failed" rather than the 507).
 */
function sendError(
  req: IncomingMessage,
  res: ServerResponse,
  status: number,
  message: string,
  kind?: SandboxdError['kind'],
): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = envdErrorBody(status, message, kind);
  const headers: Record<string, string | number> = {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body.json),
  };
  const range = res.getHeader('content-range');
  res.removeHeader('content-range');
  if (status === 416 && typeof range === 'string') headers['content-range'] = range;
  // Not `Connection: close`: Node would then close the socket as soon as the answer is out,
  // under the client's feet while it still sends.
  if (!req.complete) drain(req);
  res.writeHead(body.status, headers);
  res.end(body.json);
}

/** Reads and drops the rest of `req`'s body, at most {@link DRAIN_MAX_BYTES} and {@link DRAIN_MAX_MS}. */
function drain(req: IncomingMessage): void {
  req.unpipe();
  // A reader that stopped midway (an abandoned async iterator) may have left its 'readable'
  // listener: while one is attached, resume() does not make the stream flow.
  req.removeAllListeners('readable');
  let n = 0;
  const timer = setTimeout(() => req.destroy(), DRAIN_MAX_MS).unref();
  req.on('data', (chunk: Buffer) => {
    n += chunk.length;
    if (n > DRAIN_MAX_BYTES) req.destroy();
  });
  req.once('close', () => clearTimeout(timer));
  req.on('error', () => {});
  req.resume();
}
