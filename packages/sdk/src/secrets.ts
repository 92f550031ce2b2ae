/**
 * `client.secrets`: the account's secrets (values the egress proxy puts into a sandbox's
 * requests to the domains its injection rules name; the sandbox holds only a placeholder)
 * and their audit trail. A value is sent, never received: no answer carries it.
 * See docs/secrets.md.
 */
import type { HttpClient } from './http.js';
import type { SecretInfo, SecretInjectionInfo, SecretInjectionPage } from './types.js';

/** Filters and paging of {@link SecretsApi.injections}. */
export interface SecretInjectionQuery {
  /** Only the injections into this sandbox's requests. */
  sandboxId?: string;
  /** Only the injections of this secret. */
  secret?: string;
  /** Most entries in the page (the server caps it). */
  limit?: number;
  /** The `next` of the previous page: entries older than it. */
  before?: string;
}

/** What {@link SecretsApi.put} changes: a new `value`, a new `description`, or both. */
export interface SecretUpdate {
  /** Required when the secret does not exist yet. Printable ASCII, at most 8192 bytes. */
  value?: string;
  description?: string;
}

const path = (name: string) => `/api/v1/secrets/${encodeURIComponent(name)}`;

export class SecretsApi {
  constructor(private readonly http: HttpClient) {}

  /**
   * Creates secret `name` holding `value` (printable ASCII, at most 8192 bytes). Throws
   * ConflictError when it exists (use {@link put} to change it), ValidationError for a bad
   * name or value (the error never repeats the value), QuotaExceededError beyond 500 secrets.
   */
  async create(name: string, value: string, opts: { description?: string } = {}): Promise<SecretInfo> {
    const json = { name, value, ...(opts.description === undefined ? {} : { description: opts.description }) };
    return (await this.http.request<{ secret: SecretInfo }>('POST', '/api/v1/secrets', { json })).secret;
  }

  /** Every secret of the account (names and metadata, never values). */
  async list(): Promise<SecretInfo[]> {
    return (await this.http.request<{ secrets: SecretInfo[] }>('GET', '/api/v1/secrets')).secrets;
  }

  /** One secret's metadata (never its value); throws NotFoundError. */
  async get(name: string): Promise<SecretInfo> {
    return (await this.http.request<{ secret: SecretInfo }>('GET', path(name))).secret;
  }

  /**
   * Creates or changes secret `name`. A new value reaches every sandbox whose rules name the
   * secret before this resolves (its `version` goes up by one). `created` says which it was.
   * Throws ValidationError (a create without `value`, a bad name or value).
   */
  put(name: string, update: SecretUpdate): Promise<{ secret: SecretInfo; created: boolean }> {
    const json: SecretUpdate = {};
    if (update.value !== undefined) json.value = update.value;
    if (update.description !== undefined) json.description = update.description;
    return this.http.call('PUT', path(name), { json }, async (res) => ({
      secret: ((await res.json()) as { secret: SecretInfo }).secret,
      created: res.status === 201,
    }));
  }

  /** Sets secret `name` to `value`, creating it when absent (a {@link put} of the value). */
  async set(name: string, value: string, opts: { description?: string } = {}): Promise<SecretInfo> {
    return (await this.put(name, { value, description: opts.description })).secret;
  }

  /**
   * Deletes secret `name`: every sandbox whose rules name it stops injecting it before this
   * resolves (the rules stay, and inject again if a secret of that name is created later).
   * Throws NotFoundError.
   */
  async delete(name: string): Promise<void> {
    await this.http.request('DELETE', path(name));
  }

  /**
   * One page of the audit trail, newest first: each request the egress proxy put a secret
   * into (sandbox, secret, destination, method, upstream status or error, time). Pass the
   * page's `next` as `before` for the older ones.
   */
  injections(query: SecretInjectionQuery = {}): Promise<SecretInjectionPage> {
    return this.http.request<SecretInjectionPage>('GET', '/api/v1/secrets/injections', { query: { ...query } });
  }

  /** Every injection the query matches, newest first, page by page (at most `max`, default 10,000). */
  async *allInjections(
    query: Omit<SecretInjectionQuery, 'before'> = {},
    max = 10_000,
  ): AsyncGenerator<SecretInjectionInfo> {
    let before: string | undefined;
    let n = 0;
    for (;;) {
      const page = await this.injections({ ...query, before });
      for (const i of page.injections) {
        if (n++ >= max) return;
        yield i;
      }
      if (!page.next || page.injections.length === 0) return;
      before = page.next;
    }
  }
}
