import { SandboxdError, type Account, type AccountSummary } from '@sandboxd/protocol';
import { newAccountId } from '../domain/ids.js';
import type { AccountRecord, LedgerRow, Page, PageRequest } from '../store/store.js';
import { planOf, type ServiceDeps } from './context.js';
import { hashPassword } from './passwords.js';
import { planIsolation } from '../config-plans.js';

/** Input of {@link AccountService.create}. */
export interface NewAccount {
  email: string;
  /** Null: the account cannot log in with a password (API key or login link only). */
  password: string | null;
  plan?: string;
  /** Initial grant; default the plan's `signupTokens`. */
  tokens?: number;
  admin?: boolean;
}

/** Accounts, plans and token grants. */
export class AccountService {
  constructor(private readonly d: Pick<ServiceDeps, 'store' | 'clock' | 'config' | 'log'>) {}

  /** Creates an account on `plan` (default from config) with its grant as a ledger row. `conflict` on a taken email. */
  async create(a: NewAccount): Promise<AccountRecord> {
    const plan = a.plan ?? this.d.config.defaultPlan;
    if (!this.d.config.plans[plan])
      throw new SandboxdError('validation', `Unknown plan ${plan}`, [
        { in: 'body', path: '/plan', message: 'is not a configured plan', allowed: Object.keys(this.d.config.plans) },
      ]);
    const rec: AccountRecord = {
      id: newAccountId(),
      email: a.email.trim(),
      passwordHash: a.password === null ? null : await hashPassword(a.password),
      plan,
      admin: a.admin ?? false,
      createdAt: this.d.clock.now(),
    };
    const tokens = a.tokens ?? this.d.config.plans[plan].signupTokens;
    await this.d.store.createAccount(rec, { tokens, reason: 'signup' });
    this.d.log.info({ accountId: rec.id, plan, admin: rec.admin }, 'account created');
    return rec;
  }

  /** Self-service sign-up; `not_found` when disabled in config. */
  async signup(email: string, password: string): Promise<AccountRecord> {
    if (!this.d.config.signupEnabled) throw new SandboxdError('not_found', 'Sign-up is disabled');
    return this.create({ email, password });
  }

  async get(id: string): Promise<AccountRecord> {
    const a = await this.d.store.getAccount(id);
    if (!a) throw new SandboxdError('not_found', 'Account not found');
    return a;
  }

  async list(): Promise<Array<AccountSummary & { balance: number }>> {
    const all = await this.d.store.listAccounts();
    return Promise.all(all.map(async (a) => ({ ...summary(a), balance: await this.d.store.balance(a.id) })));
  }

  /** Moves an account to another configured plan. */
  async setPlan(id: string, plan: string): Promise<AccountRecord> {
    if (!this.d.config.plans[plan])
      throw new SandboxdError('validation', `Unknown plan ${plan}`, [
        { in: 'body', path: '/plan', message: 'is not a configured plan', allowed: Object.keys(this.d.config.plans) },
      ]);
    await this.d.store.setAccountPlan(id, plan);
    return this.get(id);
  }

  /** Adds `tokens` (may be negative) to the ledger; returns the new balance. */
  async grant(id: string, tokens: number): Promise<number> {
    await this.get(id);
    await this.d.store.addLedger({
      accountId: id,
      delta: tokens,
      reason: 'admin.grant',
      sandboxId: null,
      createdAt: this.d.clock.now(),
    });
    return this.d.store.balance(id);
  }

  /** A page of the account's ledger, newest first. */
  ledger(accountId: string, page: PageRequest): Promise<Page<LedgerRow>> {
    return this.d.store.listLedger(accountId, page);
  }

  /** The `GET /api/v1/account` answer. */
  async describe(a: AccountRecord): Promise<Account> {
    const plan = planOf(this.d.config, a.plan);
    const tiers = planIsolation(plan, this.d.config.isolation);
    const [balance, started, paused, volumes, snapshotBytes] = await Promise.all([
      this.d.store.balance(a.id),
      this.d.store.countLive(a.id),
      this.d.store.countPaused(a.id),
      this.d.store.listVolumes(a.id),
      this.d.store.snapshotBytes(a.id),
    ]);
    return {
      ...summary(a),
      balance,
      limits: {
        maxLifetimeMs: plan.maxLifetimeMs,
        concurrency: plan.concurrency,
        ...plan.limits,
        maxPaused: plan.maxPaused,
        pausedRetentionMs: plan.pausedRetentionMs,
        snapshotBytes: plan.snapshotBytes,
        isolations: [...tiers.allowed],
        defaultIsolation: tiers.default,
      },
      usage: { startedSandboxes: started, pausedSandboxes: paused, volumes: volumes.length, snapshotBytes },
    };
  }
}

/** The public summary of an account (no secrets). */
export function summary(a: AccountRecord): AccountSummary {
  return { id: a.id, email: a.email, plan: a.plan, admin: a.admin, createdAt: new Date(a.createdAt).toISOString() };
}
