import { SandboxdError } from '@sandboxd/protocol';

/*
 * Pure pieces of E2B's sandbox list (`GET /v2/sandboxes`): its query parameters as E2B's
 * SDK sends them, and the paging over a list that is filtered and ordered in memory. The
 * running and paused sandboxes of one account are few (the plan's concurrency and maxPaused bound them), so the
 * list is read whole, filtered, ordered and cut into pages here.
 */

/** Bounds of `limit` (E2B's default page is 100). */
export const LIST_LIMITS = { default: 100, max: 1000 } as const;

/** The E2B states a list may ask for: `running` (sandboxd's `started`) and `paused`. */
export const E2B_STATES = ['running', 'paused'] as const;
export type E2bState = (typeof E2B_STATES)[number];

function badQuery(field: string, message: string): SandboxdError {
  return new SandboxdError('validation', `${field} ${message}`, [{ in: 'query', path: `/${field}`, message }]);
}

/**
 * E2B's `metadata` filter: a query string (`user=abc&app=prod`) whose keys and values are
 * each URL-encoded once more (the SDK encodes them, then builds the query string, which the
 * HTTP client encodes again as a parameter value). Returns the pairs; `validation` naming
 * `metadata` for a malformed one (a bad escape, an empty key, a key given twice).
 */
export function parseMetadataFilter(raw: string | undefined): Record<string, string> {
  const pairs: Array<[string, string]> = [];
  const seen = new Set<string>();
  if (raw === undefined || raw === '') return {};
  for (const [k, v] of new URLSearchParams(raw)) {
    let key: string;
    let value: string;
    try {
      key = decodeURIComponent(k);
      value = decodeURIComponent(v);
    } catch {
      throw badQuery('metadata', 'has a malformed %-escape; each key and value must be URL-encoded');
    }
    if (key === '') throw badQuery('metadata', 'has an empty key');
    if (seen.has(key)) throw badQuery('metadata', `names the key ${JSON.stringify(key)} twice`);
    seen.add(key);
    pairs.push([key, value]);
  }
  // fromEntries defines every key as its own (`__proto__` included, which `out[k] = v` would not).
  return Object.fromEntries(pairs);
}

/** True when every pair of `filter` is in `metadata`. */
export function matchesMetadata(metadata: Record<string, string> | undefined, filter: Record<string, string>): boolean {
  return Object.entries(filter).every(
    ([k, v]) => metadata !== undefined && Object.hasOwn(metadata, k) && metadata[k] === v,
  );
}

/**
 * E2B's `state` filter: `running,paused` (an array the SDK joins with commas), or the
 * parameter repeated. Absent: both.
 */
export function parseStates(raw: string | string[] | undefined): Set<E2bState> {
  if (raw === undefined) return new Set(E2B_STATES);
  const parts = (Array.isArray(raw) ? raw : [raw]).flatMap((s) => s.split(',')).map((s) => s.trim());
  const out = new Set<E2bState>();
  for (const p of parts) {
    if (!(E2B_STATES as readonly string[]).includes(p))
      throw badQuery('state', `must be ${E2B_STATES.join(' or ')} (comma-separated), got ${JSON.stringify(p)}`);
    out.add(p as E2bState);
  }
  return out;
}

/** `limit`: an integer 1..{@link LIST_LIMITS.max}; absent: the default. */
export function parseLimit(raw: string | undefined): number {
  if (raw === undefined) return LIST_LIMITS.default;
  if (!/^[0-9]{1,7}$/.test(raw) || Number(raw) < 1 || Number(raw) > LIST_LIMITS.max)
    throw badQuery('limit', `must be an integer from 1 to ${LIST_LIMITS.max}`);
  return Number(raw);
}

/** `order`: `asc` or `desc` by start time; absent: `desc` (newest first). */
export function parseOrder(raw: string | undefined): 'asc' | 'desc' {
  if (raw === undefined) return 'desc';
  if (raw !== 'asc' && raw !== 'desc') throw badQuery('order', 'must be asc or desc');
  return raw;
}

/** `startedAfter`: an ISO 8601 time; absent: no bound. Epoch ms. */
export function parseStartedAfter(raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  const t = Date.parse(raw);
  if (!/^\d{4}-\d{2}-\d{2}/.test(raw) || Number.isNaN(t)) throw badQuery('startedAfter', 'must be an ISO 8601 time');
  return t;
}

/** What orders the list and what a page token remembers: start time, then id. */
export interface ListKey {
  createdAt: number;
  id: string;
}

/** The `x-next-token` of a page: the key of its last item, opaque to clients. */
export function encodeNextToken(k: ListKey): string {
  return Buffer.from(JSON.stringify([k.createdAt, k.id])).toString('base64url');
}

/** Reads a `nextToken`; `validation` naming `nextToken` when it is not one this server gave. */
export function decodeNextToken(raw: string): ListKey {
  if (raw.length <= 200 && /^[A-Za-z0-9_-]+$/.test(raw)) {
    try {
      const v = JSON.parse(Buffer.from(raw, 'base64url').toString('utf8'));
      if (Array.isArray(v) && v.length === 2 && Number.isSafeInteger(v[0]) && typeof v[1] === 'string')
        return { createdAt: v[0], id: v[1] };
    } catch {
      /* fall through */
    }
  }
  throw badQuery('nextToken', 'is not a token this server gave in x-next-token');
}

function compareKeys(a: ListKey, b: ListKey): number {
  return a.createdAt - b.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

/**
 * One page of `items` in `order`, starting after the item `after` (the key of the last
 * item of the previous page: items deleted meanwhile do not shift the pages). `next` is
 * present when items remain after this page.
 */
export function pageOf<T extends ListKey>(
  items: readonly T[],
  q: { order: 'asc' | 'desc'; limit: number; after?: ListKey },
): { items: T[]; next?: ListKey } {
  const dir = q.order === 'asc' ? 1 : -1;
  const sorted = [...items].sort((a, b) => dir * compareKeys(a, b));
  const after = q.after;
  const rest = after ? sorted.filter((x) => dir * compareKeys(x, after) > 0) : sorted;
  const page = rest.slice(0, q.limit);
  const last = page.at(-1);
  return rest.length > q.limit && last
    ? { items: page, next: { createdAt: last.createdAt, id: last.id } }
    : { items: page };
}
