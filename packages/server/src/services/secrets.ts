/**
 * Secrets that never enter a sandbox (docs/secrets.md): an account's named values, encrypted
 * at rest (services/secrets-crypto.ts), the injection rules of its sandboxes (checked here,
 * with their placeholders), the values handed to the driver's egress proxy (at create, on
 * `PATCH .../network`, and again on every sandbox whose rules name a secret when its value
 * changes or it goes), and the audit trail of the injections the proxy reports.
 *
 * A value is never returned, logged, or put in an error: only names, versions and ids are.
 */
import { randomBytes } from 'node:crypto';
import {
  type Egress,
  FORBIDDEN_SECRET_HEADERS,
  MAX_SECRETS_PER_ACCOUNT,
  parseEgressRule,
  ruleAllowsName,
  SandboxdError,
  SECRET_PLACEHOLDER_PATTERN,
  SECRET_TRUST_BUNDLE_ENV,
  SECRET_TRUST_CA_ENV,
  SECRET_VALUE_TOKEN,
  type Secret,
  type SecretCreate,
  type SecretPut,
  type SecretRule,
  type SecretInjection as WireInjection,
  secretEnvName,
  secretValueProblem,
  type ValidationProblem,
} from '@sandboxd/protocol';
import { keyedLock } from '../domain/keyed-lock.js';
import type { SandboxRecord, SandboxRecordState } from '../domain/sandbox.js';
import type { InjectionEvent, SecretInjection } from '../runtime/driver.js';
import type { InjectionRecord, SecretRecord } from '../store/store.js';
import type { ServiceDeps } from './context.js';
import { type SecretKeyring, SecretDecryptError } from './secrets-crypto.js';

/** The audit trail keeps 30 days, and at most this many rows an account. */
export const AUDIT_RETENTION_MS = 30 * 24 * 3600_000;
export const AUDIT_MAX_ROWS_PER_ACCOUNT = 100_000;
/** Audit rows are written in batches: at most this many at once, at least every `AUDIT_FLUSH_MS`. */
const AUDIT_BATCH = 200;
const AUDIT_FLUSH_MS = 1000;
/** Events held for writing at most; past it they are dropped (counted in a warning). */
const AUDIT_PENDING_MAX = 20_000;
const PRUNE_EVERY_MS = 3600_000;
/** Pushes that failed (a runner that did not answer) are tried again this often. */
const RETRY_EVERY_MS = 30_000;
const PAGE = 200;
/** States of a sandbox the driver holds (its rules matter). */
const HELD_STATES: SandboxRecordState[] = ['creating', 'started', 'starting', 'paused', 'stopped'];

const iso = (ms: number) => new Date(ms).toISOString();

export function toWireSecret(r: SecretRecord): Secret {
  return {
    name: r.name,
    description: r.description,
    version: r.version,
    createdAt: iso(r.createdAt),
    updatedAt: iso(r.updatedAt),
  };
}

function toWireInjection(r: InjectionRecord): WireInjection {
  return {
    id: r.id,
    sandboxId: r.sandboxId,
    secret: r.secret,
    destination: r.destination,
    method: r.method,
    status: r.status,
    ...(r.error !== null ? { error: r.error } : {}),
    at: iso(r.at),
  };
}

function encodeBefore(r: InjectionRecord): string {
  return Buffer.from(JSON.stringify([r.at, r.id])).toString('base64url');
}
function decodeBefore(c: string): { at: number; id: string } {
  try {
    const v = JSON.parse(Buffer.from(c, 'base64url').toString('utf8'));
    if (Array.isArray(v) && v.length === 2 && Number.isSafeInteger(v[0]) && typeof v[1] === 'string')
      return { at: v[0], id: v[1] };
  } catch {
    /* below */
  }
  throw new SandboxdError('validation', 'before: not a cursor this server gave', [
    { in: 'query', path: 'before', message: 'not a cursor this server gave' },
  ]);
}

function invalid(problems: ValidationProblem[]): SandboxdError {
  return new SandboxdError('validation', problems.map((p) => `${p.path}: ${p.message}`).join('; '), problems);
}

/** Names the API's paths take for something else: `GET /api/v1/secrets/injections` is the audit trail. */
const RESERVED_NAMES = new Set(['injections']);
function checkName(name: string, where: 'body' | 'params'): void {
  if (RESERVED_NAMES.has(name))
    throw invalid([{ in: where, path: '/name', message: `${name} is reserved (a path of the API)` }]);
}

