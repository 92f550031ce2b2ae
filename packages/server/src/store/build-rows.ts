/**
 * Rows of the builds tables (the same columns in SQLite and PostgreSQL) as records. The two
 * stores differ only in how a JSON column and a flag come back (SQLite: text and 0/1;
 * PostgreSQL: parsed jsonb and boolean), which each passes in as `json` and `flag`.
 */
import type { BuildState } from '@sandboxd/protocol';
import type { LayerRecord, StoredBuild, TemplateRecord } from './store.js';

/** A builds row; `J` is how its JSON columns come back, `F` its flag. */
export interface BuildRowOf<J, F> {
  id: string;
  account_id: string;
  name: string;
  tag: string;
  extra_tags_json: J;
  state: BuildState;
  source: StoredBuild['source'];
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  steps_total: number;
  steps_done: number;
  steps_cached: number;
  digest: string | null;
  size_bytes: number | null;
  error_json: J | null;
  plan_json: J | null;
  allow_domains_json: J | null;
  no_cache: F;
  holder: string | null;
}

/** A builds row as a record; `json` decodes a JSON column, `flag` the flag. */
export function rowToBuild<J, F>(r: BuildRowOf<J, F>, json: (v: J) => unknown, flag: (v: F) => boolean): StoredBuild {
  return {
    id: r.id,
    accountId: r.account_id,
    name: r.name,
    tag: r.tag,
    extraTags: json(r.extra_tags_json) as string[],
    state: r.state,
    source: r.source,
    createdAt: r.created_at,
    ...(r.started_at !== null ? { startedAt: r.started_at } : {}),
    ...(r.finished_at !== null ? { finishedAt: r.finished_at } : {}),
    stepsTotal: r.steps_total,
    stepsDone: r.steps_done,
    stepsCached: r.steps_cached,
    ...(r.digest !== null ? { digest: r.digest } : {}),
    ...(r.size_bytes !== null ? { sizeBytes: r.size_bytes } : {}),
    ...(r.error_json !== null ? { error: json(r.error_json) as StoredBuild['error'] } : {}),
    plan: r.plan_json === null ? null : (json(r.plan_json) as StoredBuild['plan']),
    allowDomains: r.allow_domains_json === null ? null : (json(r.allow_domains_json) as string[]),
    noCache: flag(r.no_cache),
    holder: r.holder,
  };
}

/** A build_layers row. */
export interface LayerRow {
  account_id: string;
  key: string;
  driver_ref: string;
  parent_key: string | null;
  size_bytes: number;
  created_at: number;
  last_used_at: number;
}

export const rowToLayer = (r: LayerRow): LayerRecord => ({
  accountId: r.account_id,
  key: r.key,
  driverRef: r.driver_ref,
  parentKey: r.parent_key,
  sizeBytes: r.size_bytes,
  createdAt: r.created_at,
  lastUsedAt: r.last_used_at,
});

/** A templates row. */
export interface TemplateRow {
  account_id: string;
  name: string;
  tag: string;
  driver_ref: string;
  digest: string;
  size_bytes: number;
  build_id: string;
  created_at: number;
}

export const rowToTemplate = (r: TemplateRow): TemplateRecord => ({
  accountId: r.account_id,
  name: r.name,
  tag: r.tag,
  driverRef: r.driver_ref,
  digest: r.digest,
  sizeBytes: r.size_bytes,
  buildId: r.build_id,
  createdAt: r.created_at,
});
