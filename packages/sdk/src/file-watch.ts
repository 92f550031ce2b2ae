/**
 * File watches: `GET .../files/watch` upgraded to a WebSocket of JSON text messages, one
 * per change (inotify inside the sandbox), opened through the same seam and with the same
 * credentials as terminals (websocket.ts).
 */
import { ConnectionError, errorFromResponse } from './errors.js';
import type { HttpClient } from './http.js';
import type { FileEvent } from './types.js';
import { openWebSocket, type WebSocketLike } from './websocket.js';

/** Options of `files.watch`. */
export interface FileWatchOptions {
  /** Also report changes in subdirectories. Default false. */
  recursive?: boolean;
  /** Who the watch runs as (see FileCallOptions). */
  user?: string;
}

/** How a watch ended: 1000 when closed by `close()` or because the sandbox stopped. */
export interface FileWatchEnd {
  code: number;
  reason: string;
}

/** A running watch. */
export class FileWatcher {
  /** Resolves when the watch has ended, by `close()`, the sandbox stopping or the connection dropping. */
  readonly closed: Promise<FileWatchEnd>;
  private ws: WebSocketLike | undefined;
  private ended!: (end: FileWatchEnd) => void;

  private constructor(readonly path: string) {
    this.closed = new Promise((resolve) => (this.ended = resolve));
  }

  /** Opens a watch at the ws(s):// `url`; resolves once the server accepted it. */
  static async open(
    http: HttpClient,
    url: string,
    path: string,
    onEvent: (event: FileEvent) => void,
  ): Promise<FileWatcher> {
    const w = new FileWatcher(path);
    w.ws = await openWebSocket(url, {
      headers: { ...http.config.headers, ...http.authHeaders() },
      WebSocket: http.config.WebSocket,
      onMessage: (data) => {
        const event = parseEvent(data);
        if (event) onEvent(event);
      },
      onClose: (code, reason) => w.ended({ code, reason }),
      onRefused: (status, body) => {
        let parsed: unknown = body;
        try {
          parsed = JSON.parse(body);
        } catch {
          /* not JSON */
        }
        return errorFromResponse(status, parsed);
      },
      onFailed: (why) =>
        new ConnectionError(`Cannot watch ${path}: ${why}`, {
          status: 0,
          kind: 'connection',
        }),
    });
    return w;
  }

  /** Stops watching. */
  close(): void {
    this.ws?.close(1000);
  }
}

/** A change message; anything else (not JSON, no type or path) is ignored. */
function parseEvent(data: unknown): FileEvent | undefined {
  if (typeof data !== 'string') return undefined;
  try {
    const m = JSON.parse(data) as FileEvent;
    return m && typeof m.type === 'string' && typeof m.path === 'string' ? m : undefined;
  } catch {
    return undefined;
  }
}