/**
 * The variables of the CA trust (runtime/local/trust.ts): a secret of such a name would put
 * its placeholder there, and the sandbox would trust nothing.
 */
const TRUST_ENV_NAMES: readonly string[] = [...SECRET_TRUST_BUNDLE_ENV, SECRET_TRUST_CA_ENV];

/** What a placeholder looks like. */
export const PLACEHOLDER_RE = new RegExp(SECRET_PLACEHOLDER_PATTERN);

/** A new placeholder: worthless anywhere, unique enough never to appear by chance. */
export function newPlaceholder(): string {
  return `sbx-secret-${randomBytes(12).toString('hex')}`;
}

/** Whether egress `e` lets a sandbox reach the name (or, for `*.x`, every name) of rule `domain`. */
function egressAllows(
  e: Egress,
  domain: { kind: 'domain'; name: string } | { kind: 'wildcard'; suffix: string },
): boolean {
  if (e === 'internet') return true;
  if (e === 'none') return false;
  return e.allow.some((raw) => {
    const r = parseEgressRule(raw);
    if ('problem' in r || r.kind === 'cidr') return false;
    if (domain.kind === 'domain') return ruleAllowsName(r, domain.name);
    // A wildcard only by an equal or wider wildcard.
    return r.kind === 'wildcard' && (domain.suffix === r.suffix || domain.suffix.endsWith(`.${r.suffix}`));
  });
}

/** The meta key of a value every server of one database must decrypt: replicas share the keys. */
export const KEY_CHECK_META = 'secrets.keyCheck';
const KEY_CHECK = { account: '', name: 'sandboxd-key-check', value: 'sandboxd' };

/**
 * Whether `keyring` decrypts the database's secrets: the first server to start writes a value
 * under its key (meta {@link KEY_CHECK_META}); every later one must decrypt it. A server whose
 * keys differ would write secrets the others cannot read. Null when fine, else why not.
 */
export async function keyringProblem(
  store: Pick<ServiceDeps['store'], 'ensureMeta'>,
  keyring: SecretKeyring,
): Promise<string | null> {
  const held = await store.ensureMeta(
    KEY_CHECK_META,
    keyring.encrypt(KEY_CHECK.account, KEY_CHECK.name, KEY_CHECK.value),
  );
  try {
    return keyring.decrypt(KEY_CHECK.account, KEY_CHECK.name, held) === KEY_CHECK.value
      ? null
      : 'the check value differs';
  } catch (e) {
    return (e as Error).message;
  }
}

/**
 * The key-check value re-encrypted with the first key (rotation), when this keyring decrypts
 * it; with `force`, written anew whatever it held (the keys that made it are lost).
 */
export async function rewrapKeyCheck(
  store: Pick<ServiceDeps['store'], 'getMeta' | 'setMeta'>,
  keyring: SecretKeyring,
  o: { force?: boolean } = {},
): Promise<void> {
  const held = await store.getMeta(KEY_CHECK_META);
  if (held !== null && !o.force) keyring.decrypt(KEY_CHECK.account, KEY_CHECK.name, held);
  await store.setMeta(KEY_CHECK_META, keyring.encrypt(KEY_CHECK.account, KEY_CHECK.name, KEY_CHECK.value));
}

export interface SecretServiceDeps extends Pick<ServiceDeps, 'store' | 'driver' | 'clock' | 'log'> {
  /** The instance's keys; loaded at start-up (throws before). */
  keyring: () => SecretKeyring;
}

/** The secrets of accounts, their sandboxes' injection rules, and the audit trail. */
export class SecretService {
  /** One push to a sandbox's driver at a time, each with the freshest record and values. */
  private readonly pushLock = keyedLock();
  private pending: InjectionRecord[] = [];
  private dropped = 0;
  private flushing: Promise<void> | null = null;
  private readonly retry = new Set<string>();
  private readonly timers: NodeJS.Timeout[] = [];
  private unsubscribe: (() => void) | null = null;
  /** Sandbox id -> account id, for events (their sandboxes may be gone by the time they are written). */
  private readonly owners = new Map<string, string>();

  constructor(private readonly d: SecretServiceDeps) {}

  // ---- the account's secrets ----

