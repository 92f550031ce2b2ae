import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { Config } from '../config.js';
import type { Clock } from '../domain/clock.js';
import type { Leases } from '../store/store.js';

/** Lease name of a process's presence. */
const presenceLease = (id: string) => `presence:${id}`;

/**
 * This process among the servers that share a database, and whether another one still runs.
 *
 * Work that spans several store writes (a create between its reservation and `started`, a
 * start, a snapshot) leaves records in a state of their own meanwhile; after a crash someone
 * must finish or undo them, but never while the process doing the work still runs. Such
 * records name their owner ({@link id}); a server holds the store lease `presence:<id>` for
 * `reaperLeaseMs` and renews it on every reaper tick ({@link beat}), so an owner whose lease
 * ran out is gone. With SQLite there is one process: an owner other than this one is an
 * earlier, crashed run of it.
 */
export class Presence {
  /** Host, pid and a random part: two servers in one process differ, and a restart is a new one. */
  readonly id = `${hostname()}/${process.pid}/${randomBytes(6).toString('hex')}`;
  /** The lease's end as last renewed (this process's clock). */
  private until = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly d: {
      store: Leases;
      clock: Clock;
      config: Readonly<Pick<Config, 'databaseUrl' | 'reaperLeaseMs'>>;
    },
  ) {}

  /** Servers share the database (PostgreSQL). */
  get shared(): boolean {
    return Boolean(this.d.config.databaseUrl);
  }

  /** Takes or renews this process's presence lease once a third of it has passed. Throws when the store fails. */
  async beat(): Promise<void> {
    if (!this.shared) return;
    const ttl = this.d.config.reaperLeaseMs;
    const now = this.d.clock.now();
    if (now < this.until - (ttl * 2) / 3) return;
    const got = await this.d.store.acquireLease(presenceLease(this.id), this.id, ttl, now);
    if (got.held) this.until = now + ttl;
  }

  /**
   * Whether the process `owner` (an {@link id}) may still be at work: this one, or another
   * whose presence lease is live. No owner, or one whose lease ran out (checked by taking it
   * for an instant), is gone. Throws when the store fails.
   */
  async alive(owner: unknown): Promise<boolean> {
    if (typeof owner !== 'string' || !owner) return false;
    if (owner === this.id) return true;
    if (!this.shared) return false;
    const name = presenceLease(owner);
    const probe = await this.d.store.acquireLease(name, this.id, 1, this.d.clock.now());
    if (!probe.held) return true;
    await this.d.store.releaseLease(name, this.id).catch(() => undefined);
    return false;
  }

  /** Gives the presence lease up (a graceful stop: what this process owned is free at once). */
  async stop(): Promise<void> {
    if (!this.shared || this.until === Number.NEGATIVE_INFINITY) return;
    this.until = Number.NEGATIVE_INFINITY;
    await this.d.store.releaseLease(presenceLease(this.id), this.id);
  }
}
