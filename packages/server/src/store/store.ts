import type { BuildFailure, BuildState, PauseMemory, SandboxNetwork } from '@sandboxd/protocol';
import type { BuildPlan } from '../builds/plan.js';
import type { LedgerReason } from '../domain/billing.js';
import type { SandboxRecord, SandboxRecordState } from '../domain/sandbox.js';

/** An account as stored. */
export interface AccountRecord {
  id: string;
  email: string;
  /** `scrypt$...`, or null for an account that cannot log in with a password. */
  passwordHash: string | null;
  plan: string;
  admin: boolean;
  createdAt: number;
}

export interface ApiKeyRecord {
  id: string;
  accountId: string;
  name: string;
  prefix: string;
  /** sha256 hex of the key. */
  keyHash: string;
  createdAt: number;
  lastUsedAt: number | null;
}

export interface LedgerRow {
  id: number;
  accountId: string;
  delta: number;
  reason: LedgerReason;
  sandboxId: string | null;
  createdAt: number;
}

export interface VolumeRecord {
  accountId: string;
  name: string;
  sizeGb: number;
  createdAt: number;
  /** The runner its data lives on (set with the first sandbox placed with it); absent: none yet, or role `all`. */
  runner?: string;
}

export interface EventRecord {
  accountId: string;
  event: string;
  metadata: Record<string, unknown>;
  createdAt: number;
}

/** A page request: newest first; the cursor is opaque to callers. */
export interface PageRequest {
  limit: number;
  cursor?: string;
}
export interface Page<T> {
  items: T[];
  nextCursor?: string;
}

/** What `reserveSandbox` needs to decide atomically. */
export interface Reservation {
  /** Tokens to debit (> 0). */
  minutes: number;
  /** Plan concurrency limit: live (`creating`+`started`) sandboxes allowed. */
  concurrency: number;
  /**
   * Host limit: live sandboxes of all accounts allowed (`maxSandboxes`); absent or 0: none.
   * Checked first: at it, 503 `capacity` (resource `sandboxes`) and nothing is written.
   */
  maxSandboxes?: number;
  /** Volumes to create if missing; size given explicitly, or null to accept any existing size. */
  volumes: Array<{ name: string; sizeGb: number | null }>;
  /** Makes another name when the record's name is taken in the account. */
  newName: () => string;
}

/** A status change of a sandbox together with its ledger effect, applied atomically. */
export interface SandboxUpdate {
  /** When this happens (epoch ms); the time of the ledger row. */
  at: number;
  state?: SandboxRecordState;
  stopAt?: number;
  endedAt?: number | null;
  details?: Record<string, unknown> | null;
  /** Tokens: negative debits (checked against the balance, 402), positive refunds. */
  ledgerDelta?: number;
  ledgerReason?: LedgerReason;
  /** Only apply when the record is currently in one of these states; else `conflict`. */
  expectStates?: SandboxRecordState[];
  /** Start of a new run (start, resume). */
  runStartedAt?: number;
  /** A paused sandbox's deletion time; null to clear it. */
  expiresAt?: number | null;
  /** New network settings (egress), replacing the record's. */
  network?: SandboxNetwork;
  /**
   * Where the paused sandbox keeps its memory (null clears it). Absent: kept while the
   * record stays `paused`, cleared when it leaves `paused`.
   */
  pausedMemory?: PauseMemory | null;
  /** The record's `reservedMinutes` after the update (a new run's), instead of the old less `ledgerDelta`. */
  reservedMinutes?: number;
  /**
   * Checked in the same transaction when the update moves the record into a state that
   * takes a concurrency slot (`concurrency`: the account's `creating`/`started`/`starting`
   * count, 403 `concurrency`; `maxSandboxes`: what the host holds, 503 `capacity`) or into
   * `paused` (`maxPaused`: the account's paused count, 403 `quota`).
   */
  limits?: { concurrency?: number; maxSandboxes?: number; maxPaused?: number };
  /**
   * Removes the record (and its mounts) in the same transaction, after the checks and the
   * ledger row: a create that never answered 201 leaves nothing but its ledger rows, or stays
   * as it was when the transaction fails.
   */
  remove?: boolean;
}

/** A snapshot image of an account, as stored. `creating` while the runtime makes it. */
export interface SnapshotRecord {
  accountId: string;
  name: string;
  state: 'creating' | 'ready';
  sizeBytes: number;
  baseImage: string;
  sandboxId: string;
  createdAt: number;
}

