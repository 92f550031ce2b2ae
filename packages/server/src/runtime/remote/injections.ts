/**
 * Secret injection events across the runner wire. The runner's local driver reports each
 * injection its egress proxy makes; the runner keeps them in an {@link InjectionQueue} and
 * API processes fetch them (`injections` calls, polled by {@link RemoteDriver.onInjection}).
 * Delivery: a `take` hands out a batch and holds it in flight; the next `take` with that
 * batch's id acknowledges it (gone for good). A batch not acknowledged within
 * {@link INFLIGHT_MS} (its taker died, its answer was lost) goes back to the head of the
 * queue. So with several API replicas each event reaches one of them, and is handed out
 * again only when no acknowledgement came: at least once, once in the normal course.
 */
import { randomUUID } from 'node:crypto';
import type { InjectionEvent } from '../driver.js';

/** Events a runner keeps waiting to be fetched; past it the oldest go (counted in `dropped`). */
export const MAX_QUEUED_INJECTIONS = 20_000;
/** Most events one take hands out. */
export const INJECTIONS_PER_TAKE = 500;
/** How long a batch handed out waits for its acknowledgement before it is handed out again. */
export const INFLIGHT_MS = 30_000;

export interface InjectionTake {
  /** Acknowledge with this id at the next take (absent: nothing handed out). */
  batch?: string;
  events: InjectionEvent[];
  /** Events dropped since the runner started because nobody fetched them in time. */
  dropped: number;
}

export class InjectionQueue {
  #queue: InjectionEvent[] = [];
  readonly #inflight = new Map<string, { events: InjectionEvent[]; until: number }>();
  #dropped = 0;

  constructor(private readonly now: () => number = Date.now) {}

  push(e: InjectionEvent): void {
    this.#queue.push(e);
    if (this.#queue.length > MAX_QUEUED_INJECTIONS) {
      const over = this.#queue.length - MAX_QUEUED_INJECTIONS;
      this.#queue.splice(0, over);
      this.#dropped += over;
    }
  }

  /** Acknowledges `ack` (a batch of an earlier take), then hands out the next batch. */
  take(ack?: string | null): InjectionTake {
    if (ack) this.#inflight.delete(ack);
    const now = this.now();
    const back: InjectionEvent[] = [];
    for (const [id, b] of this.#inflight) {
      if (b.until <= now) {
        this.#inflight.delete(id);
        back.push(...b.events);
      }
    }
    if (back.length) this.#queue = [...back.sort((a, b) => a.at - b.at), ...this.#queue];
    if (this.#queue.length === 0) return { events: [], dropped: this.#dropped };
    const events = this.#queue.splice(0, INJECTIONS_PER_TAKE);
    const batch = randomUUID();
    this.#inflight.set(batch, { events, until: now + INFLIGHT_MS });
    return { batch, events, dropped: this.#dropped };
  }
}
