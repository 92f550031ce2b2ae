import type { WebSocket } from 'ws';

/** Ping period of the sockets to a runner; one that missed the previous pong is cut. */
export const HEARTBEAT_MS = 30_000;

/**
 * Long-lived sockets to a runner (terminal clients, process readers, the calls socket),
 * pinged every `periodMs` (default {@link HEARTBEAT_MS}): one whose runner did not answer
 * the previous ping is terminated, so its owner sees the link lost instead of waiting on a
 * dead connection. The timer runs only while a socket is watched.
 */
export class SocketHeartbeat {
  private readonly live = new Set<WebSocket>();
  private readonly alive = new WeakSet<WebSocket>();
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly periodMs = HEARTBEAT_MS) {}

  /** Call with every socket's `pong` listener set up (see {@link pong}). */
  watch(ws: WebSocket): void {
    if (ws.readyState !== ws.OPEN) return;
    this.live.add(ws);
    this.alive.add(ws);
    ws.once('close', () => this.live.delete(ws));
    if (this.timer) return;
    this.timer = setInterval(() => this.beat(), this.periodMs);
    this.timer.unref();
  }

  /** The socket answered a ping. */
  pong(ws: WebSocket): void {
    this.alive.add(ws);
  }

  /** Stops the timer and cuts every watched socket. */
  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    for (const ws of this.live) ws.terminate();
  }

  private beat(): void {
    for (const s of this.live) {
      if (!this.alive.has(s)) {
        s.terminate();
        continue;
      }
      this.alive.delete(s);
      s.ping();
    }
    if (!this.live.size && this.timer) {
      clearInterval(this.timer);
      this.timer = null;
    }
  }
}
