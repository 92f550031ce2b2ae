import { isIPv4, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { SandboxLocation } from '../services/sandboxes.js';
import { ProxyError } from './reply.js';
import { TunnelSocket } from './tunnel-socket.js';
import { UpstreamPool } from './upstream.js';

/** Where a sandbox's ports are, and who may reach them. */
export interface ProxyTarget {
  sandboxId: string;
  accountId: string;
  /** IPv4 of the sandbox on the host bridge, from the runtime record. */
  address: string;
  /** False when the sandbox was created with private ports. */
  portsPublic: boolean;
  /** Keep-alive connections to this sandbox only; closed when it goes. */
  pool: UpstreamPool;
  /** Opens a connection to a port through the runner's tunnel; absent: a direct TCP connection to `address`. */
  open?: (port: number) => Socket;
}

/** Options of {@link SandboxTargets}. */
export interface SandboxTargetsOptions {
  /** Where a started, running sandbox is (SandboxService.locate); null otherwise. */
  locate: (sandboxId: string) => Promise<SandboxLocation | null>;
  /**
   * CIDR every sandbox address must lie in (the local runtime's subnet), its network,
   * first (the host's gateway) and broadcast addresses excluded; null when sandboxes have
   * no reachable address (the fake runtime), so the proxy never connects anywhere.
   */
  allowedSubnet: string | null;
  /**
   * When sandboxes live on a runner (their addresses route only on its host): a TCP
   * connection to `port` of a sandbox through the runner, which checks the sandbox is its
   * own and running; `allowedSubnet` is then not consulted.
   */
  tunnel?: (sandboxId: string, port: number) => Promise<Duplex>;
  /** How long a resolved target is reused before store and runtime are asked again. Default 1000 ms. */
  cacheMs?: number;
  now?: () => number;
}

interface Entry {
  target: ProxyTarget;
  checkedAt: number;
}

/**
 * Resolves a sandbox id to its {@link ProxyTarget}: the sandbox must be started and
 * running (any account: public is public) with an address allowed by
 * {@link SandboxTargetsOptions.allowedSubnet}. Answers are cached briefly (the runtime's
 * inspect is costly); {@link forget} drops one at once and is called when a sandbox stops
 * or is removed. Concurrent lookups of one id share one query.
 */
export class SandboxTargets {
  private readonly entries = new Map<string, Entry>();
  private readonly pending = new Map<string, Promise<ProxyTarget>>();
  /** Ids forgotten while a lookup was in flight: that lookup must not cache what it found. */
  private readonly stale = new Set<string>();
  private readonly subnet: { base: number; mask: number } | null;
  private readonly cacheMs: number;
  private readonly now: () => number;
  private closed = false;

  constructor(private readonly opts: SandboxTargetsOptions) {
    this.subnet = opts.allowedSubnet ? parseCidr(opts.allowedSubnet) : null;
    this.cacheMs = opts.cacheMs ?? 1000;
    this.now = opts.now ?? Date.now;
  }

  /** The target of a started sandbox. Throws {@link ProxyError} 404 (unknown, not started) or 502 (no usable address). */
  resolve(sandboxId: string): Promise<ProxyTarget> {
    const hit = this.entries.get(sandboxId);
    if (hit && this.now() - hit.checkedAt < this.cacheMs) return Promise.resolve(hit.target);
    let p = this.pending.get(sandboxId);
    if (!p) {
      p = this.lookup(sandboxId).finally(() => {
        this.pending.delete(sandboxId);
        this.stale.delete(sandboxId);
      });
      this.pending.set(sandboxId, p);
    }
    return p;
  }

  /** Drops the cached target of a sandbox and closes its pooled connections. */
  forget(sandboxId: string): void {
    const e = this.entries.get(sandboxId);
    this.entries.delete(sandboxId);
    e?.target.pool.destroy();
    if (this.pending.has(sandboxId)) this.stale.add(sandboxId);
  }

  /** Forgets every target; later lookups fail with 404. */
  close(): void {
    this.closed = true;
    for (const id of [...this.entries.keys()]) this.forget(id);
  }

  private async lookup(sandboxId: string): Promise<ProxyTarget> {
    const rt = this.closed ? null : await this.opts.locate(sandboxId);
    if (!rt) {
      this.forget(sandboxId);
      throw new ProxyError('not_found', `No running sandbox ${sandboxId}`, { sandboxId });
    }
    if (!this.addressAllowed(rt.address)) {
      this.forget(sandboxId);
      throw new ProxyError('upstream', `Sandbox ${sandboxId} has no network address the proxy may use`, { sandboxId });
    }
    const prev = this.entries.get(sandboxId);
    let target: ProxyTarget;
    if (prev && prev.target.address === rt.address && prev.target.accountId === rt.accountId) {
      target = { ...prev.target, portsPublic: rt.portsPublic };
    } else {
      prev?.target.pool.destroy();
      const tunnel = this.opts.tunnel;
      const open = tunnel ? (port: number) => new TunnelSocket(tunnel(sandboxId, port)).asSocket() : undefined;
      target = {
        sandboxId,
        accountId: rt.accountId,
        address: rt.address,
        portsPublic: rt.portsPublic,
        pool: new UpstreamPool(rt.address, { open }),
        open,
      };
    }
    if (this.closed || this.stale.has(sandboxId)) {
      target.pool.destroy();
      throw new ProxyError('not_found', `No running sandbox ${sandboxId}`, { sandboxId });
    }
    this.entries.set(sandboxId, { target, checkedAt: this.now() });
    if (this.entries.size > 4096) this.sweep();
    return target;
  }

  /** Whether the proxy may connect to `ip` at all. */
  addressAllowed(ip: string): boolean {
    if (!isIPv4(ip)) return false;
    if (this.opts.tunnel) return true; // the runner checks the address is one of its sandboxes'
    const n = ipToInt(ip);
    if (!this.subnet) return false;
    const { base, mask } = this.subnet;
    if ((n & mask) >>> 0 !== base) return false;
    const last = (base | (~mask >>> 0)) >>> 0;
    return mask === 0xffffffff || (n !== base && n !== base + 1 && n !== last);
  }

  private sweep(): void {
    const now = this.now();
    for (const [id, e] of this.entries) if (now - e.checkedAt >= this.cacheMs) this.forget(id);
  }
}

function ipToInt(ip: string): number {
  return ip.split('.').reduce((acc, o) => ((acc << 8) | Number(o)) >>> 0, 0);
}

function parseCidr(cidr: string): { base: number; mask: number } {
  const [ip, bitsS] = cidr.split('/');
  const bits = Number(bitsS ?? 32);
  if (!isIPv4(ip) || !Number.isInteger(bits) || bits < 0 || bits > 32) throw new Error(`not an IPv4 CIDR: ${cidr}`);
  const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
  return { base: (ipToInt(ip) & mask) >>> 0, mask };
}