/** A build as the store keeps it (the wire form is made by `toWireBuild`). */
export interface BuildRecord {
  id: string;
  accountId: string;
  name: string;
  tag: string;
  /** More tags the result gets (E2B's `tags`). */
  extraTags: string[];
  state: BuildState;
  /** Who asked: sandboxd's own route or E2B's template door. */
  source: 'dockerfile' | 'e2b';
  createdAt: number;
  startedAt?: number;
  finishedAt?: number;
  stepsTotal: number;
  stepsDone: number;
  stepsCached: number;
  /** Config digest of the result, once ready. */
  digest?: string;
  sizeBytes?: number;
  error?: BuildFailure;
}

/** A ready template: `templates/<name>:<tag>` of an account. */
export interface TemplateRecord {
  accountId: string;
  name: string;
  tag: string;
  /** The runtime's ref of the image (`snapshot/<accountId>/...`, a cache layer). */
  driverRef: string;
  digest: string;
  sizeBytes: number;
  buildId: string;
  createdAt: number;
}

/** A build with what only the builds service reads: its plan while it waits or runs, its options, who runs it. */
export interface StoredBuild extends BuildRecord {
  /** The plan while `queued`/`building` (null for an E2B reservation not started yet, and once final). */
  plan: BuildPlan | null;
  /** Egress rules of its RUN steps (`allowDomains`); null: none. */
  allowDomains: string[] | null;
  noCache: boolean;
  /** Presence id of the server that accepted it and runs it; null once final. */
  holder: string | null;
}

/** A change of a build, applied atomically. Absent fields are left as they are. */
export interface BuildUpdate {
  state?: BuildState;
  startedAt?: number;
  finishedAt?: number;
  stepsTotal?: number;
  stepsDone?: number;
  stepsCached?: number;
  digest?: string;
  sizeBytes?: number;
  error?: BuildFailure;
  plan?: BuildPlan | null;
  noCache?: boolean;
  holder?: string | null;
  /** Only apply when the build is in one of these states; else `conflict` (nothing written). */
  expectStates?: BuildState[];
  /**
   * Template rows written in the same transaction (each replaces the row of its account,
   * name and tag): a build becomes `ready` together with its templates, or not at all.
   */
  templates?: TemplateRecord[];
}

/** One line of a build's log; `seq` from 0 without gaps per build. */
export interface BuildLogLine {
  seq: number;
  time: number;
  step?: number;
  stream: 'stdout' | 'stderr' | 'system';
  text: string;
}

/** What a build's log may hold: past it, one line (`cutText`) says the rest was cut, and later lines are dropped. */
export interface BuildLogCap {
  maxLines: number;
  maxBytes: number;
  cutText: string;
}

/** A cached build step's result: an image of the runtime (`driverRef`) keyed by the account and the step's key. */
export interface LayerRecord {
  accountId: string;
  key: string;
  driverRef: string;
  /** Key of the layer it was made on (null: on a base image). */
  parentKey: string | null;
  sizeBytes: number;
  createdAt: number;
  lastUsedAt: number;
}

/** A file tar an E2B client uploaded for an account's builds, kept on this server's disk. */
export interface UploadRecord {
  accountId: string;
  hash: string;
  path: string;
  sizeBytes: number;
  createdAt: number;
}

/** A secret of an account as stored: its value only as ciphertext (services/secrets-crypto.ts). */
export interface SecretRecord {
  accountId: string;
  name: string;
  ciphertext: string;
  description: string;
  /** 1 at creation, +1 at each change of the ciphertext by a new value. */
  version: number;
  createdAt: number;
  updatedAt: number;
}

/** A change of a secret; absent fields are left as they are. */
export interface SecretUpdate {
  /** A new value's ciphertext: `version` goes up by one. */
  ciphertext?: string;
  description?: string;
  updatedAt: number;
}

/** One injection the egress proxy made (or tried): a row of the audit trail. */
export interface InjectionRecord {
  /** Unique; ties of `at` are ordered by it. */
  id: string;
  accountId: string;
  sandboxId: string;
  secret: string;
  destination: string;
  method: string;
  status: number | null;
  error: string | null;
  at: number;
}

/** A page of an account's audit trail: newest first, strictly older than `before` (its `at` and `id`). */
export interface InjectionQuery {
  sandboxId?: string;
  secret?: string;
  limit: number;
  before?: { at: number; id: string };
}

/** One fixed-window counter: events counted so far, and when its window ends (epoch ms). */
export interface CounterWindow {
  count: number;
  resetAt: number;
}

/**
 * Fixed-window counters by key (the rate limits' state). A window starts with the first
 * event after the previous window of that key ended and lasts `windowMs`; a counter whose
 * window has ended (`resetAt <= now`) is as good as absent. Each call is atomic, so replicas
 * sharing one database share the counts. `now` is passed in (epoch ms), never read inside.
 */
