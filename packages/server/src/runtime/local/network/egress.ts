import { readFileSync, writeFileSync } from 'node:fs';
import {
  type Egress,
  type EgressRule,
  formatEgressRule,
  parseEgressRule,
  ruleAllowsName,
  SandboxdError,
} from '@sandboxd/protocol';
import { contains, formatPrefix, ipToInt, mergePrefixes, parsePrefix, type Prefix } from './addr.js';
import { EgressResolver, type Upstream } from './dns.js';
import type { InjectionEvent, SecretInjection } from '../../driver.js';
import { EgressCa } from './ca.js';
import { EgressProxy } from './egress-proxy.js';
import { rulesAllowing } from './intercept.js';
import { NftBatcher } from './nft-batch.js';
import { NftSession } from './nft-session.js';
import { EGRESS_SETS, type EgressPorts } from './rules.js';

/** The shortest time an answer's addresses stay allowed, whatever its TTL (the client still has to connect). */
export const MIN_ANSWER_TTL_S = 10;
/** The longest, whatever its TTL. */
export const MAX_ANSWER_TTL_S = 86_400;
/**
 * Most names whose answers one sandbox keeps at once: past it the oldest name goes, and with
 * it the addresses no other kept name holds (they leave the nft set at once).
 */
export const MAX_NAMES_PER_SANDBOX = 1024;

/** One sandbox's egress as the gate holds it. */
interface Policy {
  id: string;
  mode: 'none' | 'internet' | 'allow';
  rules: EgressRule[];
  /** CIDR rules merged, as nft elements `a.b.c.d/n`. */
  nets: string[];
  /**
   * Names answered (allowed at the time): their addresses and until when (epoch ms), oldest
   * first. The `egress_resolved` elements of this sandbox are exactly the addresses of its
   * names still valid, each with the latest `until` among the names that hold it: every
   * change of this map queues the nft commands that make the set follow, before anything
   * else can change it (see {@link EgressGate.apply} and `#record`).
   */
  names: Map<string, { addrs: string[]; until: number }>;
  /** Secret injection rules (with values): names they allow are terminated by the proxy. */
  secrets: SecretInjection[];
}

/** Whether a sandbox's 80/443 go through the proxy: `allow` rules, or injection rules. */
function proxied(p: Policy | undefined): boolean {
  return !!p && (p.mode === 'allow' || (p.mode === 'internet' && p.secrets.length > 0));
}

/** Options of {@link EgressGate}. */
export interface EgressGateOptions {
  /** The nft table of the instance (family inet). */
  table: string;
  /** The gateway address: the resolver and the proxy listen and speak from it. */
  gateway: string;
  /** Destinations never reached (rules.ts `blockedPrefixes`): the proxy refuses them too. */
  blocked: Prefix[];
  /** Upstream resolvers; default the host's /etc/resolv.conf IPv4 nameservers. */
  upstream?: Upstream[];
  /** Tests: {@link MAX_NAMES_PER_SANDBOX} by default. */
  maxNamesPerSandbox?: number;
  /** Queries of one sandbox waiting for upstream at once (past it: REFUSED). Default 64. */
  dnsPendingPerSandbox?: number;
  /** Proxied connections of one sandbox at once (past it: closed). Default 512. */
  proxyConnectionsPerSandbox?: number;
  /** A relayed proxy connection with no byte either way for this long is closed. Default 600000 (10 min). */
  proxyIdleTimeoutMs?: number;
  /**
   * The folder of the CA that signs the proxy's leaf certificates for secret injection
   * (`<dataDir>/egress-ca`, made at first start); absent: no injection (every connection relayed).
   */
  caDir?: string;
  /** Extra CAs (PEM) trusted upstream by injected requests (`SANDBOXD_EGRESS_CA_FILE`). */
  extraCa?: string[];
  /** Tests: upstream ports of the proxy (default 80, 443). */
  upstreamPorts?: { http: number; tls: number };
}

/**
 * Per-sandbox egress: which sandbox address may reach what, kept as elements of the
 * instance's nft sets (see rules.ts), plus the resolver and the proxy that enforce `allow`
 * rules by name. No rule per sandbox: applying or changing one sandbox's egress is one nft
 * transaction of a few elements, whatever the number of sandboxes.
 */
