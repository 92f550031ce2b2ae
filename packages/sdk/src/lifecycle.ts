/**
 * Helpers of the sandbox lifecycle (pause, resume, stop, start, snapshot) and of the list's
 * filters, shared by {@link Sandbox} and the client's `snapshots`.
 */
import type { HttpClient } from './http.js';
import type { SandboxListQuery, SandboxRunParams, SnapshotInfo } from './types.js';

/** Default timeout of a snapshot request, ms: the server copies the sandbox's root layer. */
export const SNAPSHOT_TIMEOUT_MS = 10 * 60_000;

/**
 * The query parameters of a sandbox list: `state`, `limit`, `cursor`, and one
 * `metadata.<key>=<value>` per metadata pair (the URL encodes keys and values).
 */
export function listQueryParams(query: SandboxListQuery): Record<string, string | number | undefined> {
  const out: Record<string, string | number | undefined> = {
    state: query.state,
    limit: query.limit,
    cursor: query.cursor,
  };
  for (const [k, v] of Object.entries(query.metadata ?? {})) {
    if (k === '') throw new TypeError('metadata filter keys must not be empty');
    out[`metadata.${k}`] = v;
  }
  return out;
}

/** Options of {@link Sandbox.prototype.snapshot}. */
export interface SnapshotOptions {
  /** Default {@link SNAPSHOT_TIMEOUT_MS}. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** `POST /api/v1/sandboxes/{id}/snapshot` (201, the snapshot). */
export function createSnapshot(
  http: HttpClient,
  sandboxId: string,
  name: string,
  opts: SnapshotOptions = {},
): Promise<SnapshotInfo> {
  return http.request<SnapshotInfo>('POST', `/api/v1/sandboxes/${encodeURIComponent(sandboxId)}/snapshot`, {
    json: { name },
    timeoutMs: opts.timeoutMs ?? Math.max(http.config.timeoutMs, SNAPSHOT_TIMEOUT_MS),
    signal: opts.signal,
  });
}

/** The body of resume and start: `{}` or `{timeoutMs}`. */
export function runBody(opts: SandboxRunParams): SandboxRunParams {
  return opts.timeoutMs === undefined ? {} : { timeoutMs: opts.timeoutMs };
}
