import type { HostAbsence } from '../../driver.js';
import { type RunnerDriver, RunnerMember } from './member.js';

/** Where the fleet's log lines go (a pino logger fits). */
export interface FleetLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/** Options of {@link Membership}. */
export interface MembershipOptions {
  /** A driver for the runner at `url` (a RemoteDriver; tests give fakes). */
  connect(url: string): RunnerDriver;
  /** The clock of `lastOkAt` and of how long a runner has not answered, ms. */
  now(): number;
  /** Health checks of each runner this often, ms; 0: only {@link Membership.refresh} checks (tests). */
  pollMs: number;
  /** A health check without an answer in this time fails, ms. */
  healthTimeoutMs: number;
  /** A runner silent this long has its sandboxes turned `error` (the reaper decides; here: when to say so), ms. */
  downAfterMs: number;
  log: FleetLog;
  /** Called when a runner comes, goes, stops or starts answering, or has been silent for `downAfterMs`. */
  onChange(): void;
}

/**
 * The runners of an API process: one {@link RunnerMember} per URL of the current list (fixed,
 * or the Service's endpoints as they change), each checked every `pollMs`, and an index by
 * node name (what records name). A node keeps its entry when its URL goes (it stands for
 * the node's sandboxes until another URL answers with that name); a URL that answers with
 * a name another answering URL has is a duplicate and not used.
 */
export class Membership {
  private readonly byUrl = new Map<string, RunnerMember>();
  private readonly byNode = new Map<string, RunnerMember>();
  /** Nodes no member answers for any more: when they last answered. */
  private readonly forgotten = new Map<string, number>();
  private readonly timers = new Map<RunnerMember, NodeJS.Timeout>();
  private readonly polling = new Map<RunnerMember, Promise<void>>();
  private closed = false;
  /** When this process began to look for runners: a node it never saw has been silent since. */
  readonly startedAt: number;

  constructor(private readonly o: MembershipOptions) {
    this.startedAt = o.now();
  }

  /** The members of the current list. */
  members(): RunnerMember[] {
    return [...this.byUrl.values()];
  }

  /** The members placements and calls may use now. */
  up(): RunnerMember[] {
    return this.members().filter((m) => m.up);
  }

  /** The member that answers (or last answered) for node `node`. */
  node(node: string): RunnerMember | undefined {
    return this.byNode.get(node);
  }

  /** Every node known: the current list's and those whose URL went. */
  nodes(): RunnerMember[] {
    const out = new Set<RunnerMember>(this.byNode.values());
    for (const m of this.byUrl.values()) out.add(m);
    return [...out];
  }

  /** Makes `urls` the list: new URLs are checked at once, members of URLs no longer listed are removed. */
  setUrls(urls: readonly string[]): void {
    if (this.closed) return;
    const want = new Set(urls);
    let changed = false;
    for (const [url, m] of this.byUrl) {
      if (want.has(url)) continue;
      this.byUrl.delete(url);
      m.removed = true;
      m.ok = false;
      m.reason = 'it left the runner list';
      clearTimeout(this.timers.get(m));
      this.timers.delete(m);
      void m.driver.close().catch(() => undefined);
      this.o.log.warn({ runner: m.node ?? url, url }, 'runner removed from the list');
      this.remindWhenDown(m);
      changed = true;
    }
    for (const url of want) {
      if (this.byUrl.has(url)) continue;
      const m = new RunnerMember(url, this.o.connect(url), this.o.now());
      this.byUrl.set(url, m);
      this.o.log.info({ url }, 'runner added');
      void this.poll(m);
      changed = true;
    }
    if (changed) this.o.onChange();
  }

  /** Checks every member of the list now (and their image lists when due); resolves when all answered or failed. */
  async refresh(): Promise<void> {
    await Promise.all(this.members().map((m) => this.poll(m)));
    await Promise.all(this.up().map((m) => m.refreshImages(this.o.now())));
  }

  /** Checks `m` now (joining a check in progress); resolves once it answered or failed. */
  recheck(m: RunnerMember): Promise<void> {
    return this.poll(m);
  }

