import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import type { BuildState } from '@sandboxd/protocol';
import type { LedgerReason } from '../../domain/billing.js';
import type { SandboxRecord, SandboxRecordState } from '../../domain/sandbox.js';
import type {
  AccountRecord,
  ApiKeyRecord,
  BuildLogCap,
  BuildLogLine,
  BuildUpdate,
  EventRecord,
  LayerRecord,
  LeaseState,
  LedgerRow,
  PageRequest,
  Reservation,
  SandboxUpdate,
  SnapshotRecord,
  Store,
  StoredBuild,
  UploadRecord,
  VolumeRecord,
  InjectionQuery,
  InjectionRecord,
  SecretRecord,
  SecretUpdate,
} from '../store.js';
import { PgBuilds } from './builds.js';
import { PgAccounts } from './accounts.js';
import { migrate } from './migrations.js';
import * as sb from './sandboxes.js';
import type { PgDatabase } from './schema.js';
import { PgSecrets } from './secrets.js';
import { PgSnapshots } from './snapshots.js';
import { guardPool } from './unavailable.js';

const { Pool, types } = pg;

/** BIGINT (20) and NUMERIC (1700) as JS numbers: every one here is a time in ms, a count or a sum well below 2^53. */
const INT8 = 20;
const NUMERIC = 1700;
const pgTypes = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === INT8 || oid === NUMERIC
      ? (v: string) => Number(v)
      : types.getTypeParser(oid, format ?? 'text')) as typeof types.getTypeParser,
};

export interface PostgresStoreOptions {
  /** Connections of this process's pool (default 10). */
  poolSize?: number;
  /** An idle connection of the pool failed (the pool drops it and opens another when needed). */
  onPoolError?: (err: Error) => void;
}

/**
 * The PostgreSQL {@link Store} (`SANDBOXD_DATABASE_URL=postgres://...`): one pool per
 * process, shared by every replica through the database. Each decision runs in one
 * READ COMMITTED transaction under row locks: the account's row (`FOR NO KEY UPDATE`)
 * serializes an account's reservations, status changes with debits or limits, snapshot
 * quota and volume deletes; a transaction advisory lock serializes the host-wide
 * `maxSandboxes` checks (taken first, so locks are always taken in one order). Counters
 * and login links are single atomic statements. See docs/postgres.md.
 */
export class PostgresStore implements Store {
  private readonly a: PgAccounts;
  private readonly snaps: PgSnapshots;
  private readonly b: PgBuilds;
  private readonly sec: PgSecrets;
  private closed?: Promise<void>;

  private constructor(private readonly db: Kysely<PgDatabase>) {
    this.a = new PgAccounts(db);
    this.snaps = new PgSnapshots(db);
    this.b = new PgBuilds(db);
    this.sec = new PgSecrets(db);
  }

  /** Connects to `url`, applies pending migrations (once, whichever process comes first) and returns the store. */
  static async open(url: string, opts: PostgresStoreOptions = {}): Promise<PostgresStore> {
    // A database that cannot be reached answers 503 `unavailable`, not 500 (unavailable.ts).
    const pool = guardPool(new Pool({ connectionString: url, max: opts.poolSize ?? 10, types: pgTypes }), (err) =>
      opts.onPoolError?.(err),
    );
    pool.on('error', (err) => opts.onPoolError?.(err));
    const db = new Kysely<PgDatabase>({ dialect: new PostgresDialect({ pool }) });
    try {
      await migrate(db, undefined, { where: describeDatabase(url) });
    } catch (e) {
      await db.destroy();
      throw e;
    }
    return new PostgresStore(db);
  }

  // accounts
  async createAccount(a: AccountRecord, grant: { tokens: number; reason: LedgerReason }) {
    await this.a.createAccount(a, grant);
  }
  async getAccount(id: string) {
    return this.a.getAccount(id);
  }
  async getAccountByEmail(email: string) {
    return this.a.getAccountByEmail(email);
  }
  async listAccounts() {
    return this.a.listAccounts();
  }
  async countAccounts() {
    return this.a.countAccounts();
  }
  async setAccountPlan(id: string, plan: string) {
    await this.a.setAccountPlan(id, plan);
  }

  // sessions and login links
  async createSession(s: { tokenHash: string; accountId: string; createdAt: number; expiresAt: number }) {
    await this.a.createSession(s);
  }
  async getSession(tokenHash: string, now: number) {
    return this.a.getSession(tokenHash, now);
  }
  async deleteSession(tokenHash: string) {
    await this.a.deleteSession(tokenHash);
  }
  async createLoginLink(l: { tokenHash: string; accountId: string; expiresAt: number }) {
    await this.a.createLoginLink(l);
  }
  async consumeLoginLink(tokenHash: string, now: number) {
    return this.a.consumeLoginLink(tokenHash, now);
  }

