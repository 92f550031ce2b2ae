/**
 * Finds a WHATWG WebSocket: the one passed in, the global one (browsers, Node 22+), or the
 * `ws` package in Node 20, loaded by a dynamic import only on the Node path so browser
 * bundles never see it.
 */
import { isNode } from './config.js';

/** The subset of the WHATWG WebSocket the SDK uses. */
export interface WebSocketLike {
  binaryType: string;
  readonly readyState: number;
  send(data: string | ArrayBufferLike | Uint8Array): void;
  close(code?: number, reason?: string): void;
  // biome-ignore lint/suspicious/noExplicitAny: the DOM, ws and undici WebSockets type their events differently
  addEventListener(type: string, listener: (ev: any) => void): void;
}

/** A WebSocket constructor; the second argument carries headers in Node (`ws`, undici). */
// biome-ignore lint/suspicious/noExplicitAny: the DOM, ws and undici WebSockets type their constructor options differently
export type WebSocketConstructor = new (url: string, protocolsOrOptions?: any) => WebSocketLike;

// Kept in a variable so bundlers leave the import alone.
const WS_PACKAGE = 'ws';

/** Picks the implementation; rejects when none exists (Node 20 without `ws` installed). */
export async function loadWebSocket(
  given?: WebSocketConstructor,
): Promise<{ ctor: WebSocketConstructor; headers: boolean }> {
  if (given) return { ctor: given, headers: isNode() };
  if (isNode()) {
    try {
      const mod = (await import(/* @vite-ignore */ WS_PACKAGE)) as {
        WebSocket?: WebSocketConstructor;
        default?: WebSocketConstructor;
      };
      const ctor = mod.WebSocket ?? mod.default;
      if (ctor) return { ctor, headers: true };
    } catch {
      /* fall through to the global one */
    }
  }
  const g = (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
  if (g) return { ctor: g, headers: isNode() };
  throw new TypeError(
    'No WebSocket implementation: install the "ws" package (npm install ws) or pass the WebSocket option',
  );
}

/** Options of {@link openWebSocket}. */
export interface OpenOptions {
  headers: Record<string, string>;
  WebSocket?: WebSocketConstructor;
  /** Every message, from the first one on: a string (text frame) or an ArrayBuffer (binary). */
  onMessage: (data: unknown) => void;
  /** The socket closed (also after a failed open). */
  onClose: (code: number, reason: string) => void;
  /** The error for an upgrade the server refused with `status` and `body`. */
  onRefused: (status: number, body: string) => Error;
  /** The error for any other failure to open. */
  onFailed: (why: string) => Error;
}

/**
 * Opens `url`; resolves once open. In Node, `headers` go with the upgrade request; in
 * browsers they cannot, and the session cookie authenticates instead. When the server
 * refuses the upgrade and the implementation shows the answer (`ws`), `onRefused` gets
 * its status and body.
 */
export async function openWebSocket(url: string, o: OpenOptions): Promise<WebSocketLike> {
  const { ctor, headers } = await loadWebSocket(o.WebSocket);
  const ws = headers ? new ctor(url, { headers: o.headers }) : new ctor(url);
  ws.binaryType = 'arraybuffer';
  // Attached before open: frames that arrive with the handshake are not lost.
  ws.addEventListener('message', (ev: { data: unknown }) => o.onMessage(ev.data));
  ws.addEventListener('close', (ev: { code?: number; reason?: string }) =>
    o.onClose(ev?.code ?? 1006, ev?.reason ?? ''),
  );
  return new Promise((resolve, reject) => {
    let settled = false;
    const fail = (err: Error) => {
      if (settled) return;
      settled = true;
      reject(err);
    };
    // biome-ignore lint/suspicious/noExplicitAny: each ws event has its own listener arguments
    const node = ws as unknown as { on?: (ev: string, fn: (...a: any[]) => void) => void; terminate?: () => void };
    if (typeof node.on === 'function') {
      // `ws` shows the refused answer; read its body for a typed error.
      node.on('unexpected-response', (_req: unknown, res: AsyncIterable<Uint8Array> & { statusCode: number }) => {
        void (async () => {
          let text = '';
          const dec = new TextDecoder();
          try {
            for await (const chunk of res) text += dec.decode(chunk, { stream: true });
          } catch {
            /* keep what arrived */
          }
          fail(o.onRefused(res.statusCode, text));
          node.terminate?.();
        })();
      });
    }
    ws.addEventListener('open', () => {
      if (settled) return;
      settled = true;
      resolve(ws);
    });
    ws.addEventListener('error', (ev: { message?: string; error?: Error }) =>
      fail(o.onFailed(ev?.message ?? ev?.error?.message ?? 'connection failed')),
    );
    ws.addEventListener('close', (ev: { code?: number }) =>
      fail(o.onFailed(`closed with code ${ev?.code ?? 'unknown'} before opening`)),
    );
  });
}