  /** A call to `m` failed for lack of an answer: not used until a check says it answers again. */
  failed(m: RunnerMember, e: unknown): void {
    const wasUp = m.up;
    m.fail(e);
    if (wasUp) this.wentDown(m);
    if (this.o.pollMs > 0) void this.poll(m);
  }

  /**
   * How long node `node` has not answered and why; null while it is up. A node this process
   * never saw answering has been silent since it began looking ({@link startedAt}).
   */
  absence(node: string): HostAbsence | null {
    const now = this.o.now();
    const m = this.byNode.get(node);
    if (m?.up) return null;
    if (m) return { host: node, forMs: now - m.lastOkAt, reason: m.why };
    return {
      host: node,
      forMs: now - (this.forgotten.get(node) ?? this.startedAt),
      reason: 'no runner of the list answers with that node name',
    };
  }

  /** Stops the checks and closes every member's connections. */
  async close(): Promise<void> {
    this.closed = true;
    for (const t of this.timers.values()) clearTimeout(t);
    this.timers.clear();
    await Promise.all(this.members().map((m) => m.driver.close().catch(() => undefined)));
  }

  /** One health check of `m` (joined with one in progress), then the next one scheduled. */
  private poll(m: RunnerMember): Promise<void> {
    const running = this.polling.get(m);
    if (running) return running;
    clearTimeout(this.timers.get(m));
    const p = this.check(m).finally(() => {
      this.polling.delete(m);
      if (this.o.pollMs > 0 && !this.closed && !m.removed)
        this.timers.set(
          m,
          setTimeout(() => void this.poll(m), this.o.pollMs),
        );
      this.timers.get(m)?.unref();
    });
    this.polling.set(m, p);
    return p;
  }

  private async check(m: RunnerMember): Promise<void> {
    const wasUp = m.up;
    const before = m.lastOkAt;
    try {
      const h = await m.check(this.o.now, this.o.healthTimeoutMs);
      if (m.removed || this.closed) return;
      this.named(m, h.node, before);
    } catch {
      /* recorded by the member */
    }
    if (m.removed || this.closed) return;
    if (m.up && !wasUp) {
      this.o.log.info({ runner: m.node, url: m.url }, 'runner answers');
      this.o.onChange();
    } else if (!m.up && wasUp) this.wentDown(m);
    if (m.up) void m.refreshImages(this.o.now());
  }

  private wentDown(m: RunnerMember): void {
    this.o.log.warn({ runner: m.node ?? m.url, url: m.url, reason: m.reason }, 'runner stopped answering');
    this.o.onChange();
    this.remindWhenDown(m);
  }

  /** Says so once `m` has been silent for `downAfterMs` (the reaper then turns its sandboxes `error`). */
  private remindWhenDown(m: RunnerMember): void {
    if (this.o.pollMs <= 0) return;
    const wait = Math.max(0, m.lastOkAt + this.o.downAfterMs - this.o.now()) + 20;
    setTimeout(() => {
      if (!this.closed && !m.up) this.o.onChange();
    }, wait).unref();
  }

  /** `m` answered as node `node`: index it, unless another answering member has that name. `before`: its answer before this one. */
  private named(m: RunnerMember, node: string, before: number): void {
    if (m.node !== null && m.node !== node && this.byNode.get(m.node) === m) {
      this.o.log.warn({ url: m.url, was: m.node, now: node }, 'runner answers with another node name');
      this.byNode.delete(m.node);
      this.forgotten.set(m.node, before);
    }
    m.node = node;
    const holder = this.byNode.get(node);
    if (holder && holder !== m && holder.up) {
      if (m.duplicateOf !== holder.url)
        this.o.log.warn({ runner: node, url: m.url, other: holder.url }, 'two runner URLs answer with one node name');
      m.duplicateOf = holder.url;
      return;
    }
    m.duplicateOf = null;
    this.byNode.set(node, m);
    this.forgotten.delete(node);
  }
}
