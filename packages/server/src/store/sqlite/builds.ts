import { type BuildState, SandboxdError } from '@sandboxd/protocol';
import type {
  BuildLogCap,
  BuildLogLine,
  BuildUpdate,
  LayerRecord,
  StoredBuild,
  TemplateRecord,
  UploadRecord,
} from '../store.js';
import {
  type BuildRowOf,
  type LayerRow,
  rowToBuild,
  rowToLayer,
  rowToTemplate,
  type TemplateRow,
} from '../build-rows.js';
import type { Db } from './open.js';

type BuildRow = BuildRowOf<string, number>;
const toBuild = (r: BuildRow): StoredBuild =>
  rowToBuild(
    r,
    (v) => JSON.parse(v),
    (v) => v !== 0,
  );
const toLayer = rowToLayer;
const toTemplate = rowToTemplate;

/** `IN (?, ?, ...)` for `n` values. */
const marks = (n: number) => `(${Array.from({ length: n }, () => '?').join(', ')})`;

/** The column each field of a {@link BuildUpdate} writes, and how its value is stored. */
const COLUMNS: Array<[keyof BuildUpdate, string, (v: never) => unknown]> = [
  ['state', 'state', (v: string) => v],
  ['startedAt', 'started_at', (v: number) => v],
  ['finishedAt', 'finished_at', (v: number) => v],
  ['stepsTotal', 'steps_total', (v: number) => v],
  ['stepsDone', 'steps_done', (v: number) => v],
  ['stepsCached', 'steps_cached', (v: number) => v],
  ['digest', 'digest', (v: string) => v],
  ['sizeBytes', 'size_bytes', (v: number) => v],
  ['error', 'error_json', (v: unknown) => JSON.stringify(v)],
  ['plan', 'plan_json', (v: unknown) => (v === null ? null : JSON.stringify(v))],
  ['noCache', 'no_cache', (v: boolean) => (v ? 1 : 0)],
  ['holder', 'holder', (v: string | null) => v],
];

/** Builds, their logs, cache layers, templates and uploads. Decisions inside IMMEDIATE transactions. */
export class SqliteBuilds {
  constructor(private readonly db: Db) {}

