import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { TrustedProxies } from '../http/trusted-proxies.js';
import type { Logger } from 'pino';
import type { FrontDoor } from '../http/front-door.js';
import type { PortAccess } from './access.js';
import { forwardHttp } from './forward-http.js';
import { type RequestFraming, requestFraming } from './framing.js';
import { forwardUpgrade } from './forward-upgrade.js';
import { PublicHosts, type PortAddress } from './host.js';
import { ProxyError, sendError, writeUpgradeError } from './reply.js';
import { ConnectionShares } from './shares.js';
import type { ProxyTarget, SandboxTargets } from './targets.js';

/** Options of {@link PortProxy}. */
export interface PortProxyOptions {
  /** `config.publicHost`, e.g. `sandbox.localhost:8080`. */
  publicHost: string;
  /** `config.proxyTimeoutMs`: connect, then response-headers wait, before 504. */
  timeoutMs: number;
  /** `config.proxyMaxConnsPerSandbox`: proxied exchanges and tunnels open per sandbox at once (default 256). */
  maxConnsPerSandbox?: number;
  targets: Pick<SandboxTargets, 'resolve'>;
  access: Pick<PortAccess, 'check'>;
  /**
   * Checks run before {@link PortAccess} (E2B's rules for its code-interpreter port, say):
   * throw {@link ProxyError} to refuse. Default none.
   */
  guard?: PortGuard;
  log: Logger;
  /** `SANDBOXD_TRUSTED_PROXIES`: whose `X-Forwarded-Proto` reaches the sandbox. */
  trusted?: TrustedProxies;
}

/** A check of a request for a sandbox port before it is forwarded; throws {@link ProxyError} to refuse. */
export type PortGuard = (req: IncomingMessage, addr: PortAddress) => Promise<void>;

/**
 * The public port proxy: requests whose Host is `<port>-<sandboxId>.<publicHost>` go to
 * that port of that sandbox, at the address its runtime record gives (never anything
 * taken from the request). Plain requests and upgrades are claimed on the front door
 * before fastify sees them. Refusals are `{code, message, details}` JSON, or a small HTML
 * page for browsers: 400 malformed host or port out of range, 401 private port without
 * credentials, 404 unknown or stopped sandbox, 502 nothing listening, 503 the sandbox's
 * share of connections used up ({@link ConnectionShares}), 504 too slow.
 */
export class PortProxy {
  readonly hosts: PublicHosts;
  readonly shares: ConnectionShares;
  private readonly live = new Set<{ destroy(): unknown }>();

  constructor(private readonly o: PortProxyOptions) {
    this.hosts = new PublicHosts(o.publicHost);
    this.shares = new ConnectionShares(o.maxConnsPerSandbox);
  }

  /** Claims this proxy's requests and upgrades on the front door. */
  attach(frontDoor: FrontDoor): void {
    frontDoor.claimRequests(this.hosts.claims, this.handleRequest);
    frontDoor.claimUpgrades(this.hosts.claims, this.handleUpgrade);
  }

  /** Handles one claimed request; never throws. */
  readonly handleRequest = (req: IncomingMessage, res: ServerResponse): void => {
    this.track(res);
    this.serve(req, res).catch((e) => {
      const err = this.refusal(e, req);
      sendError(req, res, err);
    });
  };

  /**
   * Handles a request for port `addr` of a sandbox that names it otherwise than by Host
   * (E2B's `E2b-Sandbox-Id` / `E2b-Sandbox-Port` headers): the same checks and forwarding
   * as a request for `<port>-<id>.<publicHost>`; never throws.
   */
  readonly handleRequestAt = (req: IncomingMessage, res: ServerResponse, addr: PortAddress): void => {
    this.track(res);
    this.serve(req, res, addr).catch((e) => {
      const err = this.refusal(e, req);
      sendError(req, res, err);
    });
  };

  /** Handles one claimed upgrade request; never throws. */
  readonly handleUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer): void => {
    this.track(socket);
    this.tunnel(req, socket, head).catch((e) => writeUpgradeError(req, socket, this.refusal(e, req)));
  };

  /** Cuts every proxied connection still open (streams, WebSockets); for shutdown. */
  close(): void {
    for (const s of [...this.live]) s.destroy();
    this.live.clear();
  }

  private async serve(req: IncomingMessage, res: ServerResponse, at?: PortAddress): Promise<void> {
    const { addr, target, framing } = await this.prepare(req, at);
    const d = await this.o.access.check({
      req,
      ...addr,
      accountId: target.accountId,
      portsPublic: target.portsPublic,
      upgrade: false,
    });
    if (d.kind === 'redirect') {
      res.writeHead(302, {
        location: d.location,
        'set-cookie': d.cookie,
        'cache-control': 'no-store',
        'content-length': 0,
      });
      res.end();
      return;
    }
    if (res.destroyed) return;
    res.once('close', this.shares.take(target.sandboxId));
    forwardHttp(req, res, {
      target,
      port: addr.port,
      path: d.path,
      framing,
      timeoutMs: this.o.timeoutMs,
      onRefused: (e) => this.logRefusal(e, req),
      trusted: this.o.trusted,
    });
  }

  private async tunnel(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const { addr, target } = await this.prepare(req);
    const d = await this.o.access.check({
      req,
      ...addr,
      accountId: target.accountId,
      portsPublic: target.portsPublic,
      upgrade: true,
    });
    if (d.kind !== 'forward') throw new ProxyError('validation', 'Unexpected redirect of an upgrade');
    if (socket.destroyed) return;
    socket.once('close', this.shares.take(target.sandboxId));
    forwardUpgrade(req, socket, head, {
      target,
      port: addr.port,
      path: d.path,
      timeoutMs: this.o.timeoutMs,
      onRefused: (e) => this.logRefusal(e, req),
      onTunnel: (s) => this.track(s),
      trusted: this.o.trusted,
    });
  }

  /**
   * Host -> sandbox port -> target; refuses absolute-form and other non-path request
   * targets, and request framing the proxy cannot forward exactly ({@link requestFraming}).
   */
  private async prepare(
    req: IncomingMessage,
    at?: PortAddress,
  ): Promise<{ addr: PortAddress; target: ProxyTarget; framing: RequestFraming }> {
    const addr = at ?? this.hosts.parse(req);
    if (!req.url?.startsWith('/'))
      throw new ProxyError(
        'validation',
        'The request target must be a path (absolute-form and authority-form are refused)',
      );
    const framing = requestFraming(req);
    const target = await this.o.targets.resolve(addr.sandboxId);
    await this.o.guard?.(req, addr);
    return { addr, target, framing };
  }

  private refusal(e: unknown, req: IncomingMessage): ProxyError {
    if (e instanceof ProxyError) {
      this.logRefusal(e, req);
      return e;
    }
    this.o.log.error({ err: e, host: req.headers.host }, 'port proxy failed');
    return new ProxyError('internal', 'Internal error of the port proxy');
  }

  private logRefusal(e: ProxyError, req: IncomingMessage): void {
    const fields = { code: e.status, reason: e.message, host: req.headers.host, method: req.method };
    if (e.status >= 500) this.o.log.info(fields, 'port proxy refused');
    else this.o.log.debug(fields, 'port proxy refused');
  }

  private track(s: { destroy(): unknown; once(ev: 'close', l: () => void): unknown }): void {
    this.live.add(s);
    s.once('close', () => this.live.delete(s));
  }
}