  // api keys
  async createApiKey(k: ApiKeyRecord) {
    await this.a.createApiKey(k);
  }
  async listApiKeys(accountId: string) {
    return this.a.listApiKeys(accountId);
  }
  async findApiKeyByHash(keyHash: string) {
    return this.a.findApiKeyByHash(keyHash);
  }
  async touchApiKey(id: string, at: number) {
    await this.a.touchApiKey(id, at);
  }
  async deleteApiKey(accountId: string, id: string) {
    return this.a.deleteApiKey(accountId, id);
  }

  // ledger
  async addLedger(row: Omit<LedgerRow, 'id'>) {
    return this.a.addLedger(row);
  }
  async balance(accountId: string) {
    return this.a.balance(accountId);
  }
  async listLedger(accountId: string, page: PageRequest) {
    return this.a.listLedger(accountId, page);
  }

  // sandboxes
  async reserveSandbox(record: SandboxRecord, r: Reservation) {
    return sb.reserve(this.db, record, r);
  }
  async getSandbox(id: string) {
    return sb.get(this.db, id);
  }
  async listSandboxes(
    accountId: string,
    q: PageRequest & { states: SandboxRecordState[]; metadata?: Record<string, string> },
  ) {
    return sb.list(this.db, accountId, q);
  }
  async listSandboxesByState(states: SandboxRecordState[]) {
    if (states.length === 0) return [];
    return (await this.db.selectFrom('sandboxes').selectAll().where('state', 'in', states).execute()).map(sb.toSandbox);
  }
  async listExpired(now: number) {
    return (
      await this.db
        .selectFrom('sandboxes')
        .selectAll()
        .where('state', '=', 'started')
        .where('stop_at', '<=', now)
        .orderBy('stop_at')
        .execute()
    ).map(sb.toSandbox);
  }
  async updateSandbox(id: string, u: SandboxUpdate) {
    return sb.update(this.db, id, u);
  }
  async placeSandbox(id: string, runner: string) {
    await sb.place(this.db, id, runner);
  }
  async deleteSandbox(id: string) {
    await this.db.deleteFrom('sandboxes').where('id', '=', id).execute();
  }
  async listEnded(cutoff: number, limit: number) {
    return (
      await this.db
        .selectFrom('sandboxes')
        .selectAll()
        .where('state', 'in', ['stopped', 'error'])
        .where('ended_at', 'is not', null)
        .where('ended_at', '<', cutoff)
        .orderBy('ended_at')
        .limit(limit)
        .execute()
    ).map(sb.toSandbox);
  }
  async listPausedExpired(now: number) {
    return (
      await this.db
        .selectFrom('sandboxes')
        .selectAll()
        .where('state', '=', 'paused')
        .where('expires_at', 'is not', null)
        .where('expires_at', '<=', now)
        .execute()
    ).map(sb.toSandbox);
  }
  async countByState() {
    const out: Record<SandboxRecordState, number> = {
      creating: 0,
      started: 0,
      paused: 0,
      stopped: 0,
      starting: 0,
      error: 0,
    };
    const rows = await this.db
      .selectFrom('sandboxes')
      .select(['state', (e) => e.fn.countAll<number>().as('n')])
      .groupBy('state')
      .execute();
    for (const r of rows) out[r.state as SandboxRecordState] = r.n;
    return out;
  }
  async countLive(accountId: string) {
    return sb.countLive(this.db, accountId);
  }
  async countPaused(accountId: string) {
    return sb.countPaused(this.db, accountId);
  }
  async countAllLive() {
    return sb.countAllLive(this.db);
  }

  // snapshots
  async beginSnapshot(s: SnapshotRecord, quotaBytes: number) {
    await this.snaps.begin(s, quotaBytes);
  }
  async finishSnapshot(accountId: string, name: string, sizeBytes: number, quotaBytes: number) {
    return this.snaps.finish(accountId, name, sizeBytes, quotaBytes);
  }
  async getSnapshot(accountId: string, name: string) {
    return this.snaps.get(this.db, accountId, name);
  }
  async listSnapshots(accountId: string) {
    return this.snaps.list(accountId);
  }
  async listAllSnapshots() {
    return this.snaps.listAll();
  }
  async deleteSnapshot(accountId: string, name: string) {
    return this.snaps.delete(accountId, name);
  }
  async snapshotBytes(accountId: string) {
    return this.snaps.bytes(this.db, accountId);
  }

