/**
 * What `/readyz` answers (docs/kubernetes.md#probes): a process is ready once start-up is
 * done and until shutdown begins, while its database answers a trivial query within
 * {@link PING_TIMEOUT_MS}, and (role `api`) while at least one runner answers. The kubelet
 * takes a not ready replica out of its Service until it answers again; it does not restart
 * it (that is `/livez`, which only needs the process to answer HTTP).
 */
import type { RunnerStatus } from '../runtime/remote/fleet/status.js';
import type { Store } from '../store/store.js';

/** How long the database may take to answer the readiness query, ms (the manifests' probe timeout is 2 s). */
export const PING_TIMEOUT_MS = 1000;

export interface ReadinessSources {
  /** Start-up done and shutdown not begun. */
  started: () => boolean;
  store: Pick<Store, 'ping'>;
  /** Role `api`: the runners as the fleet sees them; null for the other roles (their runtime is in-process). */
  runners: (() => RunnerStatus[]) | null;
  timeoutMs?: number;
}

/**
 * The readiness check over `s`; never rejects. One database query at a time: while one is
 * pending (a hung database), later checks wait for it, each at most its own timeout, instead
 * of piling up queries.
 */
export function readiness(s: ReadinessSources): () => Promise<boolean> {
  let query: Promise<boolean> | null = null;
  const ping = (): Promise<boolean> => {
    query ??= s.store
      .ping()
      .then(
        () => true,
        () => false,
      )
      .finally(() => {
        query = null;
      });
    const pending = query;
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), s.timeoutMs ?? PING_TIMEOUT_MS);
      void pending.then((ok) => {
        clearTimeout(timer);
        resolve(ok);
      });
    });
  };
  return async () => {
    if (!s.started()) return false;
    if (s.runners && !s.runners().some((r) => r.state === 'up')) return false;
    return ping();
  };
}
