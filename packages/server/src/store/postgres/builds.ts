import { type BuildState, SandboxdError } from '@sandboxd/protocol';
import { type Kysely, type Selectable, sql } from 'kysely';
import type {
  BuildLogCap,
  BuildLogLine,
  BuildUpdate,
  LayerRecord,
  StoredBuild,
  TemplateRecord,
  UploadRecord,
} from '../store.js';
import { rowToBuild, rowToLayer, rowToTemplate } from '../build-rows.js';
import type { PgBuildRow, PgDatabase } from './schema.js';

type Q = Kysely<PgDatabase>;

const toBuild = (r: Selectable<PgBuildRow>): StoredBuild =>
  rowToBuild(
    r,
    (v) => v,
    (v) => v,
  );
const toLayer = (r: PgDatabase['build_layers']): LayerRecord => rowToLayer(r);
const toTemplate = (r: PgDatabase['templates']): TemplateRecord => rowToTemplate(r);

/** The columns a {@link BuildUpdate} writes. */
function updateColumns(u: BuildUpdate): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (u.state !== undefined) out.state = u.state;
  if (u.startedAt !== undefined) out.started_at = u.startedAt;
  if (u.finishedAt !== undefined) out.finished_at = u.finishedAt;
  if (u.stepsTotal !== undefined) out.steps_total = u.stepsTotal;
  if (u.stepsDone !== undefined) out.steps_done = u.stepsDone;
  if (u.stepsCached !== undefined) out.steps_cached = u.stepsCached;
  if (u.digest !== undefined) out.digest = u.digest;
  if (u.sizeBytes !== undefined) out.size_bytes = u.sizeBytes;
  if (u.error !== undefined) out.error_json = JSON.stringify(u.error);
  if (u.plan !== undefined) out.plan_json = u.plan === null ? null : JSON.stringify(u.plan);
  if (u.noCache !== undefined) out.no_cache = u.noCache;
  if (u.holder !== undefined) out.holder = u.holder;
  return out;
}

/**
 * Builds, their logs, cache layers, templates and uploads. A build's changes run under its
 * row lock (`FOR UPDATE`), so a cancel and the runner's last write never both win, and its
 * log's numbering never forks.
 */
export class PgBuilds {
  constructor(private readonly db: Q) {}

  async create(b: StoredBuild): Promise<void> {
    await this.db
      .insertInto('builds')
      .values({
        id: b.id,
        account_id: b.accountId,
        name: b.name,
        tag: b.tag,
        extra_tags_json: JSON.stringify(b.extraTags),
        state: b.state,
        source: b.source,
        created_at: b.createdAt,
        started_at: b.startedAt ?? null,
        finished_at: b.finishedAt ?? null,
        steps_total: b.stepsTotal,
        steps_done: b.stepsDone,
        steps_cached: b.stepsCached,
        digest: b.digest ?? null,
        size_bytes: b.sizeBytes ?? null,
        error_json: b.error ? JSON.stringify(b.error) : null,
        plan_json: b.plan ? JSON.stringify(b.plan) : null,
        allow_domains_json: b.allowDomains ? JSON.stringify(b.allowDomains) : null,
        no_cache: b.noCache,
        holder: b.holder,
      })
      .execute();
  }

  async get(q: Q, id: string, lock = false): Promise<StoredBuild | null> {
    let query = q.selectFrom('builds').selectAll().where('id', '=', id);
    if (lock) query = query.forUpdate();
    const r = await query.executeTakeFirst();
    return r ? toBuild(r) : null;
  }

  async list(accountId: string, q: { name?: string; limit: number }): Promise<StoredBuild[]> {
    let query = this.db.selectFrom('builds').selectAll().where('account_id', '=', accountId);
    if (q.name !== undefined) query = query.where('name', '=', q.name);
    const rows = await query.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(q.limit).execute();
    return rows.map(toBuild);
  }

  async listByState(states: BuildState[]): Promise<StoredBuild[]> {
    if (!states.length) return [];
    const rows = await this.db
      .selectFrom('builds')
      .selectAll()
      .where('state', 'in', states)
      .orderBy('created_at')
      .orderBy('id')
      .execute();
    return rows.map(toBuild);
  }

  async count(accountId: string, states: BuildState[]): Promise<number> {
    if (!states.length) return 0;
    const r = await this.db
      .selectFrom('builds')
      .select((e) => e.fn.countAll<number>().as('n'))
      .where('account_id', '=', accountId)
      .where('state', 'in', states)
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }

