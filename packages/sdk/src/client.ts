/**
 * `SandboxdClient`: one connection (server + credentials) with every resource of the API.
 */
import type { ClientOptions } from './config.js';
import { BuildsApi, TemplatesApi } from './builds.js';
import { HttpClient } from './http.js';
import { ImagesApi } from './images.js';
import { createSnapshot, type SnapshotOptions } from './lifecycle.js';
import { Sandbox } from './sandbox.js';
import { SecretsApi } from './secrets.js';
import type {
  AccountInfo,
  ApiKeyCreated,
  ApiKeyInfo,
  EventKind,
  SandboxCreateParams,
  SandboxListQuery,
  SnapshotInfo,
  VolumeInfo,
} from './types.js';

/** `client.sandboxes`: the static methods of {@link Sandbox}, bound to this client. */
export class SandboxesApi {
  constructor(private readonly client: { readonly http: HttpClient }) {}
  /** See {@link Sandbox.create}. */
  create(params: SandboxCreateParams): Promise<Sandbox> {
    return Sandbox.create(params, this.client);
  }
  /** See {@link Sandbox.get}. */
  get(id: string): Promise<Sandbox> {
    return Sandbox.get(id, this.client);
  }
  /** See {@link Sandbox.list}. */
  list(query: Pick<SandboxListQuery, 'state' | 'metadata'> = {}): Promise<Sandbox[]> {
    return Sandbox.list(query, this.client);
  }
  /** See {@link Sandbox.listPage}. */
  listPage(query: SandboxListQuery = {}): Promise<{ sandboxes: Sandbox[]; nextCursor?: string }> {
    return Sandbox.listPage(query, this.client);
  }
}

/** `client.volumes`: the account's named volumes. */
export class VolumesApi {
  constructor(private readonly http: HttpClient) {}
  async list(): Promise<VolumeInfo[]> {
    return (await this.http.request<{ volumes: VolumeInfo[] }>('GET', '/api/v1/volumes')).volumes;
  }
  /** Deletes a volume and its data. Throws NotFoundError, ConflictError while a running sandbox mounts it. */
  async delete(name: string): Promise<void> {
    await this.http.request('DELETE', `/api/v1/volumes/${encodeURIComponent(name)}`);
  }
}

/** `client.snapshots`: the account's snapshots (images `snapshots/<name>`); `sandbox.snapshot(name)` makes one. */
export class SnapshotsApi {
  constructor(private readonly http: HttpClient) {}
  /** Takes a snapshot of sandbox `sandboxId` without fetching it first. See {@link Sandbox.prototype.snapshot}. */
  create(sandboxId: string, name: string, opts: SnapshotOptions = {}): Promise<SnapshotInfo> {
    return createSnapshot(this.http, sandboxId, name, opts);
  }
  /** Every snapshot of the account, newest first. */
  async list(): Promise<SnapshotInfo[]> {
    return (await this.http.request<{ snapshots: SnapshotInfo[] }>('GET', '/api/v1/snapshots')).snapshots;
  }
  /** One snapshot by name; throws NotFoundError. */
  async get(name: string): Promise<SnapshotInfo> {
    return (await this.http.request<{ snapshot: SnapshotInfo }>('GET', `/api/v1/snapshots/${encodeURIComponent(name)}`))
      .snapshot;
  }
  /** Deletes a snapshot (sandboxes created from it keep running). Throws NotFoundError. */
  async delete(name: string): Promise<void> {
    await this.http.request('DELETE', `/api/v1/snapshots/${encodeURIComponent(name)}`);
  }
}

/** `client.account`: who you are, plan, token balance, limits, usage. */
export class AccountApi {
  constructor(private readonly http: HttpClient) {}
  get(): Promise<AccountInfo> {
    return this.http.request<AccountInfo>('GET', '/api/v1/account');
  }
}

/** `client.keys`: API keys of the account. */
export class KeysApi {
  constructor(private readonly http: HttpClient) {}
  /** Creates a key; the answer's `key` is shown this once. */
  create(name: string): Promise<ApiKeyCreated> {
    return this.http.request<ApiKeyCreated>('POST', '/api/v1/keys', { json: { name } });
  }
  /** Lists keys (prefix, name, dates; never the key). */
  async list(): Promise<ApiKeyInfo[]> {
    return (await this.http.request<{ keys: ApiKeyInfo[] }>('GET', '/api/v1/keys')).keys;
  }
  /** Revokes a key at once; throws NotFoundError. */
  async revoke(id: string): Promise<void> {
    await this.http.request('DELETE', `/api/v1/keys/${encodeURIComponent(id)}`);
  }
}

/** `client.events`: client-side onboarding events. */
export class EventsApi {
  constructor(private readonly http: HttpClient) {}
  /** Records `event` with `metadata` (at most 8 KiB as JSON). Throws ValidationError for an unknown kind. */
  async track(event: EventKind, metadata: Record<string, unknown> = {}): Promise<void> {
    await this.http.request('POST', '/api/v1/events/track', { json: { event, metadata } });
  }
}

/**
 * A client of one sandboxd server. Options default from `SANDBOX_API_KEY` and
 * `SANDBOX_API_URL` (see {@link ClientOptions}).
 *
 * ```ts
 * const client = new SandboxdClient();
 * const sandbox = await client.sandboxes.create({ image: 'local/debian:bookworm' });
 * ```
 */
export class SandboxdClient {
  readonly http: HttpClient;
  readonly sandboxes: SandboxesApi;
  readonly volumes: VolumesApi;
  readonly snapshots: SnapshotsApi;
  readonly account: AccountApi;
  readonly keys: KeysApi;
  readonly events: EventsApi;
  /** Template builds (`images.build({name, context})`, any account); the rest admin only. */
  readonly images: ImagesApi;
  /** The account's builds: list, get, logs, cancel, delete. */
  readonly builds: BuildsApi;
  /** The account's templates (`templates/<name>:<tag>`). */
  readonly templates: TemplatesApi;
  /** The account's secrets (write-only values injected by the egress proxy) and their audit trail. */
  readonly secrets: SecretsApi;

  constructor(options: ClientOptions = {}) {
    this.http = new HttpClient(options);
    this.sandboxes = new SandboxesApi(this);
    this.volumes = new VolumesApi(this.http);
    this.snapshots = new SnapshotsApi(this.http);
    this.account = new AccountApi(this.http);
    this.keys = new KeysApi(this.http);
    this.events = new EventsApi(this.http);
    this.builds = new BuildsApi(this.http);
    this.templates = new TemplatesApi(this.http);
    this.secrets = new SecretsApi(this.http);
    this.images = new ImagesApi(this.http, this.builds);
  }

  /** The server address in use, without a trailing slash. */
  get apiUrl(): string {
    return this.http.config.apiUrl;
  }
}
