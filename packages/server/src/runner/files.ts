import type { IncomingMessage, ServerResponse } from 'node:http';
import { pipeline } from 'node:stream/promises';
import { SandboxdError } from '@sandboxd/protocol';
import type { RuntimeDriver } from '../runtime/driver.js';
import type { FileUser } from '../runtime/files.js';

/** The header that carries a streamed call's arguments (JSON) or a read's meta. */
export const ARGS_HEADER = 'x-sandboxd-args';
export const READ_META_HEADER = 'x-sandboxd-read';

/**
 * `files.read`: the answer's header {@link READ_META_HEADER} holds `{unsatisfiable, size,
 * start?, end?}` and the body the bytes. A body that fails midway is cut (the connection
 * is destroyed), so the client's body errors instead of ending short.
 */
export async function serveFileRead(driver: RuntimeDriver, args: unknown[], res: ServerResponse): Promise<void> {
  const [id, path, o] = args as [string, string, (FileUser & { range?: string }) | undefined];
  const r = await driver.files.read(id, path, o);
  if (r.unsatisfiable) {
    res.writeHead(200, {
      [READ_META_HEADER]: JSON.stringify({ unsatisfiable: true, size: r.size }),
      'Content-Length': 0,
    });
    res.end();
    return;
  }
  const { body, ...meta } = r;
  res.writeHead(200, {
    [READ_META_HEADER]: JSON.stringify(meta),
    'Content-Type': 'application/octet-stream',
  });
  try {
    await pipeline(body, res);
  } catch {
    res.destroy();
  }
}

/**
 * `files.write`: arguments `[id, path, {user, mode, length}]` in {@link ARGS_HEADER}, the
 * content as the request body. A client that goes away mid-body aborts the write (nothing
 * is left). Answers `{result: FileEntry}`.
 */
export async function serveFileWrite(driver: RuntimeDriver, req: IncomingMessage, res: ServerResponse): Promise<void> {
  let args: [string, string, (FileUser & { mode?: string; length?: number }) | undefined];
  try {
    args = JSON.parse(String(req.headers[ARGS_HEADER] ?? ''));
  } catch {
    req.resume();
    throw new SandboxdError('validation', `files.write needs its arguments in ${ARGS_HEADER}`);
  }
  const [id, path, o] = args;
  const abort = new AbortController();
  req.on('close', () => {
    if (!req.complete) abort.abort(new Error('the API replica went away mid-upload'));
  });
  const entry = await driver.files.write(id, path, req as AsyncIterable<Uint8Array>, { ...o, signal: abort.signal });
  const text = JSON.stringify({ result: entry });
  res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

/**
 * `files.unpack`: arguments `[id, dest]` in {@link ARGS_HEADER}, the copy stream as the
 * request body (runtime/copy-stream.ts). Answers `{result: {entries, bytes}}`.
 */
export async function serveFileUnpack(driver: RuntimeDriver, req: IncomingMessage, res: ServerResponse): Promise<void> {
  let args: [string, string];
  try {
    args = JSON.parse(String(req.headers[ARGS_HEADER] ?? ''));
  } catch {
    req.resume();
    throw new SandboxdError('validation', `files.unpack needs its arguments in ${ARGS_HEADER}`);
  }
  if (!Array.isArray(args) || typeof args[0] !== 'string' || typeof args[1] !== 'string') {
    req.resume();
    throw new SandboxdError('validation', 'files.unpack takes [sandboxId, dest]');
  }
  const result = await driver.files.unpack(args[0], args[1], req as AsyncIterable<Uint8Array>);
  const text = JSON.stringify({ result });
  res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

/**
 * `files.pack`: the copy stream as the answer's body. A stream that fails midway is cut (the
 * connection is destroyed), so the client's body errors instead of ending short.
 */
export async function serveFilePack(driver: RuntimeDriver, args: unknown[], res: ServerResponse): Promise<void> {
  const [id, path, o] = args as [string, string, { follow?: boolean } | undefined];
  const body = await driver.files.pack(id, path, o);
  res.writeHead(200, { 'Content-Type': 'application/octet-stream' });
  try {
    await pipeline(body, res);
  } catch {
    res.destroy();
  }
}

/**
 * `files.watch`: NDJSON lines, `{type:'ready'}` once the watch is set up, then
 * `{type:'event', event}` for each event, and the body ends when the watch ends. The
 * client closes the watch by closing the request.
 */
export async function serveFileWatch(driver: RuntimeDriver, args: unknown[], res: ServerResponse): Promise<void> {
  const [id, path, o] = args as [string, string, FileUser & { recursive: boolean }];
  const watch = await driver.files.watch(id, path, o);
  res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
  res.write(`${JSON.stringify({ type: 'ready' })}\n`);
  watch.onEvent((event) => res.write(`${JSON.stringify({ type: 'event', event })}\n`));
  watch.onEnd(() => res.end());
  res.on('close', () => watch.close());
}