  // builds
  async createBuild(b: StoredBuild) {
    await this.b.create(b);
  }
  async getBuild(id: string) {
    return this.b.get(this.db, id);
  }
  async listBuilds(accountId: string, q: { name?: string; limit: number }) {
    return this.b.list(accountId, q);
  }
  async listBuildsByState(states: BuildState[]) {
    return this.b.listByState(states);
  }
  async countBuilds(accountId: string, states: BuildState[]) {
    return this.b.count(accountId, states);
  }
  async updateBuild(id: string, u: BuildUpdate) {
    return this.b.update(id, u);
  }
  async deleteBuild(id: string) {
    return this.b.delete(id);
  }
  async appendBuildLogs(id: string, lines: Array<Omit<BuildLogLine, 'seq'>>, cap: BuildLogCap) {
    return this.b.appendLogs(id, lines, cap);
  }
  async listBuildLogs(id: string, from: number, limit: number) {
    return this.b.listLogs(id, from, limit);
  }
  async getLayer(accountId: string, key: string) {
    return this.b.getLayer(accountId, key);
  }
  async putLayer(l: LayerRecord) {
    await this.b.putLayer(l);
  }
  async touchLayer(accountId: string, key: string, at: number) {
    await this.b.touchLayer(accountId, key, at);
  }
  async deleteLayer(accountId: string, key: string) {
    return this.b.deleteLayer(accountId, key);
  }
  async listLayers(accountId: string) {
    return this.b.listLayers(accountId);
  }
  async listLayerAccounts() {
    return this.b.layerAccounts();
  }
  async layerBytes(accountId: string) {
    return this.b.layerBytes(accountId);
  }
  async getTemplate(accountId: string, name: string, tag: string) {
    return this.b.getTemplate(accountId, name, tag);
  }
  async listTemplates(accountId: string, q?: { name?: string }) {
    return this.b.listTemplates(accountId, q);
  }
  async deleteTemplates(accountId: string, name: string, tag?: string) {
    return this.b.deleteTemplates(accountId, name, tag);
  }
  async putUpload(u: UploadRecord) {
    await this.b.putUpload(u);
  }
  async getUpload(accountId: string, hash: string) {
    return this.b.getUpload(accountId, hash);
  }
  async deleteUpload(accountId: string, hash: string) {
    return this.b.deleteUpload(accountId, hash);
  }
  async listUploads(accountId: string) {
    return this.b.listUploads(accountId);
  }

  // volumes
  async listVolumes(accountId: string) {
    return sb.listVolumes(this.db, accountId);
  }
  async getVolume(accountId: string, name: string) {
    return sb.getVolume(this.db, accountId, name);
  }
  async createVolume(v: VolumeRecord) {
    await sb.createVolume(this.db, v);
  }
  async deleteVolume(accountId: string, name: string) {
    return sb.deleteVolume(this.db, accountId, name);
  }

  // secrets
  async createSecret(s: SecretRecord, maxPerAccount: number) {
    await this.sec.create(s, maxPerAccount);
  }
  async getSecret(accountId: string, name: string) {
    return this.sec.get(this.db, accountId, name);
  }
  async listSecrets(accountId: string) {
    return this.sec.list(accountId);
  }
  async listAllSecrets() {
    return this.sec.listAll();
  }
  async updateSecret(accountId: string, name: string, u: SecretUpdate) {
    return this.sec.update(accountId, name, u);
  }
  async rewrapSecret(accountId: string, name: string, expected: string, ciphertext: string) {
    return this.sec.rewrap(accountId, name, expected, ciphertext);
  }
  async deleteSecret(accountId: string, name: string) {
    return this.sec.delete(accountId, name);
  }
  async addInjections(rows: InjectionRecord[]) {
    await this.sec.addInjections(rows);
  }
  async listInjections(accountId: string, q: InjectionQuery) {
    return this.sec.listInjections(accountId, q);
  }
  async pruneInjections(cutoff: number, maxPerAccount: number) {
    return this.sec.prune(cutoff, maxPerAccount);
  }

  // events
  async addEvent(e: EventRecord) {
    await this.db
      .insertInto('events')
      .values({
        account_id: e.accountId,
        event: e.event,
        metadata_json: JSON.stringify(e.metadata),
        created_at: e.createdAt,
      })
      .execute();
  }
  async listEvents(accountId: string, limit: number): Promise<EventRecord[]> {
    const rows = await this.db
      .selectFrom('events')
      .select(['id', 'event', 'metadata_json', 'created_at'])
      .where('account_id', '=', accountId)
      .orderBy('id', 'desc')
      .limit(limit)
      .execute();
    return rows.reverse().map((r) => ({
      accountId,
      event: r.event,
      metadata: r.metadata_json as Record<string, unknown>,
      createdAt: r.created_at,
    }));
  }

