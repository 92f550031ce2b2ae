/**
 * JSON requests over node:http(s) with keep-alive, used in Node instead of fetch when no
 * `fetch` option is given. Node 20's fetch (undici) costs ~0.4-0.6 ms more per request on
 * loopback than node:http with a keep-alive agent (measured side by side in one process),
 * which is a third of an exec round trip. Browsers, and requests with raw or streamed
 * bodies, keep using fetch.
 *
 * The modules come from `process.getBuiltinModule` (Node 20.16+), so the SDK has no import
 * of node: modules that a browser bundler would have to resolve.
 */

/** What the client needs of an answer. */
export interface NodeAnswer {
  status: number;
  statusText: string;
  header(name: string): string | null;
  text: string;
}

export interface NodeRequest {
  method: string;
  headers: Record<string, string>;
  body?: string;
  signal: AbortSignal;
}

export type NodeTransport = (url: string, req: NodeRequest) => Promise<NodeAnswer>;

// What is used of node:http and node:https, typed here: the SDK compiles without Node's types.
interface Emitter {
  on(event: string, listener: (...args: never[]) => void): unknown;
}
interface IncomingMessage extends Emitter {
  statusCode?: number;
  statusMessage?: string;
  complete: boolean;
  headers: Record<string, string | string[] | undefined>;
}
interface ClientRequest extends Emitter {
  end(body?: string): void;
}
interface HttpModule {
  Agent: new (o: { keepAlive: boolean }) => unknown;
  request(
    url: URL,
    o: { method: string; headers: Record<string, string | number>; agent: unknown; signal: AbortSignal },
    onResponse: (res: IncomingMessage) => void,
  ): ClientRequest;
}

/** The transport, or undefined outside Node (or in a Node without getBuiltinModule). */
export function nodeTransport(): NodeTransport | undefined {
  const getBuiltin = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process
    ?.getBuiltinModule;
  if (typeof getBuiltin !== 'function') return undefined;
  const http = getBuiltin('node:http') as HttpModule | undefined;
  const https = getBuiltin('node:https') as HttpModule | undefined;
  if (!http?.request || !https?.request) return undefined;
  // Idle sockets are unref'd by the agent: a kept connection never holds a program open.
  const agents = { 'http:': new http.Agent({ keepAlive: true }), 'https:': new https.Agent({ keepAlive: true }) };
  return (url, r) =>
    new Promise<NodeAnswer>((resolve, reject) => {
      const u = new URL(url);
      const secure = u.protocol === 'https:';
      const headers: Record<string, string | number> = { ...r.headers };
      if (r.body !== undefined) headers['content-length'] = new TextEncoder().encode(r.body).length;
      const req = (secure ? https : http).request(
        u,
        { method: r.method, headers, agent: secure ? agents['https:'] : agents['http:'], signal: r.signal },
        (res) => {
          const chunks: Uint8Array[] = [];
          let ended = false;
          res.on('data', (c: Uint8Array) => chunks.push(c));
          res.on('error', (e: Error) => reject(e));
          res.on('end', () => {
            ended = true;
            if (!res.complete) return reject(cutShort());
            resolve({
              status: res.statusCode ?? 0,
              statusText: res.statusMessage ?? '',
              header: (name) => {
                const v = res.headers[name.toLowerCase()];
                return v === undefined ? null : Array.isArray(v) ? v.join(', ') : String(v);
              },
              text: decode(chunks),
            });
          });
          // A connection that dies mid-answer may close the response without an error.
          res.on('close', () => {
            if (!ended) reject(cutShort());
          });
        },
      );
      req.on('error', (e: Error) => reject(e));
      req.end(r.body);
    });
}

function cutShort(): Error {
  return Object.assign(new Error('the connection closed before the whole answer arrived'), { code: 'ECONNRESET' });
}

function decode(chunks: Uint8Array[]): string {
  const d = new TextDecoder();
  return chunks.map((c) => d.decode(c, { stream: true })).join('') + d.decode();
}
