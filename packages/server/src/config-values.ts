/**
 * The value parsers of the server's settings (config.ts): each takes the raw text of one
 * `SANDBOXD_*` variable or config file key and returns its value, or throws a
 * {@link ConfigError} that names the setting.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';

/** Configuration errors abort start-up; the message names the setting. */
export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** Where an `api` process finds runners: a list of URLs, or a Kubernetes Service's endpoints. */
export type RunnerSource = { kind: 'urls'; urls: string[] } | { kind: 'k8s'; namespace: string; service: string };

/** Shortest `SANDBOXD_RUNNER_TOKEN` accepted. */
export const MIN_RUNNER_TOKEN_LENGTH = 16;

/**
 * `SANDBOXD_RUNNERS`: `http(s)://host:port` URLs, comma-separated (no path, query or
 * credentials), or `k8s:<namespace>/<service>` (DNS-1123 labels). Throws {@link ConfigError}.
 */
export function parseRunners(raw: string): RunnerSource {
  const s = raw.trim();
  if (s.startsWith('k8s:')) {
    const m = /^k8s:([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)\/([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)$/.exec(s);
    if (!m)
      throw new ConfigError(
        `SANDBOXD_RUNNERS: "${s}" must be k8s:<namespace>/<service>, each a lower-case DNS label (a-z, 0-9, -)`,
      );
    return { kind: 'k8s', namespace: m[1], service: m[3] };
  }
  const urls = s
    .split(',')
    .map((u) => u.trim())
    .filter(Boolean);
  if (!urls.length) throw new ConfigError('SANDBOXD_RUNNERS is empty: give runner URLs or k8s:<namespace>/<service>');
  const out: string[] = [];
  for (const u of urls) {
    let url: URL;
    try {
      url = new URL(u);
    } catch {
      throw new ConfigError(`SANDBOXD_RUNNERS: "${u}" is not a URL (expected http(s)://host:port)`);
    }
    if (!['http:', 'https:'].includes(url.protocol) || url.username || url.password || url.search || url.hash)
      throw new ConfigError(`SANDBOXD_RUNNERS: "${u}" must be an http:// or https:// URL without credentials or query`);
    if (url.pathname !== '/') throw new ConfigError(`SANDBOXD_RUNNERS: "${u}" must have no path (the runner's root)`);
    const norm = `${url.protocol}//${url.host}`;
    if (out.includes(norm)) throw new ConfigError(`SANDBOXD_RUNNERS: ${norm} is named twice`);
    out.push(norm);
  }
  return { kind: 'urls', urls: out };
}

/** Parses `image=size,...` (or `off`/`none`/`0`) into warm pool entries. Throws {@link ConfigError}. */
export function parseWarmPool(s: string): { image: string; size: number }[] {
  const text = s.trim();
  if (['off', 'none', '0', ''].includes(text)) return [];
  const out: { image: string; size: number }[] = [];
  for (const part of text
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean)) {
    const eq = part.lastIndexOf('=');
    const image = eq > 0 ? part.slice(0, eq).trim() : '';
    const size = eq > 0 ? Number(part.slice(eq + 1).trim()) : Number.NaN;
    if (!image || !Number.isInteger(size) || size < 0 || size > 10_000)
      throw new ConfigError(`SANDBOXD_WARM_POOL: "${part}" must be <image>=<size> with a size of 0..10000 (or "off")`);
    if (out.some((e) => e.image === image)) throw new ConfigError(`SANDBOXD_WARM_POOL: ${image} is named twice`);
    if (size > 0) out.push({ image, size });
  }
  return out;
}

/**
 * `SANDBOXD_DATABASE_URL`: a PostgreSQL URL (`postgres://` or `postgresql://`, as libpq and
 * `pg` take it). The error never repeats the value: it may hold a password.
 */
export function databaseUrl(raw: string): string {
  const url = raw.trim();
  let parsed: URL | null = null;
  try {
    parsed = new URL(url);
  } catch {
    /* below */
  }
  if (!parsed || !['postgres:', 'postgresql:'].includes(parsed.protocol))
    throw new ConfigError(
      `SANDBOXD_DATABASE_URL must be a postgres:// or postgresql:// URL (unset: SQLite in the data dir)${parsed ? `, got a ${parsed.protocol} URL` : ', got something that is not a URL'}`,
    );
  return url;
}

export function parseJson(name: string, raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    throw new ConfigError(`${name} is not valid JSON`);
  }
}

export function readJson(path: string): Record<string, unknown> {
  try {
    const v = JSON.parse(readFileSync(path, 'utf8'));
    if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('not a JSON object');
    return v;
  } catch (e) {
    throw new ConfigError(`SANDBOXD_CONFIG ${path}: ${(e as Error).message}`);
  }
}

export function parseIntStrict(name: string, s: string, min: number, max: number): number {
  if (!/^-?\d+$/.test(s.trim())) throw new ConfigError(`${name} must be an integer, got "${s}"`);
  const n = Number(s);
  if (n < min || n > max) throw new ConfigError(`${name} must be between ${min} and ${max}, got ${n}`);
  return n;
}

/** `none`, `internet`, or `nat` (the old name of `internet`). */
export function parseEgress(s: string): 'none' | 'internet' {
  const v = oneOf('SANDBOXD_EGRESS', ['none', 'internet', 'nat'] as const)(s);
  return v === 'nat' ? 'internet' : v;
}

export function parseEgressVia(s: string): string {
  if (!/^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,14}(:\d{1,3}(\.\d{1,3}){3})?$/.test(s))
    throw new ConfigError(`SANDBOXD_EGRESS_VIA must be an interface name, or name:next-hop-address, got "${s}"`);
  return s;
}

/** `SANDBOXD_EGRESS_CA_FILE`: a readable PEM file holding at least one certificate; its absolute path. */
export function parseEgressCaFile(s: string): string {
  const path = resolve(s);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new ConfigError(
      `SANDBOXD_EGRESS_CA_FILE: cannot read ${path} (${(e as NodeJS.ErrnoException).code ?? 'error'})`,
    );
  }
  if (!text.includes('-----BEGIN CERTIFICATE-----'))
    throw new ConfigError(`SANDBOXD_EGRESS_CA_FILE: ${path} holds no PEM certificate`);
  return path;
}

export function parseEgressDns(s: string): { host: string; port: number }[] {
  return s.split(',').map((item) => {
    const m = /^(\d{1,3}(?:\.\d{1,3}){3})(?::(\d{1,5}))?$/.exec(item.trim());
    const port = m?.[2] === undefined ? 53 : Number(m[2]);
    if (!m || port < 1 || port > 65535)
      throw new ConfigError(
        `SANDBOXD_EGRESS_DNS must be IPv4 addresses with optional ports, ip[:port],..., got "${s}"`,
      );
    return { host: m[1], port };
  });
}

export function oneOf<T extends string>(name: string, values: readonly T[]) {
  return (s: string): T => {
    if (!(values as readonly string[]).includes(s))
      throw new ConfigError(`${name} must be one of ${values.join(', ')}, got "${s}"`);
    return s as T;
  };
}

export function bool(name: string) {
  return (s: string): boolean => {
    if (['1', 'true', 'yes', 'on'].includes(s.toLowerCase())) return true;
    if (['0', 'false', 'no', 'off'].includes(s.toLowerCase())) return false;
    throw new ConfigError(`${name} must be a boolean (1/0/true/false), got "${s}"`);
  };
}

export function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object') {
    for (const v of Object.values(o)) deepFreeze(v);
    Object.freeze(o);
  }
  return o;
}