  // rate-limit counters
  /** One statement: the row is new, restarted (its window ended) or counted up, atomically across replicas. */
  async hitCounter(key: string, windowMs: number, now: number) {
    const r = await sql<{ count: number; reset_at: number }>`
      INSERT INTO rate_counters AS c (key, count, reset_at) VALUES (${key}, 1, ${now}::bigint + ${windowMs}::bigint)
      ON CONFLICT (key) DO UPDATE SET
        count = CASE WHEN c.reset_at <= ${now}::bigint THEN 1 ELSE c.count + 1 END,
        reset_at = CASE WHEN c.reset_at <= ${now}::bigint THEN ${now}::bigint + ${windowMs}::bigint ELSE c.reset_at END
      RETURNING count, reset_at`.execute(this.db);
    const row = r.rows[0];
    return { count: row.count, resetAt: row.reset_at };
  }
  async readCounter(key: string, now: number) {
    const r = await this.db
      .selectFrom('rate_counters')
      .select(['count', 'reset_at'])
      .where('key', '=', key)
      .where('reset_at', '>', now)
      .executeTakeFirst();
    return r ? { count: r.count, resetAt: r.reset_at } : null;
  }
  /** One statement, so a release never races a hit into a wrong count. */
  async releaseCounter(key: string, resetAt: number) {
    await this.db
      .updateTable('rate_counters')
      .set((eb) => ({ count: eb('count', '-', 1) }))
      .where('key', '=', key)
      .where('reset_at', '=', resetAt)
      .where('count', '>', 0)
      .execute();
  }
  async deleteCounter(key: string) {
    await this.db.deleteFrom('rate_counters').where('key', '=', key).execute();
  }
  async purgeCounters(now: number) {
    const r = await this.db.deleteFrom('rate_counters').where('reset_at', '<=', now).executeTakeFirst();
    return Number(r.numDeletedRows);
  }

  // leases
  /**
   * One upsert takes the row (new, or expired) or renews it (same holder) and returns it, or
   * leaves it (another holder's, live) and returns nothing; then the row is read to say who
   * has it. The read may find it gone (released in between): the upsert runs again.
   */
  async acquireLease(name: string, holder: string, ttlMs: number, now: number): Promise<LeaseState> {
    for (let attempt = 0; ; attempt++) {
      const up = await sql<{ holder: string; expires_at: number }>`
        INSERT INTO leases AS l (name, holder, expires_at) VALUES (${name}, ${holder}, ${now}::bigint + ${ttlMs}::bigint)
        ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
          WHERE l.holder = excluded.holder OR l.expires_at <= ${now}::bigint
        RETURNING holder, expires_at`.execute(this.db);
      if (up.rows[0]) return { held: true, holder, expiresAt: up.rows[0].expires_at };
      const cur = await this.db
        .selectFrom('leases')
        .select(['holder', 'expires_at'])
        .where('name', '=', name)
        .executeTakeFirst();
      if (cur) return { held: cur.holder === holder, holder: cur.holder, expiresAt: cur.expires_at };
      if (attempt >= 2) return { held: false, holder: '', expiresAt: now };
    }
  }
  async releaseLease(name: string, holder: string) {
    const r = await this.db
      .deleteFrom('leases')
      .where('name', '=', name)
      .where('holder', '=', holder)
      .executeTakeFirst();
    return Number(r.numDeletedRows) > 0;
  }

  // meta
  async getMeta(key: string) {
    const r = await this.db.selectFrom('meta').select('value').where('key', '=', key).executeTakeFirst();
    return r ? r.value : null;
  }
  async setMeta(key: string, value: string) {
    await this.db
      .insertInto('meta')
      .values({ key, value })
      .onConflict((oc) => oc.column('key').doUpdateSet({ value }))
      .execute();
  }
  async ensureMeta(key: string, value: string) {
    // A racing insert of the same key waits for the first to commit, then does nothing.
    await this.db
      .insertInto('meta')
      .values({ key, value })
      .onConflict((oc) => oc.column('key').doNothing())
      .execute();
    const held = await this.getMeta(key);
    if (held === null) throw new Error(`meta ${key} vanished after it was ensured`);
    return held;
  }

  async ping(): Promise<void> {
    await sql`SELECT 1`.execute(this.db);
  }

  /** Ends the pool (waits for checked-out connections to be released); idempotent. */
  close(): Promise<void> {
    this.closed ??= this.db.destroy();
    return this.closed;
  }
}

/** `url` for messages: the PostgreSQL database at host/name, without user or password. */
function describeDatabase(url: string): string {
  try {
    const u = new URL(url);
    return `the PostgreSQL database ${u.host}${u.pathname}`;
  } catch {
    return 'the PostgreSQL database';
  }
}
