import { connect, type NetConnectOpts, type Socket } from 'node:net';

/**
 * Bytes read from a sandbox per read call, into one buffer reused for the connection's life.
 * Large reads halve the proxy's CPU per byte against 128 KiB; the pages only become
 * resident as reads fill them, so connections that carry small answers stay small.
 */
const READ_BUFFER_BYTES = 512 * 1024;

/**
 * One TCP connection to a sandbox port. Reads land in a buffer owned by the connection
 * (`net` `onread`), not a fresh allocation per read: relaying large bodies then makes no
 * garbage, where a new 64 KiB buffer per read would make V8 run a full GC every few dozen
 * megabytes. The consequence: data handed to {@link onData} is valid only until it
 * returns true (or until the connection is resumed after returning false).
 */
export class UpstreamConn {
  readonly socket: Socket;
  /** Set by the current user; receives `n` bytes in `buf`; return false to pause reading. */
  onData: ((n: number, buf: Buffer) => boolean) | null = null;
  /** True once it has carried a response and went back to the pool. */
  reused = false;

  /** `open`: how to reach the port when not by a direct TCP connection to `host` (a runner's tunnel). */
  constructor(
    host: string,
    readonly port: number,
    open?: (port: number) => Socket,
  ) {
    if (open) {
      this.socket = open(port);
      this.socket.on('data', (c: Buffer) => {
        if (!this.received(c.length, c)) this.socket.pause();
      });
      return;
    }
    this.socket = connect({
      host,
      port,
      noDelay: true,
      onread: {
        buffer: Buffer.allocUnsafe(READ_BUFFER_BYTES),
        callback: (n: number, buf: Buffer) => this.received(n, buf),
      },
    } as NetConnectOpts);
  }

  private received(n: number, buf: Buffer): boolean {
    if (this.onData) return this.onData(n, buf);
    this.socket.destroy(); // bytes nobody asked for: the connection is out of step
    return false;
  }
}

/** Options of {@link UpstreamPool}. */
export interface UpstreamPoolOptions {
  /** How to reach a port when not by a direct TCP connection (a runner's tunnel); default `net.connect`. */
  open?: (port: number) => Socket;
  /** Idle connections kept per port. Default 8. */
  maxIdlePerPort?: number;
  /** Idle connections kept over all ports of the sandbox, so walking many ports cannot pile them up. Default 32. */
  maxIdle?: number;
  /** An idle connection is closed after this long. Default 4000 ms (below common keep-alive timeouts). */
  idleMs?: number;
}

/**
 * Keep-alive connections to the ports of one sandbox address, most recently used first.
 * {@link destroy} closes every idle connection and makes later releases close theirs.
 */
export class UpstreamPool {
  private readonly idle = new Map<number, UpstreamConn[]>();
  private closed = false;
  private readonly maxIdle: number;
  private readonly maxIdleTotal: number;
  private idleTotal = 0;
  private readonly idleMs: number;
  private readonly open?: (port: number) => Socket;

  constructor(
    private readonly address: string,
    opts: UpstreamPoolOptions = {},
  ) {
    this.maxIdle = opts.maxIdlePerPort ?? 8;
    this.maxIdleTotal = opts.maxIdle ?? 32;
    this.idleMs = opts.idleMs ?? 4000;
    this.open = opts.open;
  }

  /** An idle connection to `port` (`reused` set), or a new one that is connecting. */
  acquire(port: number, opts: { fresh?: boolean } = {}): UpstreamConn {
    const list = this.idle.get(port);
    while (!opts.fresh && list?.length) {
      const c = list.pop()!;
      this.idleTotal--;
      if (c.socket.destroyed || c.socket.readableEnded) continue;
      c.socket.setTimeout(0);
      return c;
    }
    const c = new UpstreamConn(this.address, port, this.open);
    // Permanent listeners: an idle connection's error or close must not go unhandled.
    c.socket.on('error', () => {});
    c.socket.on('timeout', () => c.socket.destroy()); // armed only while idle
    c.socket.once('close', () => {
      const l = this.idle.get(port);
      const i = l?.indexOf(c) ?? -1;
      if (l && i !== -1) {
        l.splice(i, 1);
        this.idleTotal--;
      }
    });
    return c;
  }

  /** Takes back a connection whose exchange ended cleanly; closes it when the pool is full or closed. */
  release(c: UpstreamConn): void {
    c.onData = null;
    const list = this.idle.get(c.port) ?? [];
    if (
      this.closed ||
      c.socket.destroyed ||
      c.socket.readableEnded ||
      list.length >= this.maxIdle ||
      this.idleTotal >= this.maxIdleTotal
    ) {
      c.socket.destroy();
      return;
    }
    c.reused = true;
    list.push(c);
    this.idleTotal++;
    this.idle.set(c.port, list);
    c.socket.setTimeout(this.idleMs);
    c.socket.resume(); // an idle connection still notices the sandbox closing it
  }

  /** Closes idle connections; connections in use are closed when released. */
  destroy(): void {
    this.closed = true;
    for (const list of this.idle.values()) for (const c of list) c.socket.destroy();
    this.idle.clear();
    this.idleTotal = 0;
  }

  /** Idle connections held, over all ports. */
  get idleCount(): number {
    return this.idleTotal;
  }
}
