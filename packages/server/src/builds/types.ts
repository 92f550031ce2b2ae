import type { Readable } from 'node:stream';
import type { BuildLogEvent } from '@sandboxd/protocol';
import type { AccountRecord, BuildRecord, TemplateRecord } from '../store/store.js';
import type { BuildPlan } from './plan.js';

export type { BuildRecord, TemplateRecord } from '../store/store.js';

/** What a build needs besides its plan. */
export interface BuildOptions {
  name: string;
  tag: string;
  extraTags?: string[];
  /** Domains RUN steps may reach (checked against the plan); default none. */
  allowDomains?: string[];
  /** Run every step, ignoring cached results (they are replaced). */
  noCache?: boolean;
}

/**
 * The builds service (services/builds.ts) as its front doors use it: sandboxd's routes
 * (http/routes/builds.ts) and E2B's template door (e2b/templates.ts). Errors are
 * SandboxdErrors: `validation` (a bad Dockerfile or argument: names the line), `not_found`,
 * `conflict` (a build in a state that forbids the call), `quota`.
 */
export interface BuildsApi {
  /**
   * sandboxd's door: spools `context` (a tar stream, gzip or not), reads the Dockerfile from
   * it (or `dockerfileText`), parses it with the build args and validates everything before
   * anything runs. Resolves with the `queued` build; it runs in the background.
   */
  createFromDockerfile(
    account: AccountRecord,
    o: BuildOptions & { dockerfile?: string; dockerfileText?: string; buildArgs?: Record<string, string> },
    context: Readable,
  ): Promise<BuildRecord>;
  /** Any door with a plan ready: a `queued` build that runs in the background. */
  start(
    account: AccountRecord,
    plan: BuildPlan,
    o: BuildOptions & { source: BuildRecord['source'] },
  ): Promise<BuildRecord>;
  /**
   * E2B's two-call start: reserves a `queued` build with no plan yet (`POST /v3/templates`);
   * {@link startReserved} gives it its plan. A reservation not started within an hour ends `error`.
   */
  reserve(account: AccountRecord, o: BuildOptions & { source: BuildRecord['source'] }): Promise<BuildRecord>;
  startReserved(
    account: AccountRecord,
    buildId: string,
    plan: BuildPlan,
    o?: { noCache?: boolean },
  ): Promise<BuildRecord>;
  get(accountId: string, buildId: string): Promise<BuildRecord>;
  /** Newest first. */
  list(accountId: string, o?: { name?: string; limit?: number }): Promise<BuildRecord[]>;
  /** Stops a queued or running build: it ends `cancelled`, its sandboxes deleted. `conflict` once final. */
  cancel(accountId: string, buildId: string): Promise<BuildRecord>;
  /** Forgets a final build and its logs (a running one is cancelled first); its template stays. */
  delete(accountId: string, buildId: string): Promise<void>;
  /**
   * The log from `offset` (a `seq`); with `follow`, new lines as they come and one `end`
   * line when the build is final (at once for a final build). Ends when `signal` aborts.
   */
  logs(
    accountId: string,
    buildId: string,
    o: { offset?: number; follow?: boolean; signal?: AbortSignal },
  ): AsyncIterable<BuildLogEvent>;
  /** E2B uploads: whether the account has a file tar of this hash. */
  hasUpload(accountId: string, hash: string): Promise<boolean>;
  /** Keeps an uploaded tar (gzip or not) under its hash for the account's builds. */
  putUpload(accountId: string, hash: string, body: Readable): Promise<void>;
  listTemplates(accountId: string, o?: { name?: string }): Promise<TemplateRecord[]>;
  /** `not_found` unless ready. */
  getTemplate(accountId: string, name: string, tag: string): Promise<TemplateRecord>;
  /** Every tag of `name` when `tag` is absent. `not_found` when none. Sandboxes made from it keep their files. */
  deleteTemplate(accountId: string, name: string, tag?: string): Promise<void>;
}
