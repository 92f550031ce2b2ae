/**
 * Runner discovery through the Kubernetes API (`SANDBOXD_RUNNERS=k8s:<namespace>/<service>`):
 * lists, then watches, the EndpointSlices of the runner Service and reports the ready
 * runners. Used by `api` replicas in a cluster (deploy/kubernetes, docs/kubernetes.md).
 */
import { DiscoveryV1Api, KubeConfig, type V1EndpointSlice, Watch } from '@kubernetes/client-node';

/** One runner as the Service's endpoints name it. */
export interface K8sRunner {
  /** `<scheme>://<address>:<port>` (IPv6 addresses in brackets). */
  url: string;
  /** The node the runner pod runs on (`nodeName` of the endpoint; '' when the slice has none). */
  nodeName: string;
}

/** Where log lines go (a pino logger fits). */
export interface DiscoveryLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

export interface WatchK8sRunnersOptions {
  namespace: string;
  /** The runner Service's name (its EndpointSlices carry `kubernetes.io/service-name=<service>`). */
  service: string;
  /** The Service port to use, by name or number; default: the slice's first port. */
  port?: string | number;
  /** `https` where the runners serve TLS; default `http`. */
  scheme?: 'http' | 'https';
  /**
   * Called with every ready runner (sorted by URL) after the first successful list and then
   * whenever the set changes. While the Kubernetes API cannot be reached it is not called:
   * the last set stays in force.
   */
  onChange: (runners: K8sRunner[]) => void;
  log: DiscoveryLog;
  /** Default: the pod's service account (`loadFromCluster()`). */
  kubeConfig?: KubeConfig;
  /** Wait before re-listing after a failure: starts at `initialMs`, doubles up to `maxMs`. Default 500 ms .. 30 s. */
  backoff?: { initialMs: number; maxMs: number };
  /** Asked of the API server for each watch (it then ends the watch); default 300. */
  watchTimeoutSeconds?: number;
}

export interface K8sRunnersWatch {
  /** Ends the watch and every pending retry; onChange is not called after it. */
  stop(): void;
}

/** Parses `k8s:<namespace>/<service>`; null for anything else. */
export function parseK8sRunners(value: string): { namespace: string; service: string } | null {
  const m = /^k8s:([a-z0-9]([-a-z0-9]*[a-z0-9])?)\/([a-z0-9]([-a-z0-9]*[a-z0-9])?)$/.exec(value.trim());
  return m ? { namespace: m[1], service: m[3] } : null;
}

/** The ready runners of a set of EndpointSlices, one per URL, sorted. */
export function runnersOf(
  slices: Iterable<V1EndpointSlice>,
  port: string | number | undefined,
  scheme: 'http' | 'https',
): K8sRunner[] {
  const byUrl = new Map<string, K8sRunner>();
  for (const slice of slices) {
    if (slice.addressType !== 'IPv4' && slice.addressType !== 'IPv6') continue;
    const ports = slice.ports ?? [];
    const p =
      port === undefined ? ports[0] : ports.find((x) => (typeof port === 'number' ? x.port === port : x.name === port));
    if (!p?.port) continue;
    for (const ep of slice.endpoints ?? []) {
      // A nil `ready` means ready (EndpointConditions); terminating endpoints are not ready.
      if (ep.conditions?.ready === false || ep.conditions?.terminating === true) continue;
      const address = ep.addresses?.[0];
      if (!address) continue;
      const host = slice.addressType === 'IPv6' ? `[${address}]` : address;
      const url = `${scheme}://${host}:${p.port}`;
      if (!byUrl.has(url)) byUrl.set(url, { url, nodeName: ep.nodeName ?? '' });
    }
  }
  return [...byUrl.values()].sort((a, b) => (a.url < b.url ? -1 : a.url > b.url ? 1 : 0));
}

type WatchEvent = { type: string; object: V1EndpointSlice & { code?: number; message?: string } };

/**
 * Lists the EndpointSlices of `namespace/service`, reports the ready runners, then watches
 * from the list's resourceVersion and reports each change. A watch that ends cleanly is
 * resumed from the last resourceVersion seen; one that fails (connection lost, HTTP error,
 * an ERROR event such as 410 Gone) is followed by a fresh list after a bounded backoff that
 * resets once a list succeeds. A watch that outlives its server-side timeout by 30 s, or a
 * request that has no answer after 30 s, counts as lost (a half-open connection).
 */