  async create(accountId: string, req: SecretCreate): Promise<Secret> {
    checkName(req.name, 'body');
    this.checkValue(req.value, '/value');
    const now = this.d.clock.now();
    const rec: SecretRecord = {
      accountId,
      name: req.name,
      ciphertext: this.d.keyring().encrypt(accountId, req.name, req.value),
      description: req.description ?? '',
      version: 1,
      createdAt: now,
      updatedAt: now,
    };
    await this.d.store.createSecret(rec, MAX_SECRETS_PER_ACCOUNT);
    this.d.log.info({ accountId, secret: req.name }, 'secret created');
    // A secret deleted and made again: rules naming it inject again.
    await this.pushSecret(accountId, req.name);
    return toWireSecret(rec);
  }

  async list(accountId: string): Promise<Secret[]> {
    return (await this.d.store.listSecrets(accountId)).map(toWireSecret);
  }

  async get(accountId: string, name: string): Promise<Secret> {
    const r = await this.d.store.getSecret(accountId, name);
    if (!r) throw new SandboxdError('not_found', 'Secret not found');
    return toWireSecret(r);
  }

  /**
   * Creates (`created`) or changes the secret; a new value reaches every sandbox of the
   * account whose rules name it before this resolves.
   */
  async put(accountId: string, name: string, req: SecretPut): Promise<{ secret: Secret; created: boolean }> {
    checkName(name, 'params');
    if (req.value !== undefined) this.checkValue(req.value, '/value');
    const now = this.d.clock.now();
    const ciphertext = req.value !== undefined ? this.d.keyring().encrypt(accountId, name, req.value) : undefined;
    for (let attempt = 0; attempt < 3; attempt++) {
      const updated = await this.d.store.updateSecret(accountId, name, {
        ...(ciphertext !== undefined ? { ciphertext } : {}),
        ...(req.description !== undefined ? { description: req.description } : {}),
        updatedAt: now,
      });
      if (updated) {
        this.d.log.info({ accountId, secret: name, version: updated.version }, 'secret changed');
        if (ciphertext !== undefined) await this.pushSecret(accountId, name);
        return { secret: toWireSecret(updated), created: false };
      }
      if (req.value === undefined)
        throw new SandboxdError('validation', '/value: a secret is created with a value', [
          { in: 'body', path: '/value', message: 'a secret is created with a value' },
        ]);
      try {
        return {
          secret: await this.create(accountId, { name, value: req.value, description: req.description }),
          created: true,
        };
      } catch (e) {
        // Created by another request meanwhile: change it instead.
        if (!(e instanceof SandboxdError && e.kind === 'conflict')) throw e;
      }
    }
    throw new SandboxdError('conflict', `Secret ${name} changed concurrently; try again`, { name });
  }

  /** Removes the secret; every rule naming it injects nothing from then on (the rules stay). */
  async delete(accountId: string, name: string): Promise<void> {
    if (!(await this.d.store.deleteSecret(accountId, name))) throw new SandboxdError('not_found', 'Secret not found');
    this.d.log.info({ accountId, secret: name }, 'secret deleted');
    await this.pushSecret(accountId, name);
  }

  private checkValue(value: string, path: string): void {
    const p = secretValueProblem(value);
    // The problem text says what is wrong with a value, never what it is.
    if (p) throw invalid([{ in: 'body', path, message: p }]);
  }

  // ---- injection rules of sandboxes ----