export interface Counters {
  /** Counts one event for `key` at `now`; returns the count including it and the window's end. */
  hitCounter(key: string, windowMs: number, now: number): Promise<CounterWindow>;
  /** The live window of `key` at `now`, or null when there is none; changes nothing. */
  readCounter(key: string, now: number): Promise<CounterWindow | null>;
  /**
   * Takes back one event of `key`'s window that ends at `resetAt` (the window a hit was
   * counted in: `hitCounter`'s answer), for a reservation that turned out not to count, such
   * as a successful login's. Nothing when another window has replaced it: a release never
   * takes back an event of a window it was not counted in. Never below 0, never starts or
   * moves a window.
   */
  releaseCounter(key: string, resetAt: number): Promise<void>;
  /** Forgets `key` (a successful login clears its email's failures). */
  deleteCounter(key: string): Promise<void>;
  /** Removes the counters whose window ended at or before `now`; returns how many. */
  purgeCounters(now: number): Promise<number>;
}

/** What {@link Leases.acquireLease} found: whether the caller holds the lease now, who does, until when (epoch ms). */
export interface LeaseState {
  held: boolean;
  holder: string;
  expiresAt: number;
}

/**
 * Named leases with an expiry: at most one holder of a name at a time, across every process
 * on the database (the reaper's, so that one API replica reaps at a time). Each call is
 * atomic. `now` is passed in (epoch ms), never read inside.
 */
export interface Leases {
  /**
   * Takes lease `name` for `holder` until `now + ttlMs` when it is free or expired, renews it
   * when `holder` already has it, and otherwise changes nothing and reports who has it.
   */
  acquireLease(name: string, holder: string, ttlMs: number, now: number): Promise<LeaseState>;
  /** Gives the lease up if `holder` has it (another may take it at once); false when it did not. */
  releaseLease(name: string, holder: string): Promise<boolean>;
}

/**
 * Persistence of sandboxd. Every method is atomic; those that decide something (reserve,
 * update with a debit) take their decision inside one transaction. Errors are
 * `SandboxdError`s: `tokens`, `concurrency`, `conflict`, `not_found`.
 */
