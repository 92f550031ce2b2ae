import type { ColumnType, Generated } from 'kysely';

/** A `json` column: read back parsed, written as the JSON text (never an object: `pg` turns arrays into SQL arrays). */
type Json = ColumnType<unknown, string, string>;
type NullableJson = ColumnType<unknown | null, string | null, string | null>;

/** The tables of the PostgreSQL store, as Kysely sees them (BIGINT columns are read as numbers). */
export interface PgDatabase {
  accounts: {
    id: string;
    email: string;
    password_hash: string | null;
    plan: string;
    admin: boolean;
    created_at: number;
    /** Kept by a trigger on `ledger` (migration 5); never written here. */
    balance: ColumnType<number, never, never>;
  };
  sessions: { token_hash: string; account_id: string; created_at: number; expires_at: number };
  login_links: { token_hash: string; account_id: string; expires_at: number; used_at: number | null };
  api_keys: {
    id: string;
    account_id: string;
    name: string;
    prefix: string;
    key_hash: string;
    created_at: number;
    last_used_at: number | null;
  };
  sandboxes: PgSandboxRow;
  volumes: { account_id: string; name: string; size_gb: number; created_at: number; runner: string | null };
  sandbox_mounts: { sandbox_id: string; account_id: string; volume_name: string; mount_path: string };
  ledger: {
    id: Generated<number>;
    account_id: string;
    delta: number;
    reason: string;
    sandbox_id: string | null;
    created_at: number;
  };
  events: { id: Generated<number>; account_id: string; event: string; metadata_json: Json; created_at: number };
  meta: { key: string; value: string };
  rate_counters: { key: string; count: number; reset_at: number };
  leases: { name: string; holder: string; expires_at: number };
  builds: PgBuildRow;
  build_logs: {
    build_id: string;
    seq: number;
    time: number;
    step: number | null;
    stream: 'stdout' | 'stderr' | 'system';
    text: string;
  };
  build_layers: {
    account_id: string;
    key: string;
    driver_ref: string;
    parent_key: string | null;
    size_bytes: number;
    created_at: number;
    last_used_at: number;
  };
  templates: {
    account_id: string;
    name: string;
    tag: string;
    driver_ref: string;
    digest: string;
    size_bytes: number;
    build_id: string;
    created_at: number;
  };
  build_uploads: { account_id: string; hash: string; path: string; size_bytes: number; created_at: number };
  secrets: {
    account_id: string;
    name: string;
    ciphertext: string;
    description: string;
    version: number;
    created_at: number;
    updated_at: number;
  };
  secret_injections: {
    id: string;
    account_id: string;
    sandbox_id: string;
    secret: string;
    destination: string;
    method: string;
    status: number | null;
    error: string | null;
    at: number;
  };
  snapshots: {
    account_id: string;
    name: string;
    state: 'creating' | 'ready';
    size_bytes: number;
    base_image: string;
    sandbox_id: string;
    created_at: number;
  };
}

export interface PgSandboxRow {
  id: string;
  account_id: string;
  name: string;
  image: string;
  region: string;
  env_json: Json;
  volumes_json: Json;
  created_at: number;
  state: string;
  stop_at: number;
  reserved_minutes: number;
  ended_at: number | null;
  details_json: NullableJson;
  ports_public: boolean;
  template: string | null;
  metadata_json: NullableJson;
  on_timeout: 'stop' | 'pause';
  run_started_at: number | null;
  expires_at: number | null;
  runner: string | null;
  network_json: NullableJson;
  isolation: Generated<'container' | 'gvisor'>;
  paused_memory: 'ram' | 'disk' | null;
}

export interface PgBuildRow {
  id: string;
  account_id: string;
  name: string;
  tag: string;
  extra_tags_json: Json;
  state: 'queued' | 'building' | 'ready' | 'error' | 'cancelled';
  source: 'dockerfile' | 'e2b';
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  steps_total: number;
  steps_done: number;
  steps_cached: number;
  digest: string | null;
  size_bytes: number | null;
  error_json: NullableJson;
  plan_json: NullableJson;
  allow_domains_json: NullableJson;
  no_cache: boolean;
  holder: string | null;
  log_lines: Generated<number>;
  log_bytes: Generated<number>;
  log_cut: Generated<boolean>;
}
