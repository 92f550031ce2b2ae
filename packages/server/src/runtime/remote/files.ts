import { once } from 'node:events';
import type { ClientRequest, IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';
import type { FileEntry, FileEvent } from '@sandboxd/protocol';
import { SandboxdError } from '@sandboxd/protocol';
import type { DriverFiles, FileList, FileRead, FileUser, FileUserInfo, FileWatch } from '../files.js';
import { readJson, type RunnerClient } from './client.js';

/** Header names shared with `runner/files.ts`. */
const ARGS_HEADER = 'x-sandboxd-args';
const READ_META_HEADER = 'x-sandboxd-read';

/**
 * {@link DriverFiles} over a runner: the small calls as unary calls; file content as a
 * streamed HTTP body each way (TCP carries the backpressure); a watch as NDJSON.
 */
export class RemoteFiles implements DriverFiles {
  constructor(private readonly r: RunnerClient) {}

  stat(id: string, path: string, o?: FileUser): Promise<FileEntry> {
    return this.r.call('files.stat', [id, path, o]);
  }
  list(id: string, path: string, o: FileUser & { depth: number; max?: number }): Promise<FileList> {
    return this.r.call('files.list', [id, path, o]);
  }
  mkdir(id: string, path: string, o?: FileUser): Promise<FileEntry> {
    return this.r.call('files.mkdir', [id, path, o]);
  }
  move(id: string, from: string, to: string, o?: FileUser): Promise<FileEntry> {
    return this.r.call('files.move', [id, from, to, o]);
  }
  async remove(id: string, path: string, o?: FileUser): Promise<void> {
    await this.r.call('files.remove', [id, path, o]);
  }
  whoami(id: string, o?: FileUser): Promise<FileUserInfo> {
    return this.r.call('files.whoami', [id, o]);
  }

  async read(id: string, path: string, o?: FileUser & { range?: string }): Promise<FileRead> {
    const res = await this.r.send('files.read', { body: JSON.stringify({ args: [id, path, o] }), retryReset: true });
    const meta = JSON.parse(String(res.headers[READ_META_HEADER] ?? '{}')) as {
      unsatisfiable: boolean;
      size: number;
      start: number;
      end: number;
    };
    if (meta.unsatisfiable) {
      res.resume();
      return { unsatisfiable: true, size: meta.size };
    }
    return { unsatisfiable: false, size: meta.size, start: meta.start, end: meta.end, body: res };
  }

  async write(
    id: string,
    path: string,
    body: AsyncIterable<Uint8Array>,
    o: FileUser & { mode?: string; length?: number; signal?: AbortSignal } = {},
  ): Promise<FileEntry> {
    const { signal, ...rest } = o;
    signal?.throwIfAborted();
    let bodyError: unknown = null;
    let request: ClientRequest | null = null;
    const onAbort = () => request?.destroy(signal?.reason ?? new Error('aborted'));
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const res = await this.r.send('files.write', {
        headers: { [ARGS_HEADER]: JSON.stringify([id, path, rest]), 'content-type': 'application/octet-stream' },
        timeoutMs: 24 * 3_600_000,
        body: (req) => {
          request = req;
          void (async () => {
            try {
              for await (const chunk of body) {
                if (req.destroyed) return;
                if (!req.write(chunk)) await once(req, 'drain');
              }
              req.end();
            } catch (e) {
              bodyError = e;
              req.destroy(e as Error);
            }
          })();
        },
      });
      return ((await readJson(res, this.r.name)) as { result: FileEntry }).result;
    } catch (e) {
      if (signal?.aborted) throw signal.reason ?? e;
      throw bodyError ?? e;
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /**
   * The copy stream as a streamed request body (`files.unpack`); the runner's agent writes
   * it. When the runner answers before the body is all sent (it refused the stream), the
   * rest is not sent: the request is cut.
   */
  async unpack(id: string, dest: string, body: AsyncIterable<Uint8Array>): Promise<{ entries: number; bytes: number }> {
    let bodyError: unknown = null;
    let request: ClientRequest | null = null;
    let answered = false;
    try {
      const res = await this.r.send('files.unpack', {
        headers: { [ARGS_HEADER]: JSON.stringify([id, dest]), 'content-type': 'application/octet-stream' },
        timeoutMs: 24 * 3_600_000,
        body: (req) => {
          request = req;
          void (async () => {
            try {
              for await (const chunk of body) {
                if (req.destroyed || answered) return;
                if (!req.write(chunk)) await once(req, 'drain');
              }
              req.end();
            } catch (e) {
              bodyError = e;
              req.destroy(e as Error);
            }
          })();
        },
      });
      return ((await readJson(res, this.r.name)) as { result: { entries: number; bytes: number } }).result;
    } catch (e) {
      throw bodyError ?? e;
    } finally {
      answered = true;
      const req = request as ClientRequest | null;
      if (req && !req.writableFinished) req.destroy();
    }
  }

  /** The copy stream as the answer's body (`files.pack`); a cut answer errors the stream. */
  async pack(id: string, path: string, o?: { follow?: boolean }): Promise<Readable> {
    return this.r.send('files.pack', { body: JSON.stringify({ args: [id, path, o] }), retryReset: true });
  }

  async watch(id: string, path: string, o: FileUser & { recursive: boolean }): Promise<FileWatch> {
    const res = await this.r.send('files.watch', { body: JSON.stringify({ args: [id, path, o] }) });
    return new Promise<FileWatch>((resolve, reject) => {
      const w = new RemoteWatch(res, () => resolve(w), reject, this.r.name);
    });
  }
}

/** The NDJSON lines of a watch's answer. */
class RemoteWatch implements FileWatch {
  private listener: ((e: FileEvent | { type: 'overflow' }) => void) | null = null;
  private queued: Array<FileEvent | { type: 'overflow' }> = [];
  private endListeners: Array<() => void> = [];
  private ended = false;
  private rest = '';

  constructor(
    private readonly res: IncomingMessage,
    ready: () => void,
    fail: (e: unknown) => void,
    runner: string,
  ) {
    let isReady = false;
    res.setEncoding('utf8');
    res.on('data', (text: string) => {
      const lines = (this.rest + text).split('\n');
      this.rest = lines.pop() ?? '';
      for (const line of lines) {
        if (!line) continue;
        const msg = JSON.parse(line) as { type: string; event?: FileEvent | { type: 'overflow' } };
        if (msg.type === 'ready') {
          isReady = true;
          ready();
        } else if (msg.type === 'event' && msg.event) {
          if (this.listener) this.listener(msg.event);
          else this.queued.push(msg.event);
        }
      }
    });
    const end = () => {
      if (!isReady) fail(new SandboxdError('unavailable', `Runner ${runner} ended the watch before it was set up`));
      if (this.ended) return;
      this.ended = true;
      for (const l of this.endListeners) l();
    };
    res.on('end', end);
    res.on('error', end);
    res.on('close', end);
  }

  onEvent(listener: (e: FileEvent | { type: 'overflow' }) => void): void {
    this.listener = listener;
    for (const e of this.queued.splice(0)) listener(e);
  }
  onEnd(listener: () => void): void {
    if (this.ended) listener();
    else this.endListeners.push(listener);
  }
  close(): void {
    this.res.destroy();
  }
}