export interface Store extends Counters, Leases {
  // accounts
  createAccount(a: AccountRecord, grant: { tokens: number; reason: LedgerReason }): Promise<void>;
  getAccount(id: string): Promise<AccountRecord | null>;
  getAccountByEmail(email: string): Promise<AccountRecord | null>;
  listAccounts(): Promise<AccountRecord[]>;
  countAccounts(): Promise<number>;
  setAccountPlan(id: string, plan: string): Promise<void>;
  // sessions and one-time login links (token hashes only)
  createSession(s: { tokenHash: string; accountId: string; createdAt: number; expiresAt: number }): Promise<void>;
  getSession(tokenHash: string, now: number): Promise<{ accountId: string } | null>;
  deleteSession(tokenHash: string): Promise<void>;
  createLoginLink(l: { tokenHash: string; accountId: string; expiresAt: number }): Promise<void>;
  /** Marks the link used and returns its account, or null if unknown, used or expired. */
  consumeLoginLink(tokenHash: string, now: number): Promise<string | null>;
  // api keys
  createApiKey(k: ApiKeyRecord): Promise<void>;
  listApiKeys(accountId: string): Promise<ApiKeyRecord[]>;
  findApiKeyByHash(keyHash: string): Promise<ApiKeyRecord | null>;
  touchApiKey(id: string, at: number): Promise<void>;
  /** False when no such key of that account. */
  deleteApiKey(accountId: string, id: string): Promise<boolean>;
  // ledger
  addLedger(row: Omit<LedgerRow, 'id'>): Promise<number>;
  balance(accountId: string): Promise<number>;
  listLedger(accountId: string, page: PageRequest): Promise<Page<LedgerRow>>;
  // sandboxes
  /**
   * In one transaction: checks balance >= minutes (else `tokens`), live count
   * < concurrency (else `concurrency`), volume sizes (else `conflict`); then inserts
   * the record (state `creating`), the mounts, missing volumes and the debit row. Returns
   * the record as stored (mount sizes resolved, name possibly changed).
   */
  reserveSandbox(record: SandboxRecord, r: Reservation): Promise<SandboxRecord>;
  getSandbox(id: string): Promise<SandboxRecord | null>;
  /** A page of the account's sandboxes in `states`; with `metadata`, only those whose metadata has every pair. */
  listSandboxes(
    accountId: string,
    q: PageRequest & { states: SandboxRecordState[]; metadata?: Record<string, string> },
  ): Promise<Page<SandboxRecord>>;
  /** Every sandbox in one of `states`, any account (reaper). */
  listSandboxesByState(states: SandboxRecordState[]): Promise<SandboxRecord[]>;
  /** `started` sandboxes with stopAt <= now (reaper). */
  listExpired(now: number): Promise<SandboxRecord[]>;
  /** Applies `u` atomically; returns the new record. `not_found`, `conflict`, `tokens`. */
  updateSandbox(id: string, u: SandboxUpdate): Promise<SandboxRecord>;
  /**
   * Records, in one transaction, that sandbox `id` lives on `runner`, and so do the volumes
   * it mounts that live on no runner yet. Called before the runner creates it, so a record
   * never lacks the runner of a sandbox that exists. `not_found` (no such record);
   * `conflict` when the record names another runner already, or one of its volumes lives
   * on another runner (`details: {volume, runner}`): nothing changes then. Placing it again
   * on the same runner changes nothing.
   */
  placeSandbox(id: string, runner: string): Promise<void>;
  /** Removes the record and its mounts (ledger rows stay). */
  deleteSandbox(id: string): Promise<void>;
  /** `stopped`/`error` records that ended before `cutoff` (at most `limit`), oldest first. */
  listEnded(cutoff: number, limit: number): Promise<SandboxRecord[]>;
  /** `paused` records whose `expiresAt` is at or before `now` (reaper). */
  listPausedExpired(now: number): Promise<SandboxRecord[]>;
  countByState(): Promise<Record<SandboxRecordState, number>>;
  /** Sandboxes of the account taking a concurrency slot (`creating`, `started`, `starting`). */
  countLive(accountId: string): Promise<number>;
  /** Paused sandboxes of the account. */
  countPaused(accountId: string): Promise<number>;
  /** Sandboxes holding host resources (`creating`, `started`, `starting`, `paused`) of every account: what `maxSandboxes` counts. */
  countAllLive(): Promise<number>;
  // snapshots
  /**
   * Records snapshot `s` (state `creating`) unless the account has one of that name
   * (`conflict`) or its snapshots already use `quotaBytes` or more (`quota`).
   */
  beginSnapshot(s: SnapshotRecord, quotaBytes: number): Promise<void>;
  /**
   * Marks it `ready` with its size, unless the account's ready snapshots and it would pass
   * `quotaBytes` (`quota`, the row is left for the caller to remove).
   */
  finishSnapshot(accountId: string, name: string, sizeBytes: number, quotaBytes: number): Promise<SnapshotRecord>;
  getSnapshot(accountId: string, name: string): Promise<SnapshotRecord | null>;
  /** The account's snapshots (any state), newest first. */
  listSnapshots(accountId: string): Promise<SnapshotRecord[]>;
  /** Every snapshot of every account (start-up reconciliation). */
  listAllSnapshots(): Promise<SnapshotRecord[]>;
  /** False when there was none. */
  deleteSnapshot(accountId: string, name: string): Promise<boolean>;
  /** Bytes of the account's ready snapshots. */
  snapshotBytes(accountId: string): Promise<number>;
  // builds
  /** Inserts a new build (its id unused). */
  createBuild(b: StoredBuild): Promise<void>;
  getBuild(id: string): Promise<StoredBuild | null>;
  /** The account's builds, newest first; with `name`, of that template name only. */
  listBuilds(accountId: string, q: { name?: string; limit: number }): Promise<StoredBuild[]>;
  /** Every build in one of `states`, any account, oldest first (recovery, the queue). */
  listBuildsByState(states: BuildState[]): Promise<StoredBuild[]>;
  /** The account's builds in one of `states`. */
  countBuilds(accountId: string, states: BuildState[]): Promise<number>;
  /** Applies `u` atomically (and its templates); `not_found`, `conflict` (`expectStates`). */
  updateBuild(id: string, u: BuildUpdate): Promise<StoredBuild>;
  /** Removes the build and its log; false when there was none. */
  deleteBuild(id: string): Promise<boolean>;
  /**
   * Appends lines to the build's log, numbering them on from its last `seq`, within `cap`
   * (the line that says the log was cut is written once; lines after it are dropped).
   * Returns how many were written. `not_found` for an unknown build.
   */
  appendBuildLogs(id: string, lines: Array<Omit<BuildLogLine, 'seq'>>, cap: BuildLogCap): Promise<number>;
  /** Up to `limit` lines of the log from `seq` `from` on, in order. */
  listBuildLogs(id: string, from: number, limit: number): Promise<BuildLogLine[]>;
  // build cache layers
  getLayer(accountId: string, key: string): Promise<LayerRecord | null>;
  /** Inserts the layer or replaces the row of its account and key. */
  putLayer(l: LayerRecord): Promise<void>;
  /** Sets `lastUsedAt` (a cache hit). */
  touchLayer(accountId: string, key: string, at: number): Promise<void>;
  /** False when there was none. */
  deleteLayer(accountId: string, key: string): Promise<boolean>;
  /** The account's layers, least recently used first. */
  listLayers(accountId: string): Promise<LayerRecord[]>;
  /** Accounts that have layers. */
  listLayerAccounts(): Promise<string[]>;
  /** Bytes of the account's layers. */
  layerBytes(accountId: string): Promise<number>;
  // templates
  getTemplate(accountId: string, name: string, tag: string): Promise<TemplateRecord | null>;
  /** The account's templates by name, then tag; with `name`, its tags only. */
  listTemplates(accountId: string, q?: { name?: string }): Promise<TemplateRecord[]>;
  /** Removes `name:tag`, or every tag of `name` when `tag` is absent; returns how many went. */
  deleteTemplates(accountId: string, name: string, tag?: string): Promise<number>;
  // uploads (E2B's template files)
  /** Inserts the upload or replaces the row of its account and hash. */
  putUpload(u: UploadRecord): Promise<void>;
  getUpload(accountId: string, hash: string): Promise<UploadRecord | null>;
  deleteUpload(accountId: string, hash: string): Promise<boolean>;
  /** The account's uploads, oldest first (by createdAt, then hash). */
  listUploads(accountId: string): Promise<UploadRecord[]>;
  // volumes
  listVolumes(accountId: string): Promise<Array<VolumeRecord & { mountedBy: string[] }>>;
  getVolume(accountId: string, name: string): Promise<VolumeRecord | null>;
  createVolume(v: VolumeRecord): Promise<void>;
  /** `conflict` while a live sandbox mounts it; false when missing. */
  deleteVolume(accountId: string, name: string): Promise<boolean>;
  // secrets (values only as ciphertext)
  /**
   * Inserts a new secret unless the account has one of that name (`conflict`) or holds
   * `maxPerAccount` already (`quota`, `details: {quota: 'secrets', limit}`); nothing is
   * written then.
   */
  createSecret(s: SecretRecord, maxPerAccount: number): Promise<void>;
  getSecret(accountId: string, name: string): Promise<SecretRecord | null>;
  /** The account's secrets by name. */
  listSecrets(accountId: string): Promise<SecretRecord[]>;
  /** Every secret of every account (re-encryption with a new key), by account then name. */
  listAllSecrets(): Promise<SecretRecord[]>;
  /** Applies `u` atomically; the new record, or null when there is no such secret. */
  updateSecret(accountId: string, name: string, u: SecretUpdate): Promise<SecretRecord | null>;
  /**
   * Replaces the ciphertext of a secret by the same value under another key (re-encryption):
   * only while it still is `expected` (a value changed meanwhile is left alone: false).
   * `version` and `updatedAt` stay.
   */
  rewrapSecret(accountId: string, name: string, expected: string, ciphertext: string): Promise<boolean>;
  /** False when there was none. */
  deleteSecret(accountId: string, name: string): Promise<boolean>;
  // the secrets' audit trail
  /** Inserts the rows (ids unused) in one transaction. */
  addInjections(rows: InjectionRecord[]): Promise<void>;
  /** A page of the account's injections, newest first (`at`, then `id`, descending). */
  listInjections(accountId: string, q: InjectionQuery): Promise<InjectionRecord[]>;
  /**
   * Removes injections older than `cutoff` (`at <` it), and of each account all but its
   * `maxPerAccount` newest; returns how many went.
   */
  pruneInjections(cutoff: number, maxPerAccount: number): Promise<number>;
  // events
  addEvent(e: EventRecord): Promise<void>;
  listEvents(accountId: string, limit: number): Promise<EventRecord[]>;
  // misc
  getMeta(key: string): Promise<string | null>;
  setMeta(key: string, value: string): Promise<void>;
  /**
   * Sets `key` to `value` unless it already has a value, atomically, and returns the value
   * it holds then: of stores racing on one database, the first insert wins and every one of
   * them gets the winner's value back. For the secrets replicas share.
   */
  ensureMeta(key: string, value: string): Promise<string>;
  /** Resolves once the database answers a trivial query (readiness, `/readyz`); rejects otherwise. */
  ping(): Promise<void>;
  /** Releases the database (SQLite's handle, PostgreSQL's pool); idempotent. */
  close(): Promise<void>;
}