  /**
   * Checks `rules` of a create or a network update (`base`: where they sit in the body, e.g.
   * `/network/secrets`) against the account's secrets, the sandbox's `egress` and `env` (the
   * caller's own, which may not hold a placeholder's name), and returns them canonical
   * (domains lowercased, `format` defaulted) with placeholders: `keep`'s (the sandbox's
   * present ones, by secret name) where the secret is still named, new ones otherwise. Each
   * secret must exist, unless `kept` (a PATCH that leaves the rules as they are).
   * Throws `validation` naming each problem by its path; `unsupported` when the runtime has
   * no injecting proxy.
   */
  async checkRules(
    accountId: string,
    rules: SecretRule[],
    o: {
      egress: Egress;
      base: string;
      env?: Record<string, string>;
      keep?: SecretRule[];
      /** The rules are the sandbox's own, kept: a secret deleted since is fine (its rule injects nothing). */
      kept?: boolean;
    },
  ): Promise<SecretRule[]> {
    if (!rules.length) return [];
    if (!this.d.driver.setSecrets)
      throw new SandboxdError(
        'unsupported',
        'This runtime has no injecting egress proxy: a sandbox cannot have secret rules',
      );
    const problems: ValidationProblem[] = [];
    const at = (p: string, message: string): void => {
      problems.push({ in: 'body', path: `${o.base}${p}`, message });
    };
    const known = new Set((await this.d.store.listSecrets(accountId)).map((s) => s.name));
    const placeholders = new Map<string, string>();
    for (const r of o.keep ?? []) if (r.placeholder) placeholders.set(r.secret, r.placeholder);
    const envNames = new Map<string, string>();
    const out: SecretRule[] = [];
    rules.forEach((r, i) => {
      if (!o.kept && !known.has(r.secret)) at(`/${i}/secret`, `no secret named ${r.secret} in this account`);
      const env = secretEnvName(r.secret);
      const other = envNames.get(env);
      if (other !== undefined && other !== r.secret)
        at(`/${i}/secret`, `secrets ${other} and ${r.secret} would both be environment variable ${env}`);
      envNames.set(env, r.secret);
      if (TRUST_ENV_NAMES.includes(env))
        at(
          `/${i}/secret`,
          `environment variable ${env} names the CA a sandbox with rules trusts: a secret's placeholder may not take it (choose another name)`,
        );
      if (o.env && Object.hasOwn(o.env, env))
        at(
          `/${i}/secret`,
          `environment variable ${env} holds the placeholder of secret ${r.secret}: the request's env may not set it`,
        );
      const domains: string[] = [];
      for (const [j, raw] of r.domains.entries()) {
        const d = parseEgressRule(raw);
        if ('problem' in d) {
          at(`/${i}/domains/${j}`, d.problem);
          continue;
        }
        if (d.kind === 'cidr') {
          at(`/${i}/domains/${j}`, 'a rule names domains (api.example.com, *.example.com), not addresses');
          continue;
        }
        const text = d.kind === 'domain' ? d.name : `*.${d.suffix}`;
        if (!egressAllows(o.egress, d)) {
          at(
            `/${i}/domains/${j}`,
            o.egress === 'none'
              ? `${text}: the sandbox's egress is "none"`
              : `${text} is not allowed by the sandbox's egress rules${d.kind === 'wildcard' ? ' (a wildcard needs an equal or wider wildcard rule)' : ''}`,
          );
          continue;
        }
        if (!domains.includes(text)) domains.push(text);
      }
      if (r.header !== undefined && (FORBIDDEN_SECRET_HEADERS as readonly string[]).includes(r.header.toLowerCase()))
        at(`/${i}/header`, `header ${r.header} is the proxy's own; a rule may not set it`);
      if (r.format !== undefined) {
        if (r.header === undefined) at(`/${i}/format`, 'format says what a header is set to: it needs header');
        if (!r.format.includes(SECRET_VALUE_TOKEN)) at(`/${i}/format`, `format must contain ${SECRET_VALUE_TOKEN}`);
        if (/[^\x20-\x7e]/.test(r.format)) at(`/${i}/format`, 'format is printable ASCII only');
      }
      let placeholder = placeholders.get(r.secret);
      if (!placeholder) {
        placeholder = newPlaceholder();
        placeholders.set(r.secret, placeholder);
      }
      out.push({
        secret: r.secret,
        domains,
        ...(r.header !== undefined ? { header: r.header, format: r.format ?? SECRET_VALUE_TOKEN } : {}),
        placeholder,
      });
    });
    if (problems.length) throw invalid(problems);
    return out;
  }

  /** The environment variables of `rules`: each secret's name (`-` as `_`) holding its placeholder. */
  static envOf(rules: SecretRule[] | undefined): Record<string, string> {
    const env: Record<string, string> = {};
    for (const r of rules ?? []) if (r.placeholder) env[secretEnvName(r.secret)] = r.placeholder;
    return env;
  }

