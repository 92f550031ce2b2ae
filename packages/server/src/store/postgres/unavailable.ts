import { SandboxdError } from '@sandboxd/protocol';
import type pg from 'pg';

/**
 * PostgreSQL's SQLSTATEs of a server that cannot serve now: connection exceptions (08),
 * operator intervention (57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect
 * now: starting up or in recovery) and too many connections (53300).
 */
const PG_CODES = new Set(['08000', '08001', '08003', '08004', '08006', '57P01', '57P02', '57P03', '53300']);
/** Socket errors of a connection to the database (only errors of the pool and its clients are tested). */
const NET_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);
/** How node-postgres words a connection lost or never made. */
const PG_TEXT =
  /^Connection terminated|Client has encountered a connection error|timeout exceeded when trying to connect|Client was closed and is not queryable|the database system is (starting up|shutting down|in recovery mode)/;

/** What a client is told while the database cannot be reached. */
export const DATABASE_UNAVAILABLE_MESSAGE = 'The database is unavailable; try again shortly';

/** True when `e` (an error of the pool or one of its connections) says the database cannot be reached now. */
export function isDatabaseUnavailable(e: unknown): boolean {
  if (!e || typeof e !== 'object') return false;
  const { code, message } = e as { code?: unknown; message?: unknown };
  if (typeof code === 'string' && (PG_CODES.has(code) || NET_CODES.has(code))) return true;
  return typeof message === 'string' && PG_TEXT.test(message);
}

function unavailable(cause: unknown): SandboxdError {
  const e = new SandboxdError('unavailable', DATABASE_UNAVAILABLE_MESSAGE);
  (e as Error & { cause?: unknown }).cause = cause;
  return e;
}

/**
 * Keeps the process alive when the database goes away under a query, and makes the errors of `pool` that mean "the database cannot be reached now" (a connection
 * refused, lost mid-query, a server starting up) a 503 `unavailable` instead of an internal
 * error (500): while PostgreSQL restarts, requests answer 503 and the client retries; the
 * pool opens fresh connections once it is back. Other errors pass unchanged.
 */
export function guardPool(pool: pg.Pool, onClientError: (err: Error) => void = () => {}): pg.Pool {
  const connect = pool.connect.bind(pool) as (cb?: unknown) => unknown;
  const guarded = new WeakSet<object>();
  const wrap = (c: pg.PoolClient) => {
    if (guarded.has(c)) return c;
    guarded.add(c);
    // pg-pool listens for errors of idle connections only; a connection lost while checked
    // out emits 'error' with no listener, an uncaught exception that ended the process (its
    // queries reject anyway; the pool drops the connection when it is released).
    c.on('error', onClientError);
    const query = c.query.bind(c) as (...a: unknown[]) => unknown;
    (c as unknown as { query: (...a: unknown[]) => unknown }).query = (...a: unknown[]) => {
      const r = query(...a);
      return r && typeof (r as Promise<unknown>).then === 'function'
        ? (r as Promise<unknown>).catch((e: unknown) => {
            throw isDatabaseUnavailable(e) ? unavailable(e) : e;
          })
        : r;
    };
    return c;
  };
  (pool as unknown as { connect: (cb?: unknown) => unknown }).connect = (cb?: unknown) => {
    if (typeof cb === 'function') return connect(cb); // pg-pool's own callback form (pool.query)
    return (connect() as Promise<pg.PoolClient>).then(wrap, (e: unknown) => {
      throw isDatabaseUnavailable(e) ? unavailable(e) : e;
    });
  };
  return pool;
}