export class EgressGate {
  readonly #o: EgressGateOptions;
  readonly #byAddr = new Map<string, Policy>();
  readonly #nft: NftBatcher;
  readonly #resolver: EgressResolver;
  readonly #proxy: EgressProxy;
  #ports: EgressPorts | undefined;
  #forwarding = false;
  readonly #ca: EgressCa | undefined;
  readonly #injections = new Set<(e: InjectionEvent) => void>();

  constructor(o: EgressGateOptions) {
    this.#o = o;
    this.#nft = new NftBatcher(new NftSession(`inet ${o.table}`, EGRESS_SETS.marker));
    const upstream = o.upstream?.length ? o.upstream : hostNameservers();
    this.#resolver = new EgressResolver({
      gateway: o.gateway,
      upstream,
      maxPendingPerSandbox: o.dnsPendingPerSandbox,
      policy: {
        modeOf: (a) => this.#byAddr.get(a)?.mode ?? 'none',
        allowsName: (a, n) => this.allowsName(a, n),
        record: (a, n, addrs, ttl) => this.#record(a, n, addrs, ttl),
      },
    });
    this.#ca = o.caDir ? EgressCa.open(o.caDir) : undefined;
    this.#proxy = new EgressProxy({
      gateway: o.gateway,
      maxPerSandbox: o.proxyConnectionsPerSandbox,
      idleTimeoutMs: o.proxyIdleTimeoutMs,
      ca: this.#ca,
      extraCa: o.extraCa,
      upstreamPorts: o.upstreamPorts,
      onInjection: (e) => {
        const p = this.#byAddr.get(e.from);
        if (!p) return;
        const ev: InjectionEvent = {
          sandboxId: p.id,
          secret: e.secret,
          destination: e.destination,
          method: e.method,
          status: e.status,
          at: Date.now(),
        };
        if (e.error) ev.error = e.error;
        for (const l of this.#injections) l(ev);
      },
      policy: {
        isRuled: (a) => proxied(this.#byAddr.get(a)),
        allowsName: (a, n) => this.allowsName(a, n),
        addressesFor: (a, n) => this.#addressesFor(a, n),
        secretsFor: (a, n) => rulesAllowing(this.#byAddr.get(a)?.secrets ?? [], n),
      },
    });
  }

  /** The CA certificate (PEM) sandboxes with injection rules trust; null without a CA. */
  get caCertPem(): string | null {
    return this.#ca?.certPem ?? null;
  }

  /** Subscribes to the proxy's injections; returns the unsubscribe. */
  onInjection(l: (e: InjectionEvent) => void): () => void {
    this.#injections.add(l);
    return () => this.#injections.delete(l);
  }

  /** Starts the resolver and the proxy on the gateway address (once); resolves their ports. */
  async start(): Promise<EgressPorts> {
    if (this.#ports) return this.#ports;
    const dns = await this.#resolver.listen();
    const proxy = await this.#proxy.listen().catch((e: unknown) => {
      this.#resolver.close();
      throw e;
    });
    this.#ports = { dnsUdp: dns.udp, dnsTcp: dns.tcp, http: proxy.http, tls: proxy.tls };
    return this.#ports;
  }

  /** Stops the resolver and the proxy; the policies stay (a later start serves them again). */
  close(): void {
    this.#resolver.close();
    this.#proxy.close();
    this.#nft.close();
    this.#ports = undefined;
  }

  /**
   * Gives sandbox `id` at `address` the egress `egress` (rules already valid: see
   * `parseEgressRule`), replacing what it had, in one nft transaction: from the moment this
   * resolves, new connections follow it (those already open stay). Addresses answered for
   * names the new rules no longer allow are dropped (but those a still-allowed name holds
   * too). Answers recorded while it runs are checked against the new rules. Throws
   * `validation` on a bad rule, `internal` when nft fails (then the old egress stands).
   */
  async apply(id: string, address: string, egress: Egress | undefined, secrets?: SecretInjection[]): Promise<void> {
    const next = compile(id, egress ?? 'none');
    next.secrets = this.#ca ? (secrets ?? []) : [];
    const prev = this.#byAddr.get(address);
    const lines: string[] = [];
    const t = this.#o.table;
    const del = (set: string, elem: string) =>
      lines.push(`add element inet ${t} ${set} { ${elem} }`, `delete element inet ${t} ${set} { ${elem} }`);
    const add = (set: string, elem: string) => lines.push(`add element inet ${t} ${set} { ${elem} }`);
    if (prev?.mode === 'internet' && next.mode !== 'internet') del(EGRESS_SETS.internet, address);
    if (proxied(prev) && !proxied(next)) del(EGRESS_SETS.ruled, address);
    if (next.mode === 'internet') add(EGRESS_SETS.internet, address);
    if (proxied(next)) add(EGRESS_SETS.ruled, address);
    for (const n of prev?.nets ?? []) if (!next.nets.includes(n)) del(EGRESS_SETS.nets, `${address} . ${n}`);
    for (const n of next.nets) add(EGRESS_SETS.nets, `${address} . ${n}`);
    // Answers stay for the names the new rules still allow; every address of the old ones
    // is put right (gone, or with the timeout of the names that still hold it).
    const now = Date.now();
    for (const [name, ans] of prev?.names ?? []) {
      if (ans.until > now && next.mode === 'allow' && next.rules.some((r) => ruleAllowsName(r, name))) {
        next.names.set(name, ans);
      }
    }
    const touched = new Set([...(prev?.names.values() ?? [])].flatMap((a) => a.addrs));
    lines.push(...this.#resolvedLines(address, next, touched, now));
    if (next.mode !== 'none') this.#forwardOn();
    // The map changes now, with its commands queued (batches run in order): an answer
    // recorded from here on is checked against the new rules, and its commands run after.
    this.#setPolicy(address, next);
    try {
      await this.#nft.run(lines);
    } catch (e) {
      if (this.#byAddr.get(address) === next || (next.mode === 'none' && !this.#byAddr.has(address))) {
        // The kernel kept the old egress: so does the map. Answers recorded meanwhile under
        // the new rules leave the set again (best effort: nft just failed).
        this.#setPolicy(address, prev);
        const since = [...next.names].filter(([n, a]) => prev?.names.get(n) !== a).flatMap(([, a]) => a.addrs);
        await this.#nft.run(this.#resolvedLines(address, prev, new Set(since), Date.now())).catch(() => {});
      }
      throw e;
    }
  }

  #setPolicy(address: string, p: Policy | undefined): void {
    if (!p || p.mode === 'none') this.#byAddr.delete(address);
    else this.#byAddr.set(address, p);
  }

  /**
   * The nft commands that make the `egress_resolved` elements of `address` for `addrs` what
   * `p`'s names say now: an address a valid name holds gets the latest `until` of those names
   * as timeout; any other is deleted (add then delete: no error when it is not there).
   */
  #resolvedLines(address: string, p: Policy | undefined, addrs: Set<string>, now: number): string[] {
    if (addrs.size === 0) return [];
    const until = new Map<string, number>();
    for (const ans of p?.names.values() ?? []) {
      if (ans.until <= now) continue;
      for (const a of ans.addrs) if (addrs.has(a) && (until.get(a) ?? 0) < ans.until) until.set(a, ans.until);
    }
    const set = `inet ${this.#o.table} ${EGRESS_SETS.resolved}`;
    return [...addrs].flatMap((a) => {
      const elem = `${address} . ${a}`;
      const u = until.get(a);
      if (u === undefined) return [`add element ${set} { ${elem} }`, `delete element ${set} { ${elem} }`];
      // add, delete, add: the element gets this timeout even if it was there already.
      const timed = `{ ${elem} timeout ${Math.max(1, Math.ceil((u - now) / 1000))}s }`;
      return [`add element ${set} ${timed}`, `delete element ${set} { ${elem} }`, `add element ${set} ${timed}`];
    });
  }

  /** Forgets whatever `address` may reach (its sandbox is gone or stopped); idempotent. */
  async release(address: string): Promise<void> {
    if (!this.#byAddr.has(address)) return;
    await this.apply(this.#byAddr.get(address)!.id, address, 'none');
  }

  /**
   * Puts every policy's elements back (after the table was made again, which empties its
   * sets). Answers are not: the sandboxes ask again.
   */
  async reapply(): Promise<void> {
    const all = [...this.#byAddr];
    this.#byAddr.clear();
    for (const [address, p] of all) {
      await this.apply(
        p.id,
        address,
        p.mode === 'allow' ? { allow: p.rules.map(formatEgressRule) } : p.mode,
        p.secrets,
      );
    }
  }

  /** Whether the sandbox at `address` may reach `name` (lowercase, no trailing dot). */
  allowsName(address: string, name: string): boolean {
    const p = this.#byAddr.get(address);
    if (!p) return false;
    if (p.mode === 'internet') return true;
    return p.mode === 'allow' && p.rules.some((r) => ruleAllowsName(r, name));
  }

  /** Whether `ip` is never to be reached from a sandbox (non-public, the host's networks). */
  isBlocked(ip: string): boolean {
    let n: number;
    try {
      n = ipToInt(ip);
    } catch {
      return true;
    }
    return this.#o.blocked.some((p) => contains(p, n));
  }

  /**
   * Records an answer for `name` of the sandbox at `address` (when its rules allow the name
   * now): the map first, then, queued at once, the nft commands that make the set follow:
   * the answer's addresses, those the name held before and no longer does, and those of the
   * oldest names dropped past {@link MAX_NAMES_PER_SANDBOX} (unless another name still holds
   * them). Rejects when nft fails (the name is then forgotten again).
   */
  async #record(address: string, name: string, addrs: string[], ttlS: number): Promise<void> {
    const p = this.#byAddr.get(address);
    if (p?.mode !== 'allow' || !this.allowsName(address, name)) return;
    const ttl = Math.min(MAX_ANSWER_TTL_S, Math.max(MIN_ANSWER_TTL_S, Math.floor(ttlS)));
    const usable = addrs.filter((a) => !this.isBlocked(a));
    const now = Date.now();
    // The same answer again while more than half of its time is left: its elements stand.
    const had = p.names.get(name);
    if (
      had &&
      had.addrs.length === usable.length &&
      usable.every((a) => had.addrs.includes(a)) &&
      had.until - now > (ttl * 1000) / 2
    )
      return;
    const entry = { addrs: usable, until: now + ttl * 1000 };
    const touched = new Set([...usable, ...(had?.addrs ?? [])]);
    p.names.delete(name);
    p.names.set(name, entry);
    const max = this.#o.maxNamesPerSandbox ?? MAX_NAMES_PER_SANDBOX;
    for (const [old, ans] of p.names) {
      if (p.names.size <= max) break;
      p.names.delete(old);
      for (const a of ans.addrs) touched.add(a);
    }
    try {
      await this.#nft.run(this.#resolvedLines(address, p, touched, now));
    } catch (e) {
      if (p.names.get(name) === entry) p.names.delete(name);
      throw e;
    }
  }

  async #addressesFor(address: string, name: string): Promise<string[]> {
    const p = this.#byAddr.get(address);
    if (!p || !this.allowsName(address, name)) return [];
    const known = p.names.get(name);
    if (known && known.until > Date.now() && known.addrs.length) return known.addrs;
    const got = await this.#resolver.lookup(name, address);
    if (!got) return [];
    await this.#record(address, name, got.addrs, got.ttlS);
    return got.addrs.filter((a) => !this.isBlocked(a));
  }

  /** Routing for sandboxes (host-wide, as for NAT egress before): on at the first sandbox with egress. */
  #forwardOn(): void {
    if (this.#forwarding) return;
    if (readFileSync('/proc/sys/net/ipv4/ip_forward', 'utf8').trim() !== '1') {
      writeFileSync('/proc/sys/net/ipv4/ip_forward', '1');
    }
    this.#forwarding = true;
  }
}

/** The gate's view of an egress setting; `validation` for a bad rule (the API checked it before). */
function compile(id: string, e: Egress): Policy {
  if (typeof e === 'string') return { id, mode: e, rules: [], nets: [], names: new Map(), secrets: [] };
  const rules: EgressRule[] = [];
  const prefixes: Prefix[] = [];
  for (const raw of e.allow) {
    const r = parseEgressRule(raw);
    if ('problem' in r) throw new SandboxdError('validation', `egress rule "${raw}": ${r.problem}`);
    rules.push(r);
    if (r.kind === 'cidr') prefixes.push(parsePrefix(`${r.base}/${r.len}`));
  }
  return { id, mode: 'allow', rules, nets: mergePrefixes(prefixes).map(formatPrefix), names: new Map(), secrets: [] };
}

/** The IPv4 nameservers of the host's /etc/resolv.conf (port 53). */
export function hostNameservers(): Upstream[] {
  let text = '';
  try {
    text = readFileSync('/etc/resolv.conf', 'utf8');
  } catch {
    return [];
  }
  return [...text.matchAll(/^\s*nameserver\s+(\d+\.\d+\.\d+\.\d+)\s*$/gm)].map((m) => ({ host: m[1], port: 53 }));
}