  /**
   * The driver's form of `rules` with the values of the account's secrets now (a rule of a
   * secret that is gone, or does not decrypt, without value), and the versions used.
   */
  async resolve(
    accountId: string,
    rules: SecretRule[] | undefined,
  ): Promise<{ secrets: SecretInjection[]; versions: Map<string, number> }> {
    const versions = new Map<string, number>();
    const values = new Map<string, string | undefined>();
    for (const name of new Set((rules ?? []).map((r) => r.secret))) {
      const rec = await this.d.store.getSecret(accountId, name);
      versions.set(name, rec?.version ?? 0);
      if (!rec) continue;
      try {
        values.set(name, this.d.keyring().decrypt(accountId, name, rec.ciphertext));
      } catch (e) {
        if (!(e instanceof SecretDecryptError)) throw e;
        this.d.log.error(
          { accountId, secret: name, why: e.message },
          'a secret does not decrypt: its rules inject nothing',
        );
      }
    }
    const secrets = (rules ?? []).map((r) => {
      const value = values.get(r.secret);
      return {
        secret: r.secret,
        domains: r.domains.map((d) => d.toLowerCase()),
        ...(r.header !== undefined ? { header: r.header } : {}),
        format: r.format ?? SECRET_VALUE_TOKEN,
        placeholder: r.placeholder ?? '',
        ...(value !== undefined ? { value } : {}),
      };
    });
    return { secrets, versions };
  }

  /** Remembers whose sandbox `id` is (its injection events are written to that account). */
  noteOwner(sandboxId: string, accountId: string): void {
    if (this.owners.size >= 100_000) this.owners.clear();
    this.owners.set(sandboxId, accountId);
  }

  /**
   * Hands the driver the rules of sandbox `id` (as its record holds them now) with the values
   * now. A sandbox that is gone is fine; a runtime failure is tried again later and rethrown
   * when `throwOnFailure`.
   */
  async pushSandbox(id: string, o: { throwOnFailure?: boolean } = {}): Promise<void> {
    const setSecrets = this.d.driver.setSecrets?.bind(this.d.driver);
    if (!setSecrets) return;
    await this.pushLock(id, async () => {
      const r = await this.d.store.getSandbox(id);
      if (!r || !HELD_STATES.includes(r.state)) {
        this.retry.delete(id);
        return;
      }
      this.noteOwner(id, r.accountId);
      const { secrets } = await this.resolve(r.accountId, r.network?.secrets);
      try {
        await setSecrets(id, secrets);
        this.retry.delete(id);
      } catch (e) {
        if (e instanceof SandboxdError && e.kind === 'not_found') {
          this.retry.delete(id);
          return;
        }
        this.retry.add(id);
        this.d.log.warn(
          { sandboxId: id, err: e instanceof Error ? e.message : String(e) },
          'pushing secret rules failed; tried again later',
        );
        if (o.throwOnFailure) throw e;
      }
    });
  }

  /** Pushes to every sandbox of the account whose rules name secret `name`. */
  async pushSecret(accountId: string, name: string): Promise<void> {
    if (!this.d.driver.setSecrets) return;
    const ids: string[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 10_000; page++) {
      const p = await this.d.store.listSandboxes(accountId, { states: HELD_STATES, limit: PAGE, cursor });
      for (const r of p.items) if (r.network?.secrets?.some((x) => x.secret === name)) ids.push(r.id);
      if (!p.nextCursor) break;
      cursor = p.nextCursor;
    }
    await Promise.all(ids.map((id) => this.pushSandbox(id)));
  }

  /** A sandbox created with rules: pushes again if a value changed between its resolve and now. */
  async afterCreate(r: SandboxRecord, versions: Map<string, number>): Promise<void> {
    for (const [name, v] of versions) {
      const now = (await this.d.store.getSecret(r.accountId, name))?.version ?? 0;
      if (now !== v) return this.pushSandbox(r.id);
    }
  }

  // ---- the audit trail ----

  /** A page of the account's injections, newest first. */
  async listInjections(
    accountId: string,
    q: { sandboxId?: string; secret?: string; limit?: number; before?: string },
  ): Promise<{ injections: WireInjection[]; next?: string }> {
    await this.flush();
    const limit = q.limit ?? 100;
    const rows = await this.d.store.listInjections(accountId, {
      ...(q.sandboxId !== undefined ? { sandboxId: q.sandboxId } : {}),
      ...(q.secret !== undefined ? { secret: q.secret } : {}),
      limit: limit + 1,
      ...(q.before !== undefined ? { before: decodeBefore(q.before) } : {}),
    });
    const page = rows.slice(0, limit);
    const last = page.at(-1);
    return {
      injections: page.map(toWireInjection),
      ...(rows.length > limit && last ? { next: encodeBefore(last) } : {}),
    };
  }

