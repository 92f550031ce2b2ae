import { createSocket, type RemoteInfo, type Socket } from 'node:dgram';
import { createServer, type Server, type Socket as TcpSocket } from 'node:net';
import { randomInt } from 'node:crypto';
import * as dnsPacket from 'dns-packet';

/** An upstream resolver: IPv4 address and port. */
export interface Upstream {
  host: string;
  port: number;
}

/** What the resolver asks of the egress gate about the sandbox that sent a query. */
export interface ResolverPolicy {
  /** `none` (or unknown address): REFUSED; `internet`: forwarded as is; `allow`: checked. */
  modeOf(address: string): 'none' | 'internet' | 'allow';
  allowsName(address: string, name: string): boolean;
  /** Records the IPv4 answers for `name` (before the reply goes out: the sandbox connects right after). */
  record(address: string, name: string, addrs: string[], ttlS: number): Promise<void>;
}

const RCODE = { NOERROR: 0, FORMERR: 1, SERVFAIL: 2, NXDOMAIN: 3, REFUSED: 5 } as const;
const RD_RA = dnsPacket.RECURSION_DESIRED | dnsPacket.RECURSION_AVAILABLE;
const UPSTREAM_TIMEOUT_MS = 2000;
/** Queries waiting for upstream at once, of all sandboxes (a backstop: each sandbox has its share). */
const MAX_PENDING = 4096;
/** Queries of one sandbox waiting for upstream at once, by default (`SANDBOXD_EGRESS_DNS_PENDING_PER_SANDBOX`). */
export const DNS_PENDING_PER_SANDBOX = 64;
/** DNS-over-TCP connections of one sandbox at once (each answers its queries in turn). */
const TCP_PER_SANDBOX = 16;
const TCP_IDLE_MS = 10_000;

/** `name` as rules see it: lowercase, without the trailing dot. */
export function canonicalName(name: string): string {
  return name.toLowerCase().replace(/\.$/, '');
}

/**
 * The sandboxes' resolver (dns-packet for the wire format): listens on the gateway address
 * (UDP and TCP, on ports the ruleset redirects a sandbox's gateway:53 to) and answers by the
 * source address, which the strict reverse-path rule ties to one sandbox. Denied names get
 * NXDOMAIN and are never sent upstream, so nothing leaves through a name the rules deny
 * (no tunnelling through sandboxd's resolver); allowed ones are forwarded to the upstream
 * resolvers from the gateway address (so through the egress path) and their A answers are
 * recorded with their TTL before the answer is sent. AAAA of allowed names answer empty
 * (sandboxes have no IPv6). Garbage is dropped; a reply is only taken from the upstream it
 * was sent to, with the query's id and question.
 *
 * Fair share: each sandbox has at most `maxPendingPerSandbox` queries waiting for upstream
 * (its proxy lookups included) and {@link TCP_PER_SANDBOX} TCP connections; past them its
 * queries get REFUSED (its connections are closed) at once, while every other sandbox's go
 * on. The global bound ({@link MAX_PENDING}) is only reached by that many sandboxes at
 * their share at once.
 */
export class EgressResolver {
  #udp: Socket | undefined;
  #tcp: Server | undefined;
  #up: Socket | undefined;
  readonly #pending = new Map<
    number,
    { resolve: (b: Buffer | null) => void; to: Upstream; sent: Buffer; timer: NodeJS.Timeout }
  >();
  readonly #tcpConns = new Set<TcpSocket>();
  /** Per sandbox address: its queries waiting for upstream, its TCP connections. */
  readonly #share = new Map<string, { pending: number; tcp: number }>();

  constructor(
    private readonly o: {
      gateway: string;
      upstream: Upstream[];
      policy: ResolverPolicy;
      /** How long each upstream gets to answer (default 2000). */
      upstreamTimeoutMs?: number;
      /** Queries of one sandbox waiting for upstream at once (default {@link DNS_PENDING_PER_SANDBOX}). */
      maxPendingPerSandbox?: number;
      /** Tests: queries waiting for upstream in all (default {@link MAX_PENDING}). */
      maxPending?: number;
    },
  ) {}

