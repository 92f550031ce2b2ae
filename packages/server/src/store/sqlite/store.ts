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
  InjectionQuery,
  InjectionRecord,
  LayerRecord,
  LeaseState,
  LedgerRow,
  Page,
  PageRequest,
  Reservation,
  SandboxUpdate,
  SecretRecord,
  SecretUpdate,
  SnapshotRecord,
  Store,
  StoredBuild,
  UploadRecord,
  VolumeRecord,
} from '../store.js';
import { SqliteBuilds } from './builds.js';
import { SqliteAccounts } from './accounts.js';
import { openDatabase, type Db } from './open.js';
import { decodeCursor, encodeCursor, toLedger } from './rows.js';
import { SqliteSandboxes } from './sandboxes.js';
import { SqliteSecrets } from './secrets.js';
import { SqliteSnapshots } from './snapshots.js';

/** The SQLite {@link Store}: one file, WAL, synchronous=FULL. Single process only. */
export class SqliteStore implements Store {
  private readonly a: SqliteAccounts;
  private readonly s: SqliteSandboxes;
  private readonly snaps: SqliteSnapshots;
  private readonly b: SqliteBuilds;
  private readonly sec: SqliteSecrets;

  /** Opens `path` (`:memory:` for tests) and migrates it. */
  constructor(
    path: string,
    private readonly db: Db = openDatabase(path),
  ) {
    this.a = new SqliteAccounts(db);
    this.s = new SqliteSandboxes(db);
    this.snaps = new SqliteSnapshots(db);
    this.b = new SqliteBuilds(db);
    this.sec = new SqliteSecrets(db);
  }

  async createAccount(a: AccountRecord, grant: { tokens: number; reason: LedgerReason }) {
    this.a.createAccount(a, grant);
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
    this.a.setAccountPlan(id, plan);
  }
  async createSession(s: { tokenHash: string; accountId: string; createdAt: number; expiresAt: number }) {
    this.a.createSession(s);
  }
  async getSession(tokenHash: string, now: number) {
    return this.a.getSession(tokenHash, now);
  }
  async deleteSession(tokenHash: string) {
    this.a.deleteSession(tokenHash);
  }
  async createLoginLink(l: { tokenHash: string; accountId: string; expiresAt: number }) {
    this.a.createLoginLink(l);
  }
  async consumeLoginLink(tokenHash: string, now: number) {
    return this.a.consumeLoginLink(tokenHash, now);
  }
  async createApiKey(k: ApiKeyRecord) {
    this.a.createApiKey(k);
  }
  async listApiKeys(accountId: string) {
    return this.a.listApiKeys(accountId);
  }
  async findApiKeyByHash(keyHash: string) {
    return this.a.findApiKeyByHash(keyHash);
  }
  async touchApiKey(id: string, at: number) {
    this.a.touchApiKey(id, at);
  }
  async deleteApiKey(accountId: string, id: string) {
    return this.a.deleteApiKey(accountId, id);
  }

  async addLedger(row: Omit<LedgerRow, 'id'>): Promise<number> {
    const r = this.db
      .prepare('INSERT INTO ledger (account_id, delta, reason, sandbox_id, created_at) VALUES (?, ?, ?, ?, ?)')
      .run(row.accountId, row.delta, row.reason, row.sandboxId, row.createdAt);
    return Number(r.lastInsertRowid);
  }
  async balance(accountId: string) {
    return this.s.balance(accountId);
  }
  async listLedger(accountId: string, page: PageRequest): Promise<Page<LedgerRow>> {
    const before = page.cursor ? Number(decodeCursor(page.cursor)[0]) : Number.MAX_SAFE_INTEGER;
    const rows = this.db
      .prepare('SELECT * FROM ledger WHERE account_id = ? AND id < ? ORDER BY id DESC LIMIT ?')
      .all(accountId, before, page.limit + 1) as Parameters<typeof toLedger>[0][];
    const items = rows.slice(0, page.limit).map(toLedger);
    const last = items.at(-1);
    return rows.length > page.limit && last ? { items, nextCursor: encodeCursor([last.id, last.id]) } : { items };
  }

  async reserveSandbox(record: SandboxRecord, r: Reservation) {
    return this.s.reserve(record, r);
  }
  async getSandbox(id: string) {
    return this.s.get(id);
  }
  async listSandboxes(
    accountId: string,
    q: PageRequest & { states: SandboxRecordState[]; metadata?: Record<string, string> },
  ) {
    return this.s.list(accountId, q);
  }
  async listSandboxesByState(states: SandboxRecordState[]) {
    return this.s.listByState(states);
  }
  async listExpired(now: number) {
    return this.s.listExpired(now);
  }
  async updateSandbox(id: string, u: SandboxUpdate) {
    return this.s.update(id, u);
  }
  async placeSandbox(id: string, runner: string) {
    this.s.place(id, runner);
  }
  async deleteSandbox(id: string) {
    this.s.delete(id);
  }
  async countByState() {
    return this.s.countByState();
  }
  async countLive(accountId: string) {
    return this.s.countLive(accountId);
  }
  async countAllLive() {
    return this.s.countAllLive();
  }
  async countPaused(accountId: string) {
    return this.s.countPaused(accountId);
  }
  async listEnded(cutoff: number, limit: number) {
    return this.s.listEnded(cutoff, limit);
  }
  async listPausedExpired(now: number) {
    return this.s.listPausedExpired(now);
  }

