import type { Socket } from 'node:net';
import { Duplex } from 'node:stream';

/**
 * A sandbox port reached through a tunnel that opens asynchronously (a runner's, see
 * `runner/tunnel.ts`), shaped like a connecting `net.Socket` for the proxy's forwarders:
 * `connecting` until the tunnel is open, then `'connect'`; writes made before are held;
 * reads follow backpressure (`pause`/`resume`); `setTimeout` arms an idle timer. A tunnel
 * that fails to open is destroyed with an error carrying a `code` (`ECONNREFUSED` when the
 * sandbox port refused, `EHOSTUNREACH` when the runner could not be reached or refused).
 */
export class TunnelSocket extends Duplex {
  connecting = true;
  private sock: Duplex | null = null;
  private held: { chunk: Buffer; cb: (e?: Error | null) => void } | null = null;
  private idleMs = 0;
  private idleTimer: NodeJS.Timeout | undefined;

  constructor(open: Promise<Duplex>) {
    super({ allowHalfOpen: true });
    open.then(
      (s) => this.opened(s),
      (e: Error & { code?: string; kind?: string; details?: { code?: string } }) => {
        const err = Object.assign(new Error(e.message), {
          code: e.details?.code ?? (e.kind === 'upstream' ? 'ECONNREFUSED' : 'EHOSTUNREACH'),
        });
        this.destroy(err);
      },
    );
  }

  private opened(s: Duplex): void {
    if (this.destroyed) {
      s.destroy();
      return;
    }
    this.sock = s;
    this.connecting = false;
    s.on('data', (c: Buffer) => {
      this.touch();
      if (!this.push(c)) s.pause();
    });
    s.on('end', () => this.push(null));
    s.on('error', (e) => this.destroy(e));
    s.on('close', () => this.destroy());
    s.on('drain', () => this.emit('drain'));
    const held = this.held;
    this.held = null;
    if (held) s.write(held.chunk, held.cb);
    this.emit('connect');
  }

  private touch(): void {
    if (!this.idleMs) return;
    clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => this.emit('timeout'), this.idleMs);
  }

  /** Emits `'timeout'` after `ms` without reads or writes (0 disarms), as `net.Socket`'s. */
  setTimeout(ms: number): this {
    this.idleMs = ms;
    clearTimeout(this.idleTimer);
    this.touch();
    return this;
  }

  setNoDelay(): this {
    return this;
  }

  override _read(): void {
    this.sock?.resume();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (e?: Error | null) => void): void {
    this.touch();
    if (this.sock) this.sock.write(chunk, cb);
    else this.held = { chunk, cb };
  }

  override _final(cb: (e?: Error | null) => void): void {
    if (this.sock) this.sock.end(cb);
    else cb();
  }

  override _destroy(err: Error | null, cb: (e?: Error | null) => void): void {
    clearTimeout(this.idleTimer);
    this.sock?.destroy();
    cb(err);
  }

  /** The tunnel as the `net.Socket` the forwarders expect (the members they use exist). */
  asSocket(): Socket {
    return this as unknown as Socket;
  }
}
