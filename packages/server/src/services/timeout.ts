import { SandboxdError } from '@sandboxd/protocol';
import { billedMinutes } from '../domain/billing.js';
import { runStart, wrongState } from '../domain/sandbox.js';
import type { AccountRecord } from '../store/store.js';
import { planOf, type ServiceDeps } from './context.js';

import type { SandboxService } from './sandboxes.js';

/**
 * `PATCH .../timeout`: sets `stopAt = now + timeoutMs` and settles the ledger in whole
 * minutes from creation (extension debits, reduction refunds). Throws `not_found`,
 * `conflict` (not started), `validation` (past the plan's lifetime; the message names the
 * largest timeoutMs allowed now), `tokens`. `timeoutMs: 0` stops at once.
 */
export class TimeoutService {
  constructor(
    private readonly d: Pick<ServiceDeps, 'store' | 'clock' | 'config' | 'log'>,
    private readonly sandboxes: Pick<SandboxService, 'get' | 'stop'>,
  ) {}

  async set(account: AccountRecord, req: { id: string; timeoutMs: number }): Promise<{ id: string; stopAt: number }> {
    const { id, timeoutMs } = req;
    const r = await this.sandboxes.get(account.id, id);
    if (r.state !== 'started') throw wrongState(r);
    const plan = planOf(this.d.config, account.plan);
    const now = this.d.clock.now();
    const stopAt = now + timeoutMs;
    const from = runStart(r);
    if (stopAt - from > plan.maxLifetimeMs) {
      const max = Math.max(0, plan.maxLifetimeMs - (now - from));
      const message = `timeoutMs must be at most ${max} now: plan ${account.plan} allows ${plan.maxLifetimeMs} ms from creation (or the last start or resume)`;
      throw new SandboxdError('validation', message, [{ in: 'body', path: '/timeoutMs', message, max }]);
    }
    const minutes = billedMinutes(stopAt - from);
    const delta = r.reservedMinutes - minutes;
    const next = await this.d.store.updateSandbox(r.id, {
      stopAt,
      ledgerDelta: delta,
      ledgerReason: delta < 0 ? 'sandbox.extend' : 'sandbox.reduce',
      expectStates: ['started'],
      at: now,
    });
    this.d.log.info(
      { sandboxId: r.id, stopAt: new Date(stopAt).toISOString(), ledgerDelta: delta },
      'sandbox timeout set',
    );
    if (stopAt <= now) await this.sandboxes.stop(next, { reason: 'timeout' });
    return { id: r.id, stopAt };
  }

  /**
   * Makes `stopAt` at least `now + timeoutMs` and never earlier than it is (E2B's connect
   * and refresh): a later `stopAt` is kept as is, at no cost; an earlier one is moved by
   * {@link set}, with its rules and errors. With `clamp` (a lifetime the caller did not ask
   * for, such as a default) the wish is cut to what the plan still allows instead of refused.
   */
  async extend(
    account: AccountRecord,
    req: { id: string; timeoutMs: number; clamp?: boolean },
  ): Promise<{ id: string; stopAt: number }> {
    const r = await this.sandboxes.get(account.id, req.id);
    if (r.state !== 'started') throw wrongState(r);
    const now = this.d.clock.now();
    let timeoutMs = req.timeoutMs;
    if (req.clamp) {
      const plan = planOf(this.d.config, account.plan);
      timeoutMs = Math.min(timeoutMs, Math.max(0, plan.maxLifetimeMs - (now - runStart(r))));
    }
    if (now + timeoutMs <= r.stopAt) return { id: r.id, stopAt: r.stopAt };
    return this.set(account, { id: r.id, timeoutMs });
  }
}