export function watchK8sRunners(opts: WatchK8sRunnersOptions): K8sRunnersWatch {
  const kc = opts.kubeConfig ?? inCluster();
  const api = kc.makeApiClient(DiscoveryV1Api);
  const watcher = new Watch(kc);
  const scheme = opts.scheme ?? 'http';
  const backoff = opts.backoff ?? { initialMs: 500, maxMs: 30_000 };
  const watchTimeout = opts.watchTimeoutSeconds ?? 300;
  const labelSelector = `kubernetes.io/service-name=${opts.service}`;
  const path = `/apis/discovery.k8s.io/v1/namespaces/${encodeURIComponent(opts.namespace)}/endpointslices`;
  const where = { namespace: opts.namespace, service: opts.service };

  const slices = new Map<string, V1EndpointSlice>();
  let resourceVersion = '';
  let last: string | null = null;
  let stopped = false;
  let delay = backoff.initialMs;
  /** Every pending timer (retries and guards), cleared by stop(). */
  const timers = new Set<NodeJS.Timeout>();
  const after = (ms: number, fn: () => void): NodeJS.Timeout => {
    const t = setTimeout(() => {
      timers.delete(t);
      fn();
    }, ms);
    timers.add(t);
    return t;
  };
  const cancel = (t: NodeJS.Timeout) => {
    clearTimeout(t);
    timers.delete(t);
  };
  let abortWatch: (() => void) | null = null;
  /** Bumped for each list or watch started: callbacks of an abandoned one do nothing. */
  let epoch = 0;

  const emit = () => {
    const runners = runnersOf(slices.values(), opts.port, scheme);
    const key = JSON.stringify(runners);
    if (key === last) return;
    last = key;
    opts.log.info({ ...where, runners: runners.map((r) => `${r.nodeName}=${r.url}`) }, 'runners from Kubernetes');
    opts.onChange(runners);
  };
  const retry = (err: unknown, what: string) => {
    if (stopped) return;
    opts.log.warn({ ...where, err: errText(err), retryInMs: delay }, `runner discovery: ${what} failed`);
    after(delay, list);
    delay = Math.min(delay * 2, backoff.maxMs);
  };

  function list(): void {
    if (stopped) return;
    const mine = ++epoch;
    const guard = after(30_000, () => {
      if (mine !== epoch || stopped) return;
      epoch++;
      retry(new Error('no answer in 30 s'), 'list');
    });
    api.listNamespacedEndpointSlice({ namespace: opts.namespace, labelSelector, timeoutSeconds: 30 }).then(
      (res) => {
        cancel(guard);
        if (mine !== epoch || stopped) return;
        slices.clear();
        for (const s of res.items) if (s.metadata?.name) slices.set(s.metadata.name, s);
        resourceVersion = res.metadata?.resourceVersion ?? '';
        delay = backoff.initialMs;
        emit();
        watch();
      },
      (err: unknown) => {
        cancel(guard);
        if (mine !== epoch || stopped) return;
        retry(err, 'list');
      },
    );
  }

  function watch(): void {
    if (stopped) return;
    const mine = ++epoch;
    let ended = false;
    let controller: AbortController | null = null;
    const end = (err: unknown, relist: boolean) => {
      if (ended) return;
      ended = true;
      cancel(guard);
      controller?.abort();
      if (mine !== epoch || stopped) return;
      abortWatch = null;
      if (relist) retry(err, 'watch');
      else watch();
    };
    // The server ends the watch after timeoutSeconds; a watch still open 30 s later is lost.
    const guard = after((watchTimeout + 30) * 1000, () => end(new Error('watch outlived its timeout'), true));
    abortWatch = () => end(null, false);
    const onEvent = (type: string, object: WatchEvent['object']) => {
      if (ended || mine !== epoch || stopped) return;
      if (type === 'ERROR') {
        // e.g. 410 Gone: the resourceVersion is too old; list again.
        end(new Error(`watch ERROR ${object?.code ?? ''} ${object?.message ?? ''}`.trim()), true);
        return;
      }
      const rv = object?.metadata?.resourceVersion;
      if (rv) resourceVersion = rv;
      const name = object?.metadata?.name;
      if (type === 'BOOKMARK' || !name) return;
      if (type === 'DELETED') slices.delete(name);
      else if (type === 'ADDED' || type === 'MODIFIED') slices.set(name, object);
      emit();
    };
    watcher
      .watch(
        path,
        { labelSelector, resourceVersion, allowWatchBookmarks: true, timeoutSeconds: watchTimeout },
        onEvent,
        (err: unknown) => {
          // A clean end (the server's timeout) resumes from the last resourceVersion.
          end(err, err !== null && err !== undefined);
        },
      )
      .then(
        (c) => {
          controller = c;
          if (ended || mine !== epoch || stopped) c.abort();
        },
        (err: unknown) => end(err, true),
      );
  }

  list();
  return {
    stop() {
      if (stopped) return;
      stopped = true;
      epoch++;
      for (const t of timers) clearTimeout(t);
      timers.clear();
      const abort = abortWatch;
      abortWatch = null;
      abort?.();
    },
  };
}

function inCluster(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromCluster();
  return kc;
}

function errText(err: unknown): string {
  if (err instanceof Error) {
    const code = (err as { statusCode?: number; code?: number }).statusCode ?? (err as { code?: number }).code;
    return code ? `${err.message} (${code})` : err.message;
  }
  return String(err);
}