  async beginSnapshot(s: SnapshotRecord, quotaBytes: number) {
    this.snaps.begin(s, quotaBytes);
  }
  async finishSnapshot(accountId: string, name: string, sizeBytes: number, quotaBytes: number) {
    return this.snaps.finish(accountId, name, sizeBytes, quotaBytes);
  }
  async getSnapshot(accountId: string, name: string) {
    return this.snaps.get(accountId, name);
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
    return this.snaps.bytes(accountId);
  }

  async createBuild(b: StoredBuild) {
    this.b.create(b);
  }
  async getBuild(id: string) {
    return this.b.get(id);
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
    this.b.putLayer(l);
  }
  async touchLayer(accountId: string, key: string, at: number) {
    this.b.touchLayer(accountId, key, at);
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
    this.b.putUpload(u);
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

  async listVolumes(accountId: string) {
    return this.s.listVolumes(accountId);
  }
  async getVolume(accountId: string, name: string) {
    return this.s.getVolume(accountId, name);
  }
  async createVolume(v: VolumeRecord) {
    this.s.createVolume(v);
  }
  async deleteVolume(accountId: string, name: string) {
    return this.s.deleteVolume(accountId, name);
  }

  async createSecret(s: SecretRecord, maxPerAccount: number) {
    this.sec.create(s, maxPerAccount);
  }
  async getSecret(accountId: string, name: string) {
    return this.sec.get(accountId, name);
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
    this.sec.addInjections(rows);
  }
  async listInjections(accountId: string, q: InjectionQuery) {
    return this.sec.listInjections(accountId, q);
  }
  async pruneInjections(cutoff: number, maxPerAccount: number) {
    return this.sec.prune(cutoff, maxPerAccount);
  }

  async addEvent(e: EventRecord) {
    this.db
      .prepare('INSERT INTO events (account_id, event, metadata_json, created_at) VALUES (?, ?, ?, ?)')
      .run(e.accountId, e.event, JSON.stringify(e.metadata), e.createdAt);
  }
  async listEvents(accountId: string, limit: number): Promise<EventRecord[]> {
    const rows = this.db
      .prepare('SELECT * FROM (SELECT * FROM events WHERE account_id = ? ORDER BY id DESC LIMIT ?) ORDER BY id')
      .all(accountId, limit) as { event: string; metadata_json: string; created_at: number }[];
    return rows.map((r) => ({
      accountId,
      event: r.event,
      metadata: JSON.parse(r.metadata_json),
      createdAt: r.created_at,
    }));
  }

  async hitCounter(key: string, windowMs: number, now: number) {
    // One statement: the row is new, restarted (its window ended) or counted up, atomically.
    const r = this.db
      .prepare(
        `INSERT INTO rate_counters (key, count, reset_at) VALUES (@key, 1, @now + @windowMs)
         ON CONFLICT(key) DO UPDATE SET
           count = CASE WHEN reset_at <= @now THEN 1 ELSE count + 1 END,
           reset_at = CASE WHEN reset_at <= @now THEN @now + @windowMs ELSE reset_at END
         RETURNING count, reset_at`,
      )
      .get({ key, now, windowMs }) as { count: number; reset_at: number };
    return { count: r.count, resetAt: r.reset_at };
  }
  async readCounter(key: string, now: number) {
    const r = this.db
      .prepare('SELECT count, reset_at FROM rate_counters WHERE key = ? AND reset_at > ?')
      .get(key, now) as { count: number; reset_at: number } | undefined;
    return r ? { count: r.count, resetAt: r.reset_at } : null;
  }
  async releaseCounter(key: string, resetAt: number) {
    this.db
      .prepare('UPDATE rate_counters SET count = count - 1 WHERE key = ? AND reset_at = ? AND count > 0')
      .run(key, resetAt);
  }
  async deleteCounter(key: string) {
    this.db.prepare('DELETE FROM rate_counters WHERE key = ?').run(key);
  }
  async purgeCounters(now: number) {
    return this.db.prepare('DELETE FROM rate_counters WHERE reset_at <= ?').run(now).changes;
  }

  /** One upsert that takes, renews or leaves the row, in a transaction with the read of who holds it. */
  async acquireLease(name: string, holder: string, ttlMs: number, now: number): Promise<LeaseState> {
    return this.db
      .transaction(() => {
        this.db
          .prepare(
            `INSERT INTO leases (name, holder, expires_at) VALUES (@name, @holder, @now + @ttlMs)
           ON CONFLICT(name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
             WHERE leases.holder = excluded.holder OR leases.expires_at <= @now`,
          )
          .run({ name, holder, now, ttlMs });
        const r = this.db.prepare('SELECT holder, expires_at FROM leases WHERE name = ?').get(name) as {
          holder: string;
          expires_at: number;
        };
        return { held: r.holder === holder, holder: r.holder, expiresAt: r.expires_at };
      })
      .immediate();
  }
  async releaseLease(name: string, holder: string) {
    return this.db.prepare('DELETE FROM leases WHERE name = ? AND holder = ?').run(name, holder).changes > 0;
  }

  async getMeta(key: string) {
    const r = this.db.prepare('SELECT value FROM meta WHERE key = ?').get(key) as { value: string } | undefined;
    return r ? r.value : null;
  }
  async setMeta(key: string, value: string) {
    this.db
      .prepare('INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value')
      .run(key, value);
  }
  async ensureMeta(key: string, value: string) {
    this.db.prepare('INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO NOTHING').run(key, value);
    const held = await this.getMeta(key);
    if (held === null) throw new Error(`meta ${key} vanished after it was ensured`);
    return held;
  }
  async ping(): Promise<void> {
    this.db.prepare('SELECT 1').get();
  }
  async close(): Promise<void> {
    if (this.db.open) this.db.close();
  }
}
