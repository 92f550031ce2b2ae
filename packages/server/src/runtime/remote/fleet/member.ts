import { SandboxdError } from '@sandboxd/protocol';
import type { IsolationSupport, RuntimeDriver } from '../../driver.js';
import type { RunnerHealth } from '../wire.js';
import type { Candidate } from './placement.js';

/** What the fleet needs of one runner: a driver and its health. {@link RemoteDriver} is one. */
export interface RunnerDriver extends RuntimeDriver {
  /** The runner's name, capacity, warm pool and sandbox count; rejects `unavailable` when it does not answer in `timeoutMs`. */
  health(timeoutMs?: number): Promise<RunnerHealth>;
}

/**
 * The isolation tiers runner `m` offers by its last health answer: containers only when it
 * never answered or reports none (a runner from before tiers).
 */
export function tiersOf(m: Pick<RunnerMember, 'health'>): IsolationSupport[] {
  return m.health?.isolations ?? [{ isolation: 'container', runtime: 'crun', memorySnapshots: false }];
}

/** How often the image list of a runner is asked again (for placement's "image cached" preference), ms. */
const IMAGES_EVERY_MS = 30_000;

/**
 * One runner as an API process sees it: its driver, what its last health answer said, and
 * whether it answers. It is `up` once it answered a health check and until a check or a call
 * fails for lack of an answer (`unavailable`); `lastOkAt` is when it last answered. Creates
 * placed on it since its last report count toward its load, so that a burst of creates
 * spreads over runners before the next report.
 */
export class RunnerMember {
  /** Its node name, from its health answers (null until the first). */
  node: string | null = null;
  /** Its last health answer. */
  health: RunnerHealth | null = null;
  /** Answered the last health check and no call failed `unavailable` since. */
  ok = false;
  /** Why it is not up (the last failure's words), or '' while up. */
  reason = 'not asked yet';
  /** When it last answered (the fleet's clock); when it joined until it answers. */
  lastOkAt: number;
  /** Its URL left the runner list (or the Service's endpoints): it only stands for its node's past. */
  removed = false;
  /** Another member answers for the same node name: this one is not used. */
  duplicateOf: string | null = null;
  /** Refs of its image cache, as last asked (placement prefers a runner that has the image). */
  images = new Set<string>();
  private imagesAt = Number.NEGATIVE_INFINITY;
  private imagesJob: Promise<void> | null = null;
  private inflight = 0;
  /** Creates finished here, counted; a report asked after the n-th counts the first n. */
  private done = 0;
  private doneCounted = 0;

  constructor(
    readonly url: string,
    readonly driver: RunnerDriver,
    joinedAt: number,
  ) {
    this.lastOkAt = joinedAt;
  }

  /** Placements may go here and calls are made: it answers, has a name, is in the list and is not a duplicate. */
  get up(): boolean {
    return this.ok && !this.removed && this.node !== null && this.duplicateOf === null;
  }

  /**
   * Asks its health (`timeoutMs`); resolves with the answer or rejects with the failure,
   * having recorded either. The caller decides what a change of node name means.
   */
  async check(now: () => number, timeoutMs: number): Promise<RunnerHealth> {
    const counted = this.done;
    try {
      const h = await this.driver.health(timeoutMs);
      this.health = h;
      this.ok = true;
      this.reason = '';
      this.lastOkAt = now();
      this.doneCounted = Math.max(this.doneCounted, counted);
      return h;
    } catch (e) {
      this.fail(e);
      throw e;
    }
  }

  /** Records a failure to answer (a health check, or a call that failed `unavailable`). */
  fail(e: unknown): void {
    this.ok = false;
    this.reason = e instanceof Error ? e.message : String(e);
  }

  /**
   * Asks its image list again when the last is older than {@link IMAGES_EVERY_MS} (joins an
   * asking in progress); errors are ignored (asked again next time).
   */
  refreshImages(now: number): Promise<void> {
    if (this.imagesJob) return this.imagesJob;
    if (now - this.imagesAt < IMAGES_EVERY_MS) return Promise.resolve();
    this.imagesAt = now;
    this.imagesJob = this.driver
      .listImages()
      .then(
        (list) => {
          this.images = new Set(list.map((i) => i.ref));
        },
        () => {
          this.imagesAt = Number.NEGATIVE_INFINITY;
        },
      )
      .finally(() => {
        this.imagesJob = null;
      });
    return this.imagesJob;
  }

  /** A create placed here begins; {@link placed} when it is over. */
  begin(): void {
    this.inflight++;
  }
  placed(image: string | null): void {
    this.inflight--;
    this.done++;
    if (image) this.images.add(image);
  }

  /** Creates placed here that its last health report does not count. */
  get pending(): number {
    return this.inflight + (this.done - this.doneCounted);
  }

  /** As a placement candidate for a create of `image`. */
  candidate(image: string): Candidate {
    return {
      node: this.node ?? this.url,
      load: (this.health?.sandboxes ?? 0) + this.pending,
      cached: this.images.has(image),
      capacity: this.health?.capacity ?? null,
      pending: this.pending,
    };
  }

  /** Why it is not up, in words. */
  get why(): string {
    if (this.removed) return 'it is no longer among the runners';
    if (this.duplicateOf) return `its node name is already used by ${this.duplicateOf}`;
    return `it is not answering (${this.reason})`;
  }

  /** The 503 `unavailable` of a call that needs this runner while it is not up; `what` says what lives there. */
  unavailable(what: string): SandboxdError {
    const name = this.node ?? this.url;
    return new SandboxdError('unavailable', `Runner ${name}, where ${what}, cannot be used: ${this.why}`, {
      runner: name,
    });
  }
}

/** True for the failures that mean "the runner did not answer" (not an answer of the runner). */
export function isUnreachable(e: unknown): boolean {
  return e instanceof SandboxdError && e.kind === 'unavailable';
}