  /** One event of the driver: held, then written in a batch. */
  async record(e: InjectionEvent): Promise<void> {
    let accountId = this.owners.get(e.sandboxId);
    if (accountId === undefined) {
      accountId = (await this.d.store.getSandbox(e.sandboxId))?.accountId;
      if (accountId === undefined) {
        this.d.log.debug({ sandboxId: e.sandboxId }, 'an injection event of an unknown sandbox: not recorded');
        return;
      }
      this.owners.set(e.sandboxId, accountId);
    }
    if (this.pending.length >= AUDIT_PENDING_MAX) {
      this.dropped++;
      return;
    }
    this.pending.push({
      id: `inj_${randomBytes(10).toString('hex')}`,
      accountId,
      sandboxId: e.sandboxId,
      secret: e.secret,
      destination: e.destination.slice(0, 300),
      method: e.method.slice(0, 32),
      status: e.status,
      error: e.error === undefined ? null : e.error.slice(0, 500),
      at: e.at,
    });
    if (this.pending.length >= AUDIT_BATCH) void this.flush();
  }

  /** Writes what is held (one batch after another); resolves once written. */
  async flush(): Promise<void> {
    for (let i = 0; i < 1000 && (this.pending.length || this.flushing); i++) {
      if (this.flushing) {
        await this.flushing;
        continue;
      }
      const batch = this.pending.splice(0, AUDIT_BATCH);
      this.flushing = this.d.store.addInjections(batch).then(
        () => undefined,
        (err) => this.d.log.warn({ err, rows: batch.length }, 'writing injection audit rows failed; they are lost'),
      );
      await this.flushing;
      this.flushing = null;
    }
    if (this.dropped) {
      this.d.log.warn({ dropped: this.dropped }, 'injection audit events dropped: too many waiting to be written');
      this.dropped = 0;
    }
  }

  /** Removes audit rows older than 30 days and past the 100,000 newest of each account. */
  async prune(): Promise<number> {
    const n = await this.d.store.pruneInjections(this.d.clock.now() - AUDIT_RETENTION_MS, AUDIT_MAX_ROWS_PER_ACCOUNT);
    if (n) this.d.log.info({ removed: n }, 'old injection audit rows removed');
    return n;
  }

  /**
   * Listens to the driver's injection events (if {@link listen} did not yet) and starts the
   * timers (flush, prune, retries of failed pushes), pruning once now.
   */
  async start(): Promise<void> {
    this.listen();
    const every = (ms: number, fn: () => Promise<unknown>) => {
      const t = setInterval(
        () => void fn().catch((err) => this.d.log.warn({ err }, 'secrets: a periodic task failed')),
        ms,
      );
      t.unref();
      this.timers.push(t);
    };
    every(AUDIT_FLUSH_MS, () => this.flush());
    every(PRUNE_EVERY_MS, () => this.prune());
    every(RETRY_EVERY_MS, () => Promise.all([...this.retry].map((id) => this.pushSandbox(id))));
    await this.prune().catch((err) => this.d.log.warn({ err }, 'pruning the injection audit failed'));
  }

  /** Listens to the driver's injection events (before the driver starts: none is missed); idempotent. */
  listen(): void {
    this.unsubscribe ??= this.d.driver.onInjection?.((e) => void this.record(e)) ?? null;
  }

  /** Pushes the rules of every held sandbox that has some (start-up); failures are retried later. */
  async resync(): Promise<number> {
    if (!this.d.driver.setSecrets) return 0;
    const all = await this.d.store.listSandboxesByState(HELD_STATES.filter((s) => s !== 'creating'));
    const ids = all.filter((r) => r.network?.secrets?.length).map((r) => r.id);
    for (const id of ids) await this.pushSandbox(id);
    return ids.length;
  }

  /** Stops listening and writes what is held. */
  async close(): Promise<void> {
    this.unsubscribe?.();
    this.unsubscribe = null;
    for (const t of this.timers.splice(0)) clearInterval(t);
    await this.flush();
  }

  /** Forgets a sandbox that is gone. */
  forget(sandboxId: string): void {
    this.retry.delete(sandboxId);
  }
}