  async update(id: string, u: BuildUpdate): Promise<StoredBuild> {
    return this.db.transaction().execute(async (trx) => {
      const cur = await this.get(trx, id, true);
      if (!cur) throw new SandboxdError('not_found', 'Build not found', { buildId: id });
      if (u.expectStates && !u.expectStates.includes(cur.state))
        throw new SandboxdError('conflict', `Build is ${cur.state}`, { buildId: id, state: cur.state });
      const set = updateColumns(u);
      if (Object.keys(set).length) await trx.updateTable('builds').set(set).where('id', '=', id).execute();
      for (const t of u.templates ?? []) await this.putTemplate(trx, t);
      return (await this.get(trx, id)) as StoredBuild;
    });
  }

  async delete(id: string): Promise<boolean> {
    return this.db.transaction().execute(async (trx) => {
      await trx.deleteFrom('build_logs').where('build_id', '=', id).execute();
      const r = await trx.deleteFrom('builds').where('id', '=', id).executeTakeFirst();
      return Number(r.numDeletedRows) > 0;
    });
  }

  async appendLogs(id: string, lines: Array<Omit<BuildLogLine, 'seq'>>, cap: BuildLogCap): Promise<number> {
    return this.db.transaction().execute(async (trx) => {
      const b = await trx
        .selectFrom('builds')
        .select(['log_lines', 'log_bytes', 'log_cut'])
        .where('id', '=', id)
        .forUpdate()
        .executeTakeFirst();
      if (!b) throw new SandboxdError('not_found', 'Build not found', { buildId: id });
      if (b.log_cut) return 0;
      let n = Number(b.log_lines);
      let bytes = Number(b.log_bytes);
      let cut = false;
      const rows: PgDatabase['build_logs'][] = [];
      for (const l of lines) {
        const size = Buffer.byteLength(l.text);
        // One line is kept for the notice that the rest was cut.
        if (n + 1 >= cap.maxLines || bytes + size > cap.maxBytes) {
          rows.push({ build_id: id, seq: n, time: l.time, step: null, stream: 'system', text: cap.cutText });
          n++;
          bytes += Buffer.byteLength(cap.cutText);
          cut = true;
          break;
        }
        rows.push({ build_id: id, seq: n, time: l.time, step: l.step ?? null, stream: l.stream, text: l.text });
        n++;
        bytes += size;
      }
      // At most a few thousand parameters per statement.
      for (let i = 0; i < rows.length; i += 1000)
        await trx
          .insertInto('build_logs')
          .values(rows.slice(i, i + 1000))
          .execute();
      await trx
        .updateTable('builds')
        .set({ log_lines: n, log_bytes: bytes, log_cut: cut })
        .where('id', '=', id)
        .execute();
      return rows.length;
    });
  }

  async listLogs(id: string, from: number, limit: number): Promise<BuildLogLine[]> {
    const rows = await this.db
      .selectFrom('build_logs')
      .select(['seq', 'time', 'step', 'stream', 'text'])
      .where('build_id', '=', id)
      .where('seq', '>=', from)
      .orderBy('seq')
      .limit(limit)
      .execute();
    return rows.map((r) => ({
      seq: r.seq,
      time: r.time,
      ...(r.step !== null ? { step: r.step } : {}),
      stream: r.stream,
      text: r.text,
    }));
  }

  async getLayer(accountId: string, key: string): Promise<LayerRecord | null> {
    const r = await this.db
      .selectFrom('build_layers')
      .selectAll()
      .where('account_id', '=', accountId)
      .where('key', '=', key)
      .executeTakeFirst();
    return r ? toLayer(r) : null;
  }

  async putLayer(l: LayerRecord): Promise<void> {
    const row = {
      account_id: l.accountId,
      key: l.key,
      driver_ref: l.driverRef,
      parent_key: l.parentKey,
      size_bytes: l.sizeBytes,
      created_at: l.createdAt,
      last_used_at: l.lastUsedAt,
    };
    await this.db
      .insertInto('build_layers')
      .values(row)
      .onConflict((oc) =>
        oc.columns(['account_id', 'key']).doUpdateSet({
          driver_ref: row.driver_ref,
          parent_key: row.parent_key,
          size_bytes: row.size_bytes,
          created_at: row.created_at,
          last_used_at: row.last_used_at,
        }),
      )
      .execute();
  }

  async touchLayer(accountId: string, key: string, at: number): Promise<void> {
    await this.db
      .updateTable('build_layers')
      .set({ last_used_at: sql<number>`GREATEST(last_used_at, ${at}::bigint)` })
      .where('account_id', '=', accountId)
      .where('key', '=', key)
      .execute();
  }

