import { connect, createServer, type Server, type Socket } from 'node:net';
import type { SecretInjection } from '../../driver.js';
import type { EgressCa } from './ca.js';
import { type FirstBytes, httpHost, MAX_FIRST_BYTES, tlsServerName } from './first-bytes.js';
import { type Injection, Interceptor } from './intercept.js';

/** What the proxy asks of the egress gate. */
export interface ProxyPolicy {
  /**
   * Whether the sandbox at `address` is proxied: it has `allow` rules, or secret injection
   * rules (then also with egress `internet`).
   */
  isRuled(address: string): boolean;
  /** The injection rules of the sandbox at `address` whose domains allow `name` (empty: relayed). */
  secretsFor?(address: string, name: string): SecretInjection[];
  allowsName(address: string, name: string): boolean;
  /**
   * The public addresses `name` resolved to for that sandbox (recorded from its DNS answers,
   * else looked up upstream and recorded); never a blocked one. Empty when none.
   */
  addressesFor(address: string, name: string): Promise<string[]>;
}

const FIRST_BYTES_MS = 10_000;
const CONNECT_MS = 10_000;
/** Sockets at once, in all (a relayed connection holds two): past it new connections are closed at once. */
const MAX_CONNECTIONS = 8192;
/** Connections of one sandbox at once, by default (`SANDBOXD_EGRESS_PROXY_CONNECTIONS_PER_SANDBOX`). */
export const PROXY_CONNECTIONS_PER_SANDBOX = 512;
/** A relayed connection with no byte either way for this long is closed, by default (`SANDBOXD_EGRESS_PROXY_IDLE_TIMEOUT_MS`). */
export const PROXY_IDLE_TIMEOUT_MS = 600_000;
/** TLS alert: fatal, handshake_failure. */
const TLS_REFUSAL = Buffer.from([0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 0x28]);

/**
 * The transparent proxy for TCP 80 and 443 of sandboxes with `allow` rules (the ruleset
 * redirects their connections to it, whatever address they dialled). It reads the HTTP Host
 * or the TLS SNI (at most 16 KiB, within 10 s), checks the name against the sandbox's rules
 * and connects, from the gateway address (so through the egress path), to an address that
 * name resolved to for that sandbox: never to the address the sandbox chose. No name, a
 * denied name, or an unparsable start: refused (HTTP 403, a TLS handshake_failure alert).
 * Then bytes are relayed as they are (TLS is not terminated), until either side closes or
 * no byte passed either way for `idleTimeoutMs`.
 *
 * Fair share: a sandbox has at most `maxPerSandbox` connections at once (waiting for their
 * first bytes, relayed, or terminated, and the upstream connection of each injected request
 * in flight); past it its new ones are closed at once (a request: 503), and no other sandbox's.
 */
export class EgressProxy {
  #servers: Server[] = [];
  readonly #conns = new Set<Socket>();
  readonly #perSandbox = new Map<string, number>();

  constructor(
    private readonly o: {
      gateway: string;
      policy: ProxyPolicy;
      /** Default {@link PROXY_CONNECTIONS_PER_SANDBOX}. */
      maxPerSandbox?: number;
      /** Default {@link PROXY_IDLE_TIMEOUT_MS}. */
      idleTimeoutMs?: number;
      /** Secret injection: the CA that signs the leaves; absent: every connection is relayed. */
      ca?: EgressCa;
      /** Extra CAs (PEM) trusted for upstream TLS of injected requests. */
      extraCa?: string[];
      /** Tests: the upstream ports (default 80, 443). */
      upstreamPorts?: { http: number; tls: number };
      onInjection?(e: Injection): void;
    },
  ) {
    const ca = o.ca;
    if (ca) {
      this.#interceptor = new Interceptor({
        ca,
        gateway: o.gateway,
        extraCa: o.extraCa,
        upstreamPorts: o.upstreamPorts,
        rulesFor: (a, n) => o.policy.secretsFor?.(a, n) ?? [],
        onInjection: (e) => o.onInjection?.(e),
        track: (s) => {
          this.#conns.add(s);
          s.once('close', () => this.#conns.delete(s));
        },
        claim: (from) => {
          if (!this.#claim(from)) return null;
          let done = false;
          return () => {
            if (!done) this.#release(from);
            done = true;
          };
        },
        idleTimeoutMs: o.idleTimeoutMs ?? PROXY_IDLE_TIMEOUT_MS,
      });
    }
  }

  readonly #interceptor: Interceptor | undefined;

  /** Listens on the gateway address; resolves the ports of the HTTP and the TLS side. */
  async listen(): Promise<{ http: number; tls: number }> {
    const http = await this.#listen('http');
    const tls = await this.#listen('tls');
    return { http, tls };
  }

