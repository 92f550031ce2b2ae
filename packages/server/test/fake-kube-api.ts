/**
 * A fake Kubernetes API server on loopback for tests of runner discovery: it answers the
 * EndpointSlice list and watch of one namespace (label selector, resourceVersion, bookmarks,
 * 410 Gone for a compacted resourceVersion) the way kube-apiserver does, over plain HTTP.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { KubeConfig, type V1EndpointSlice } from '@kubernetes/client-node';

export const NS = 'sbx';
export const SVC = 'sandboxd-runner';
export const TOKEN = 'fake-service-account-token';

type Req = { watch: boolean; labelSelector: string | null; resourceVersion: string | null; auth?: string };

/** A fake kube-apiserver answering the EndpointSlice list and watch of one namespace ({@link NS} unless told). */
export class FakeKubeApi {
  constructor(readonly namespace = NS) {}

  private rv = 100;
  private readonly objects = new Map<string, V1EndpointSlice>();
  private readonly log: { rv: number; type: string; object: V1EndpointSlice }[] = [];
  private compactedTo = 0;
  private readonly watchers = new Set<{ res: ServerResponse; selector: string | null }>();
  readonly requests: Req[] = [];
  failLists = 0;
  private server!: Server;
  url = '';

  /**
   * Listens on 127.0.0.1. `tls`: over HTTPS with this key and certificate, as a pod's
   * in-cluster config reaches kube-apiserver (KUBERNETES_SERVICE_HOST/PORT and the CA).
   */
  async start(o: { tls?: { key: string; cert: string } } = {}): Promise<void> {
    const handler = (req: IncomingMessage, res: ServerResponse) => this.handle(req, res);
    this.server = o.tls ? createHttpsServer({ key: o.tls.key, cert: o.tls.cert }, handler) : createServer(handler);
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `${o.tls ? 'https' : 'http'}://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    this.drop();
    this.server.closeAllConnections();
    await new Promise((r) => this.server.close(r));
  }

  /** Changes a slice like the EndpointSlice controller would, and tells open watches. */
  apply(type: 'ADDED' | 'MODIFIED' | 'DELETED', slice: V1EndpointSlice): void {
    const object = structuredClone(slice);
    object.metadata = { ...object.metadata, resourceVersion: String(++this.rv) };
    if (type === 'DELETED') this.objects.delete(object.metadata.name!);
    else this.objects.set(object.metadata.name!, object);
    this.log.push({ rv: this.rv, type, object });
    for (const w of this.watchers) if (matches(object, w.selector)) send(w.res, type, object);
  }

  /** Ends every open watch abruptly (a lost connection). */
  drop(): void {
    for (const w of this.watchers) w.res.destroy();
    this.watchers.clear();
  }

  /** Forgets the history: a watch from an older resourceVersion gets 410 Gone. */
  compact(): void {
    this.compactedTo = this.rv;
    this.drop();
  }

  get lists(): number {
    return this.requests.filter((r) => !r.watch).length;
  }
  get watches(): number {
    return this.requests.filter((r) => r.watch).length;
  }
  get openWatches(): number {
    return this.watchers.size;
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const u = new URL(req.url ?? '/', 'http://x');
    const r: Req = {
      watch: u.searchParams.get('watch') === 'true',
      labelSelector: u.searchParams.get('labelSelector'),
      resourceVersion: u.searchParams.get('resourceVersion'),
      auth: req.headers.authorization,
    };
    this.requests.push(r);
    if (u.pathname !== `/apis/discovery.k8s.io/v1/namespaces/${this.namespace}/endpointslices`) {
      res.writeHead(404, { 'content-type': 'application/json' }).end(status(404, 'NotFound'));
      return;
    }
    if (req.headers.authorization !== `Bearer ${TOKEN}`) {
      res.writeHead(401, { 'content-type': 'application/json' }).end(status(401, 'Unauthorized'));
      return;
    }
    if (!r.watch) {
      if (this.failLists > 0) {
        this.failLists--;
        res.writeHead(500, { 'content-type': 'application/json' }).end(status(500, 'InternalError'));
        return;
      }
      const items = [...this.objects.values()].filter((o) => matches(o, r.labelSelector));
      res.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          kind: 'EndpointSliceList',
          apiVersion: 'discovery.k8s.io/v1',
          metadata: { resourceVersion: String(this.rv) },
          items,
        }),
      );
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    const from = Number(r.resourceVersion ?? 0);
    if (from < this.compactedTo) {
      res.end(`${JSON.stringify({ type: 'ERROR', object: JSON.parse(status(410, 'Expired')) })}\n`);
      return;
    }
    for (const e of this.log) if (e.rv > from && matches(e.object, r.labelSelector)) send(res, e.type, e.object);
    send(res, 'BOOKMARK', {
      kind: 'EndpointSlice',
      apiVersion: 'discovery.k8s.io/v1',
      metadata: { resourceVersion: String(this.rv) },
    } as V1EndpointSlice);
    const w = { res, selector: r.labelSelector };
    this.watchers.add(w);
    res.on('close', () => this.watchers.delete(w));
  }
}

function send(res: ServerResponse, type: string, object: V1EndpointSlice): void {
  res.write(`${JSON.stringify({ type, object })}\n`);
}
function status(code: number, reason: string): string {
  return JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', reason, code, message: reason });
}
function matches(o: V1EndpointSlice, selector: string | null): boolean {
  if (!selector) return true;
  const [k, v] = selector.split('=');
  return o.metadata?.labels?.[k] === v;
}

export type Ep = { ip: string; node: string; ready?: boolean; terminating?: boolean };
/** An EndpointSlice of `opts.service` (default {@link SVC}) in `opts.namespace` (default {@link NS}) with `eps`. */
export function slice(
  name: string,
  eps: Ep[],
  opts: { service?: string; port?: number; portName?: string; namespace?: string } = {},
) {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name, namespace: opts.namespace ?? NS, labels: { 'kubernetes.io/service-name': opts.service ?? SVC } },
    addressType: 'IPv4',
    ports: [{ name: opts.portName ?? 'runner', port: opts.port ?? 8090, protocol: 'TCP' }],
    endpoints: eps.map((e) => ({
      addresses: [e.ip],
      nodeName: e.node,
      conditions: { ready: e.ready ?? true, serving: e.ready ?? true, terminating: e.terminating ?? false },
    })),
  } satisfies V1EndpointSlice;
}

/** A KubeConfig for the fake API at `server` with the service-account token. */
export function kubeConfig(server: string, token = TOKEN): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'fake', server, skipTLSVerify: true }],
    users: [{ name: 'sa', token }],
    contexts: [{ name: 'fake', cluster: 'fake', user: 'sa', namespace: NS }],
    currentContext: 'fake',
  });
  return kc;
}