  async deleteLayer(accountId: string, key: string): Promise<boolean> {
    const r = await this.db
      .deleteFrom('build_layers')
      .where('account_id', '=', accountId)
      .where('key', '=', key)
      .executeTakeFirst();
    return Number(r.numDeletedRows) > 0;
  }

  async listLayers(accountId: string): Promise<LayerRecord[]> {
    const rows = await this.db
      .selectFrom('build_layers')
      .selectAll()
      .where('account_id', '=', accountId)
      .orderBy('last_used_at')
      .orderBy('key')
      .execute();
    return rows.map(toLayer);
  }

  async layerAccounts(): Promise<string[]> {
    const rows = await this.db
      .selectFrom('build_layers')
      .select('account_id')
      .distinct()
      .orderBy('account_id')
      .execute();
    return rows.map((r) => r.account_id);
  }

  async layerBytes(accountId: string): Promise<number> {
    const r = await this.db
      .selectFrom('build_layers')
      .select(sql<number>`COALESCE(SUM(size_bytes), 0)::bigint`.as('b'))
      .where('account_id', '=', accountId)
      .executeTakeFirstOrThrow();
    return Number(r.b);
  }

  async getTemplate(accountId: string, name: string, tag: string): Promise<TemplateRecord | null> {
    const r = await this.db
      .selectFrom('templates')
      .selectAll()
      .where('account_id', '=', accountId)
      .where('name', '=', name)
      .where('tag', '=', tag)
      .executeTakeFirst();
    return r ? toTemplate(r) : null;
  }

  async putTemplate(q: Q, t: TemplateRecord): Promise<void> {
    const row = {
      account_id: t.accountId,
      name: t.name,
      tag: t.tag,
      driver_ref: t.driverRef,
      digest: t.digest,
      size_bytes: t.sizeBytes,
      build_id: t.buildId,
      created_at: t.createdAt,
    };
    await q
      .insertInto('templates')
      .values(row)
      .onConflict((oc) =>
        oc.columns(['account_id', 'name', 'tag']).doUpdateSet({
          driver_ref: row.driver_ref,
          digest: row.digest,
          size_bytes: row.size_bytes,
          build_id: row.build_id,
          created_at: row.created_at,
        }),
      )
      .execute();
  }

  async listTemplates(accountId: string, q: { name?: string } = {}): Promise<TemplateRecord[]> {
    let query = this.db.selectFrom('templates').selectAll().where('account_id', '=', accountId);
    if (q.name !== undefined) query = query.where('name', '=', q.name);
    const rows = await query.orderBy('name').orderBy('tag').execute();
    return rows.map(toTemplate);
  }

  async deleteTemplates(accountId: string, name: string, tag?: string): Promise<number> {
    let query = this.db.deleteFrom('templates').where('account_id', '=', accountId).where('name', '=', name);
    if (tag !== undefined) query = query.where('tag', '=', tag);
    const r = await query.executeTakeFirst();
    return Number(r.numDeletedRows);
  }

  async putUpload(u: UploadRecord): Promise<void> {
    await this.db
      .insertInto('build_uploads')
      .values({
        account_id: u.accountId,
        hash: u.hash,
        path: u.path,
        size_bytes: u.sizeBytes,
        created_at: u.createdAt,
      })
      .onConflict((oc) =>
        oc
          .columns(['account_id', 'hash'])
          .doUpdateSet({ path: u.path, size_bytes: u.sizeBytes, created_at: u.createdAt }),
      )
      .execute();
  }

  async getUpload(accountId: string, hash: string): Promise<UploadRecord | null> {
    const r = await this.db
      .selectFrom('build_uploads')
      .selectAll()
      .where('account_id', '=', accountId)
      .where('hash', '=', hash)
      .executeTakeFirst();
    return r
      ? { accountId: r.account_id, hash: r.hash, path: r.path, sizeBytes: r.size_bytes, createdAt: r.created_at }
      : null;
  }

  async listUploads(accountId: string): Promise<UploadRecord[]> {
    const rows = await this.db
      .selectFrom('build_uploads')
      .selectAll()
      .where('account_id', '=', accountId)
      .orderBy('created_at')
      .orderBy('hash')
      .execute();
    return rows.map((r) => ({
      accountId: r.account_id,
      hash: r.hash,
      path: r.path,
      sizeBytes: Number(r.size_bytes),
      createdAt: Number(r.created_at),
    }));
  }

  async deleteUpload(accountId: string, hash: string): Promise<boolean> {
    const r = await this.db
      .deleteFrom('build_uploads')
      .where('account_id', '=', accountId)
      .where('hash', '=', hash)
      .executeTakeFirst();
    return Number(r.numDeletedRows) > 0;
  }
}