  /** Binds the listeners and the upstream socket on the gateway address; resolves their ports. */
  async listen(): Promise<{ udp: number; tcp: number }> {
    const gw = this.o.gateway;
    const up = createSocket('udp4');
    up.on('message', (msg, rinfo) => this.#onUpstream(msg, rinfo));
    up.on('error', () => {});
    await new Promise<void>((res, rej) => up.once('error', rej).bind(0, gw, () => res()));
    up.unref(); // never what keeps a process alive: its server (or test) decides
    this.#up = up;
    const udp = createSocket('udp4');
    udp.on('message', (msg, rinfo) => {
      void this.answer(msg, rinfo.address).then((reply) => {
        if (reply) udp.send(reply, rinfo.port, rinfo.address, () => {});
      });
    });
    udp.on('error', () => {});
    await new Promise<void>((res, rej) => udp.once('error', rej).bind(0, gw, () => res()));
    udp.unref();
    this.#udp = udp;
    const tcp = createServer((s) => this.#onTcp(s));
    tcp.on('error', () => {});
    await new Promise<void>((res, rej) => tcp.once('error', rej).listen(0, gw, () => res()));
    tcp.unref();
    this.#tcp = tcp;
    return { udp: udp.address().port, tcp: (tcp.address() as { port: number }).port };
  }

  close(): void {
    for (const p of this.#pending.values()) {
      clearTimeout(p.timer);
      p.resolve(null);
    }
    this.#pending.clear();
    for (const s of this.#tcpConns) s.destroy();
    this.#udp?.close();
    this.#up?.close();
    this.#tcp?.close();
    this.#udp = this.#up = this.#tcp = undefined;
  }

  /**
   * The reply to query `msg` from sandbox address `from`, or null (garbage: no reply).
   * Never throws.
   */
  async answer(msg: Buffer, from: string): Promise<Buffer | null> {
    let q: dnsPacket.Packet;
    try {
      q = dnsPacket.decode(msg);
    } catch {
      return null;
    }
    if (q.type !== 'query' || q.id === undefined) return null;
    const question = q.questions?.length === 1 ? q.questions[0] : undefined;
    if (!question || (q.flags ?? 0) & 0x7800 /* opcode */) return reply(q, RCODE.FORMERR);
    const mode = this.o.policy.modeOf(from);
    if (mode === 'none') return reply(q, RCODE.REFUSED);
    const name = canonicalName(question.name);
    if (mode === 'allow') {
      if (!this.o.policy.allowsName(from, name)) return reply(q, RCODE.NXDOMAIN);
      if (question.type === 'AAAA') return reply(q, RCODE.NOERROR);
    }
    // From here the query waits for upstream: within the sandbox's share, else REFUSED.
    if (!this.#take(from, 'pending')) return reply(q, RCODE.REFUSED);
    try {
      const raw = await this.#forward(msg, q.id);
      if (!raw) return reply(q, RCODE.SERVFAIL);
      if (mode === 'internet') return raw;
      const a = answersOf(raw);
      if (a?.addrs.length) {
        try {
          await this.o.policy.record(from, name, a.addrs, a.ttlS);
        } catch {
          return reply(q, RCODE.SERVFAIL);
        }
      }
      return raw;
    } finally {
      this.#give(from, 'pending');
    }
  }

  /** Takes one of `from`'s share of `kind`; false when it has none left. */
  #take(from: string, kind: 'pending' | 'tcp'): boolean {
    const s = this.#share.get(from) ?? { pending: 0, tcp: 0 };
    const max = kind === 'pending' ? (this.o.maxPendingPerSandbox ?? DNS_PENDING_PER_SANDBOX) : TCP_PER_SANDBOX;
    if (s[kind] >= max) return false;
    s[kind]++;
    this.#share.set(from, s);
    return true;
  }

  #give(from: string, kind: 'pending' | 'tcp'): void {
    const s = this.#share.get(from);
    if (!s) return;
    s[kind]--;
    if (s.pending <= 0 && s.tcp <= 0) this.#share.delete(from);
  }

  /**
   * The A records of `name` from the upstream resolvers, as the sandbox's own query would
   * get them (for the proxy, when the sandbox connected without asking sandboxd first).
   * With `forAddress`, the lookup counts in that sandbox's share (null past it).
   */
  async lookup(name: string, forAddress?: string): Promise<{ addrs: string[]; ttlS: number } | null> {
    if (forAddress !== undefined) {
      if (!this.#take(forAddress, 'pending')) return null;
      try {
        return await this.lookup(name);
      } finally {
        this.#give(forAddress, 'pending');
      }
    }
    const id = randomInt(65536);
    const msg = dnsPacket.encode({
      type: 'query',
      id,
      flags: dnsPacket.RECURSION_DESIRED,
      questions: [{ type: 'A', name, class: 'IN' }],
    });
    const raw = await this.#forward(msg, id);
    return raw ? answersOf(raw) : null;
  }

  /** Sends `msg` to each upstream in turn until one answers; the answer carries `id` again. */
  async #forward(msg: Buffer, id: number): Promise<Buffer | null> {
    const up = this.#up;
    if (!up || this.#pending.size >= (this.o.maxPending ?? MAX_PENDING)) return null;
    for (const to of this.o.upstream) {
      let ours = randomInt(65536);
      for (let i = 0; i < 8 && this.#pending.has(ours); i++) ours = randomInt(65536);
      if (this.#pending.has(ours)) return null;
      const out = Buffer.from(msg);
      out.writeUInt16BE(ours, 0);
      const got = await new Promise<Buffer | null>((resolve) => {
        const timer = setTimeout(() => {
          this.#pending.delete(ours);
          resolve(null);
        }, this.o.upstreamTimeoutMs ?? UPSTREAM_TIMEOUT_MS);
        this.#pending.set(ours, { resolve, to, sent: out, timer });
        up.send(out, to.port, to.host, (err) => {
          if (err) {
            clearTimeout(timer);
            this.#pending.delete(ours);
            resolve(null);
          }
        });
      });
      if (got) {
        const back = Buffer.from(got);
        back.writeUInt16BE(id, 0);
        return back;
      }
    }
    return null;
  }

  #onUpstream(msg: Buffer, rinfo: RemoteInfo): void {
    if (msg.length < 12) return;
    const p = this.#pending.get(msg.readUInt16BE(0));
    if (!p || p.to.host !== rinfo.address || p.to.port !== rinfo.port || !sameQuestion(msg, p.sent)) return;
    this.#pending.delete(msg.readUInt16BE(0));
    clearTimeout(p.timer);
    p.resolve(msg);
  }

  /** DNS over TCP: 2-byte length, then the message; answered in order. */
  #onTcp(s: TcpSocket): void {
    const from = (s.remoteAddress ?? '').replace(/^::ffff:/, '');
    s.on('error', () => {});
    if (!this.#take(from, 'tcp')) return void s.destroy();
    s.once('close', () => this.#give(from, 'tcp'));
    this.#tcpConns.add(s);
    s.setTimeout(TCP_IDLE_MS, () => s.destroy());
    s.on('close', () => this.#tcpConns.delete(s));
    let buf = Buffer.alloc(0);
    let chain = Promise.resolve();
    s.on('data', (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      if (buf.length > 2 + 65535 * 2) return void s.destroy();
      while (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
        const msg = buf.subarray(2, 2 + buf.readUInt16BE(0));
        buf = buf.subarray(2 + msg.length);
        chain = chain.then(async () => {
          const r = await this.answer(Buffer.from(msg), from);
          if (!r) return void s.destroy();
          const len = Buffer.alloc(2);
          len.writeUInt16BE(r.length);
          if (!s.destroyed) s.write(Buffer.concat([len, r]));
        });
      }
    });
  }
}

/** A reply to `q` with no answers and `rcode`. */
function reply(q: dnsPacket.Packet, rcode: number): Buffer {
  return dnsPacket.encode({
    type: 'response',
    id: q.id,
    flags: (RD_RA | rcode) & ~0x7800,
    questions: q.questions ?? [],
  });
}

/** Whether the reply `got` answers the question of `sent`. */
function sameQuestion(got: Buffer, sent: Buffer): boolean {
  try {
    const a = dnsPacket.decode(got);
    const b = dnsPacket.decode(sent);
    const qa = a.questions?.[0];
    const qb = b.questions?.[0];
    return (
      a.type === 'response' &&
      qa !== undefined &&
      qb !== undefined &&
      canonicalName(qa.name) === canonicalName(qb.name) &&
      qa.type === qb.type
    );
  } catch {
    return false;
  }
}

/** The A addresses of a reply and their smallest TTL (seconds), or null for garbage. */
function answersOf(raw: Buffer): { addrs: string[]; ttlS: number } | null {
  try {
    const p = dnsPacket.decode(raw);
    const a = (p.answers ?? []).filter((x) => x.type === 'A') as dnsPacket.StringAnswer[];
    return {
      addrs: [...new Set(a.map((x) => x.data))],
      ttlS: a.length ? Math.min(...a.map((x) => x.ttl ?? 0)) : 0,
    };
  } catch {
    return null;
  }
}
