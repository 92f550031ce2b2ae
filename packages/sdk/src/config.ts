/**
 * Client options and their defaults. Reads the environment only when `process` exists, so
 * the same code runs in browsers.
 */
import type { WebSocketConstructor } from './websocket.js';

/** The API address used when neither an option nor `SANDBOX_API_URL` gives one (outside browsers). */
export const DEFAULT_API_URL = 'http://localhost:8080';
/** Per-request timeout in ms when the option is not given. */
export const DEFAULT_TIMEOUT_MS = 60_000;
/** Retries of idempotent reads (GET) after a connection error, 429, 502, 503 or 504. */
export const DEFAULT_MAX_RETRIES = 2;

/** How to reach and authenticate with a sandboxd server. Every field is optional. */
export interface ClientOptions {
  /** API key (`sk_...`). Default: `SANDBOX_API_KEY`. Without one, browsers send the session cookie. */
  apiKey?: string;
  /** Server address, e.g. `https://sandboxd.example.com`. Default: `SANDBOX_API_URL`, else the page's origin in a browser, else {@link DEFAULT_API_URL}. */
  apiUrl?: string;
  /** Per-request timeout in ms (default 60000). Long operations (exec, image builds) extend it. */
  timeoutMs?: number;
  /** Retries of GET requests on connection errors, 429, 502, 503, 504 (default 2). Creates and other writes are never retried. */
  maxRetries?: number;
  /** A fetch implementation (default: the global one). */
  fetch?: typeof fetch;
  /** A WHATWG WebSocket implementation for terminals (default: global, or the `ws` package in Node). */
  WebSocket?: WebSocketConstructor;
  /** Extra headers on every request. */
  headers?: Record<string, string>;
}

/** Options with every default applied. */
export interface ResolvedConfig {
  apiKey: string | undefined;
  /** Without a trailing slash. */
  apiUrl: string;
  timeoutMs: number;
  maxRetries: number;
  fetch: typeof fetch;
  WebSocket: WebSocketConstructor | undefined;
  headers: Record<string, string>;
}

function env(name: string): string | undefined {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  const v = p?.env?.[name];
  return v === undefined || v === '' ? undefined : v;
}

function pageOrigin(): string | undefined {
  const loc = (globalThis as { location?: { origin?: string; protocol?: string } }).location;
  return loc?.origin && /^https?:$/.test(loc.protocol ?? '') ? loc.origin : undefined;
}

/** True in Node (also under Bun/Deno's Node compatibility); false in browsers. */
export function isNode(): boolean {
  const p = (globalThis as { process?: { versions?: { node?: string } } }).process;
  return typeof p?.versions?.node === 'string';
}

/** Applies defaults: options, then the environment, then the page's origin, then localhost:8080. */
export function resolveConfig(o: ClientOptions = {}): ResolvedConfig {
  const apiUrl = (o.apiUrl ?? env('SANDBOX_API_URL') ?? pageOrigin() ?? DEFAULT_API_URL).replace(/\/+$/, '');
  if (!/^https?:\/\//i.test(apiUrl))
    throw new TypeError(`apiUrl must start with http:// or https:// (got "${apiUrl}")`);
  const f = o.fetch ?? (globalThis.fetch as typeof fetch | undefined);
  if (!f) throw new TypeError('No fetch implementation: pass the fetch option (Node 18+ and browsers have one)');
  return {
    apiKey: o.apiKey ?? env('SANDBOX_API_KEY'),
    apiUrl,
    timeoutMs: o.timeoutMs ?? DEFAULT_TIMEOUT_MS,
    maxRetries: Math.max(0, Math.min(o.maxRetries ?? DEFAULT_MAX_RETRIES, 10)),
    fetch: o.fetch ?? f.bind(globalThis),
    WebSocket: o.WebSocket,
    headers: { ...(o.headers ?? {}) },
  };
}