  create(b: StoredBuild): void {
    this.db
      .prepare(
        `INSERT INTO builds (id, account_id, name, tag, extra_tags_json, state, source, created_at, started_at,
           finished_at, steps_total, steps_done, steps_cached, digest, size_bytes, error_json, plan_json,
           allow_domains_json, no_cache, holder)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      )
      .run(
        b.id,
        b.accountId,
        b.name,
        b.tag,
        JSON.stringify(b.extraTags),
        b.state,
        b.source,
        b.createdAt,
        b.startedAt ?? null,
        b.finishedAt ?? null,
        b.stepsTotal,
        b.stepsDone,
        b.stepsCached,
        b.digest ?? null,
        b.sizeBytes ?? null,
        b.error ? JSON.stringify(b.error) : null,
        b.plan ? JSON.stringify(b.plan) : null,
        b.allowDomains ? JSON.stringify(b.allowDomains) : null,
        b.noCache ? 1 : 0,
        b.holder,
      );
  }

  get(id: string): StoredBuild | null {
    const r = this.db.prepare('SELECT * FROM builds WHERE id = ?').get(id) as BuildRow | undefined;
    return r ? toBuild(r) : null;
  }

  list(accountId: string, q: { name?: string; limit: number }): StoredBuild[] {
    const rows =
      q.name === undefined
        ? this.db
            .prepare('SELECT * FROM builds WHERE account_id = ? ORDER BY created_at DESC, id DESC LIMIT ?')
            .all(accountId, q.limit)
        : this.db
            .prepare('SELECT * FROM builds WHERE account_id = ? AND name = ? ORDER BY created_at DESC, id DESC LIMIT ?')
            .all(accountId, q.name, q.limit);
    return (rows as BuildRow[]).map(toBuild);
  }

  listByState(states: BuildState[]): StoredBuild[] {
    if (!states.length) return [];
    return (
      this.db
        .prepare(`SELECT * FROM builds WHERE state IN ${marks(states.length)} ORDER BY created_at, id`)
        .all(...states) as BuildRow[]
    ).map(toBuild);
  }

  count(accountId: string, states: BuildState[]): number {
    if (!states.length) return 0;
    return (
      this.db
        .prepare(`SELECT COUNT(*) AS n FROM builds WHERE account_id = ? AND state IN ${marks(states.length)}`)
        .get(accountId, ...states) as { n: number }
    ).n;
  }

  update(id: string, u: BuildUpdate): StoredBuild {
    return this.db
      .transaction(() => {
        const cur = this.get(id);
        if (!cur) throw new SandboxdError('not_found', 'Build not found', { buildId: id });
        if (u.expectStates && !u.expectStates.includes(cur.state))
          throw new SandboxdError('conflict', `Build is ${cur.state}`, { buildId: id, state: cur.state });
        const sets: string[] = [];
        const values: unknown[] = [];
        for (const [field, column, encode] of COLUMNS) {
          if (u[field] === undefined) continue;
          sets.push(`${column} = ?`);
          values.push(encode(u[field] as never));
        }
        if (sets.length) this.db.prepare(`UPDATE builds SET ${sets.join(', ')} WHERE id = ?`).run(...values, id);
        for (const t of u.templates ?? []) this.putTemplate(t);
        return this.get(id) as StoredBuild;
      })
      .immediate();
  }

  delete(id: string): boolean {
    return this.db
      .transaction(() => {
        this.db.prepare('DELETE FROM build_logs WHERE build_id = ?').run(id);
        return this.db.prepare('DELETE FROM builds WHERE id = ?').run(id).changes > 0;
      })
      .immediate();
  }

  appendLogs(id: string, lines: Array<Omit<BuildLogLine, 'seq'>>, cap: BuildLogCap): number {
    return this.db
      .transaction(() => {
        const b = this.db.prepare('SELECT log_lines, log_bytes, log_cut FROM builds WHERE id = ?').get(id) as
          | { log_lines: number; log_bytes: number; log_cut: number }
          | undefined;
        if (!b) throw new SandboxdError('not_found', 'Build not found', { buildId: id });
        if (b.log_cut) return 0;
        let { log_lines: n, log_bytes: bytes } = b;
        let cut = 0;
        let written = 0;
        const insert = this.db.prepare(
          'INSERT INTO build_logs (build_id, seq, time, step, stream, text) VALUES (?, ?, ?, ?, ?, ?)',
        );
        for (const l of lines) {
          const size = Buffer.byteLength(l.text);
          // One line is kept for the notice that the rest was cut.
          if (n + 1 >= cap.maxLines || bytes + size > cap.maxBytes) {
            insert.run(id, n, l.time, null, 'system', cap.cutText);
            n++;
            bytes += Buffer.byteLength(cap.cutText);
            cut = 1;
            written++;
            break;
          }
          insert.run(id, n, l.time, l.step ?? null, l.stream, l.text);
          n++;
          bytes += size;
          written++;
        }
        this.db
          .prepare('UPDATE builds SET log_lines = ?, log_bytes = ?, log_cut = ? WHERE id = ?')
          .run(n, bytes, cut, id);
        return written;
      })
      .immediate();
  }

  listLogs(id: string, from: number, limit: number): BuildLogLine[] {
    const rows = this.db
      .prepare(
        'SELECT seq, time, step, stream, text FROM build_logs WHERE build_id = ? AND seq >= ? ORDER BY seq LIMIT ?',
      )
      .all(id, from, limit) as Array<{ seq: number; time: number; step: number | null; stream: string; text: string }>;
    return rows.map((r) => ({
      seq: r.seq,
      time: r.time,
      ...(r.step !== null ? { step: r.step } : {}),
      stream: r.stream as BuildLogLine['stream'],
      text: r.text,
    }));
  }

  getLayer(accountId: string, key: string): LayerRecord | null {
    const r = this.db.prepare('SELECT * FROM build_layers WHERE account_id = ? AND key = ?').get(accountId, key) as
      | LayerRow
      | undefined;
    return r ? toLayer(r) : null;
  }

  putLayer(l: LayerRecord): void {
    this.db
      .prepare(
        `INSERT INTO build_layers (account_id, key, driver_ref, parent_key, size_bytes, created_at, last_used_at)
         VALUES (?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (account_id, key) DO UPDATE SET driver_ref = excluded.driver_ref, parent_key = excluded.parent_key,
           size_bytes = excluded.size_bytes, created_at = excluded.created_at, last_used_at = excluded.last_used_at`,
      )
      .run(l.accountId, l.key, l.driverRef, l.parentKey, l.sizeBytes, l.createdAt, l.lastUsedAt);
  }

  touchLayer(accountId: string, key: string, at: number): void {
    this.db
      .prepare('UPDATE build_layers SET last_used_at = max(last_used_at, ?) WHERE account_id = ? AND key = ?')
      .run(at, accountId, key);
  }

  deleteLayer(accountId: string, key: string): boolean {
    return this.db.prepare('DELETE FROM build_layers WHERE account_id = ? AND key = ?').run(accountId, key).changes > 0;
  }

  listLayers(accountId: string): LayerRecord[] {
    return (
      this.db
        .prepare('SELECT * FROM build_layers WHERE account_id = ? ORDER BY last_used_at, key')
        .all(accountId) as LayerRow[]
    ).map(toLayer);
  }

  layerAccounts(): string[] {
    return (
      this.db.prepare('SELECT DISTINCT account_id FROM build_layers ORDER BY account_id').all() as Array<{
        account_id: string;
      }>
    ).map((r) => r.account_id);
  }

  layerBytes(accountId: string): number {
    return (
      this.db
        .prepare('SELECT COALESCE(SUM(size_bytes), 0) AS b FROM build_layers WHERE account_id = ?')
        .get(accountId) as { b: number }
    ).b;
  }

  getTemplate(accountId: string, name: string, tag: string): TemplateRecord | null {
    const r = this.db
      .prepare('SELECT * FROM templates WHERE account_id = ? AND name = ? AND tag = ?')
      .get(accountId, name, tag) as TemplateRow | undefined;
    return r ? toTemplate(r) : null;
  }

  putTemplate(t: TemplateRecord): void {
    this.db
      .prepare(
        `INSERT INTO templates (account_id, name, tag, driver_ref, digest, size_bytes, build_id, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (account_id, name, tag) DO UPDATE SET driver_ref = excluded.driver_ref, digest = excluded.digest,
           size_bytes = excluded.size_bytes, build_id = excluded.build_id, created_at = excluded.created_at`,
      )
      .run(t.accountId, t.name, t.tag, t.driverRef, t.digest, t.sizeBytes, t.buildId, t.createdAt);
  }

  listTemplates(accountId: string, q: { name?: string } = {}): TemplateRecord[] {
    const rows =
      q.name === undefined
        ? this.db.prepare('SELECT * FROM templates WHERE account_id = ? ORDER BY name, tag').all(accountId)
        : this.db
            .prepare('SELECT * FROM templates WHERE account_id = ? AND name = ? ORDER BY tag')
            .all(accountId, q.name);
    return (rows as TemplateRow[]).map(toTemplate);
  }

  deleteTemplates(accountId: string, name: string, tag?: string): number {
    return tag === undefined
      ? this.db.prepare('DELETE FROM templates WHERE account_id = ? AND name = ?').run(accountId, name).changes
      : this.db.prepare('DELETE FROM templates WHERE account_id = ? AND name = ? AND tag = ?').run(accountId, name, tag)
          .changes;
  }

  putUpload(u: UploadRecord): void {
    this.db
      .prepare(
        `INSERT INTO build_uploads (account_id, hash, path, size_bytes, created_at) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT (account_id, hash) DO UPDATE SET path = excluded.path, size_bytes = excluded.size_bytes,
           created_at = excluded.created_at`,
      )
      .run(u.accountId, u.hash, u.path, u.sizeBytes, u.createdAt);
  }

  getUpload(accountId: string, hash: string): UploadRecord | null {
    const r = this.db.prepare('SELECT * FROM build_uploads WHERE account_id = ? AND hash = ?').get(accountId, hash) as
      | UploadRow
      | undefined;
    return r ? toUpload(r) : null;
  }

  listUploads(accountId: string): UploadRecord[] {
    const rows = this.db
      .prepare('SELECT * FROM build_uploads WHERE account_id = ? ORDER BY created_at, hash')
      .all(accountId) as UploadRow[];
    return rows.map(toUpload);
  }

  deleteUpload(accountId: string, hash: string): boolean {
    return (
      this.db.prepare('DELETE FROM build_uploads WHERE account_id = ? AND hash = ?').run(accountId, hash).changes > 0
    );
  }
}

interface UploadRow {
  account_id: string;
  hash: string;
  path: string;
  size_bytes: number;
  created_at: number;
}

const toUpload = (r: UploadRow): UploadRecord => ({
  accountId: r.account_id,
  hash: r.hash,
  path: r.path,
  sizeBytes: r.size_bytes,
  createdAt: r.created_at,
});
