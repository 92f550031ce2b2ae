/**
 * A small in-process server that speaks the files and processes contract
 * (docs/files-and-processes.md) for the SDK's unit tests: each test routes the requests it
 * cares about; everything else is a 404 `not_found`. WebSocket upgrades (file watches) go
 * to `routeWs`.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import { Sandbox } from '../src/sandbox.js';
import type { SandboxInfo } from '../src/types.js';

export const SANDBOX_ID = 'sbx_aaaaaaaaaaaaaaaaaaaa';
export const KEY = 'sk_unit_test_key';
const BASE = `/api/v1/sandboxes/${SANDBOX_ID}`;

export type Handler = (req: IncomingMessage, res: ServerResponse, url: URL) => void | Promise<void>;
export type WsHandler = (
  req: IncomingMessage,
  url: URL,
  accept: (onOpen: (ws: WebSocket) => void) => void,
  refuse: (status: number, body: unknown) => void,
) => void;

export interface FakeServer {
  url: string;
  /** Every request, in arrival order: method, path with query, headers. */
  seen: { method: string; url: string; headers: IncomingMessage['headers'] }[];
  /** Answers `METHOD /sub` (the path after `/api/v1/sandboxes/{id}`, without the query). */
  route(method: string, sub: string | RegExp, handler: Handler): void;
  routeWs(sub: string, handler: WsHandler): void;
  /** A sandbox object of this server (the SDK's, with the test key). */
  sandbox(): Sandbox;
  close(): Promise<void>;
}

export function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

/** An error answer as the server writes them: `{code, kind, message, details?}`. */
export function fail(res: ServerResponse, status: number, kind: string, message: string, details?: unknown): void {
  json(res, status, { code: status, kind, message, ...(details === undefined ? {} : { details }) });
}

/** Reads a request body whole. */
export async function body(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/** Starts an NDJSON answer; `line` writes one object (flushed at once). */
export function ndjson(res: ServerResponse): { line(o: unknown): void; end(): void } {
  res.writeHead(200, { 'content-type': 'application/x-ndjson' });
  res.flushHeaders();
  return { line: (o) => res.write(`${JSON.stringify(o)}\n`), end: () => res.end() };
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function fakeServer(): Promise<FakeServer> {
  const routes: { method: string; sub: string | RegExp; handler: Handler }[] = [];
  const wsRoutes = new Map<string, WsHandler>();
  const seen: FakeServer['seen'] = [];
  const wss = new WebSocketServer({ noServer: true });
  const sockets = new Set<Duplex>();

  const find = (method: string, url: URL) => {
    if (!url.pathname.startsWith(BASE)) return undefined;
    const sub = url.pathname.slice(BASE.length);
    return routes.find((r) => r.method === method && (typeof r.sub === 'string' ? r.sub === sub : r.sub.test(sub)));
  };

  const server: Server = createServer((req, res) => {
    seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers });
    const url = new URL(req.url ?? '/', 'http://x');
    if (req.headers.authorization !== `Bearer ${KEY}`) return fail(res, 401, 'unauthorized', 'Bad key');
    const r = find(req.method ?? '', url);
    if (!r) return fail(res, 404, 'not_found', 'Sandbox not found');
    Promise.resolve(r.handler(req, res, url)).catch((e) => {
      if (!res.headersSent) fail(res, 500, 'internal', String(e));
      else res.destroy();
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    seen.push({ method: 'WS', url: req.url ?? '', headers: req.headers });
    const url = new URL(req.url ?? '/', 'http://x');
    const refuse = (status: number, b: unknown) => {
      const text = JSON.stringify(b);
      socket.end(
        `HTTP/1.1 ${status} Refused\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`,
      );
    };
    if (req.headers.authorization !== `Bearer ${KEY}`)
      return refuse(401, { code: 401, kind: 'unauthorized', message: 'Bad key' });
    const h = url.pathname.startsWith(BASE) ? wsRoutes.get(url.pathname.slice(BASE.length)) : undefined;
    if (!h) return refuse(404, { code: 404, kind: 'not_found', message: 'Sandbox not found' });
    h(req, url, (onOpen) => wss.handleUpgrade(req, socket, head, onOpen), refuse);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;

  return {
    url,
    seen,
    route: (method, sub, handler) => void routes.unshift({ method, sub, handler }),
    routeWs: (sub, handler) => void wsRoutes.set(sub, handler),
    sandbox: () =>
      Sandbox.from({ id: SANDBOX_ID, name: 'unit', state: 'started' } as unknown as SandboxInfo, {
        apiUrl: url,
        apiKey: KEY,
        maxRetries: 0,
      }),
    close: () =>
      new Promise((r) => {
        for (const c of wss.clients) c.terminate();
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}