  close(): void {
    for (const s of this.#servers) s.close();
    for (const c of this.#conns) c.destroy();
    this.#servers = [];
  }

  async #listen(kind: 'http' | 'tls'): Promise<number> {
    const server = createServer({ pauseOnConnect: false }, (s) => this.#accept(s, kind));
    server.on('error', () => {});
    await new Promise<void>((res, rej) => server.once('error', rej).listen(0, this.o.gateway, () => res()));
    server.unref(); // never what keeps a process alive: its server (or test) decides
    this.#servers.push(server);
    return (server.address() as { port: number }).port;
  }

  #accept(s: Socket, kind: 'http' | 'tls'): void {
    const from = (s.remoteAddress ?? '').replace(/^::ffff:/, '');
    s.on('error', () => {});
    if (!this.o.policy.isRuled(from) || !this.#claim(from)) {
      s.destroy();
      return;
    }
    this.#conns.add(s);
    s.once('close', () => {
      this.#conns.delete(s);
      this.#release(from);
    });
    s.setTimeout(FIRST_BYTES_MS, () => s.destroy());
    const parse = kind === 'http' ? httpHost : tlsServerName;
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer): void => {
      chunks.push(chunk);
      size += chunk.length;
      const head = Buffer.concat(chunks);
      const r: FirstBytes = size > MAX_FIRST_BYTES * 2 ? { refused: 'too large' } : parse(head);
      if (r === 'more') return;
      s.off('data', onData);
      s.pause();
      if ('refused' in r) this.#refuse(s, kind, r.refused);
      else void this.#relay(s, kind, from, r.name, head);
    };
    s.on('data', onData);
    s.on('end', () => {
      if (!s.destroyed && s.listenerCount('data') > 0) s.destroy();
    });
  }

  /**
   * One connection more for the sandbox at `from`, when its share and the proxy's total allow
   * it (false: none taken); {@link #release} gives it back.
   */
  #claim(from: string): boolean {
    const n = this.#perSandbox.get(from) ?? 0;
    if (n >= (this.o.maxPerSandbox ?? PROXY_CONNECTIONS_PER_SANDBOX) || this.#conns.size >= MAX_CONNECTIONS)
      return false;
    this.#perSandbox.set(from, n + 1);
    return true;
  }

  /** One connection of the sandbox at `from` fewer. */
  #release(from: string): void {
    const n = (this.#perSandbox.get(from) ?? 1) - 1;
    if (n <= 0) this.#perSandbox.delete(from);
    else this.#perSandbox.set(from, n);
  }

  async #relay(s: Socket, kind: 'http' | 'tls', from: string, name: string, head: Buffer): Promise<void> {
    if (!this.o.policy.allowsName(from, name)) return this.#refuse(s, kind, `${name} is not allowed`);
    let addrs: string[];
    try {
      addrs = await this.o.policy.addressesFor(from, name);
    } catch {
      addrs = [];
    }
    if (addrs.length === 0 || s.destroyed) return this.#refuse(s, kind, `${name} has no reachable address`);
    if (this.#interceptor && (this.o.policy.secretsFor?.(from, name).length ?? 0) > 0) {
      // A name with secrets: terminated here, each request checked and injected (intercept.ts).
      s.setTimeout(this.o.idleTimeoutMs ?? PROXY_IDLE_TIMEOUT_MS, () => s.destroy());
      this.#interceptor.take(s, kind, from, name, head, addrs);
      return;
    }
    const ports = this.o.upstreamPorts ?? { http: 80, tls: 443 };
    const up = connect({
      host: addrs[0],
      port: kind === 'http' ? ports.http : ports.tls,
      localAddress: this.o.gateway,
    });
    this.#conns.add(up);
    up.once('close', () => this.#conns.delete(up));
    up.setTimeout(CONNECT_MS, () => up.destroy());
    up.on('error', () => s.destroy());
    s.on('close', () => up.destroy());
    up.on('close', () => s.destroy());
    up.once('connect', () => {
      // Any byte read or written on either socket restarts its timer: an idle tunnel goes.
      const idle = this.o.idleTimeoutMs ?? PROXY_IDLE_TIMEOUT_MS;
      up.setTimeout(idle, () => up.destroy());
      s.setTimeout(idle, () => s.destroy());
      // Bytes go on as they come: a relay must not add Nagle's wait to each side's small
      // writes (a TLS handshake through it took ~40 ms more without).
      s.setNoDelay(true);
      up.setNoDelay(true);
      up.write(head);
      s.pipe(up);
      up.pipe(s);
      s.resume();
    });
  }

  #refuse(s: Socket, kind: 'http' | 'tls', why: string): void {
    if (kind === 'http') {
      const body = `sandboxd egress: ${why}\n`;
      s.end(
        `HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
      );
    } else {
      s.end(TLS_REFUSAL);
    }
    setTimeout(() => s.destroy(), 1000).unref();
  }
}
