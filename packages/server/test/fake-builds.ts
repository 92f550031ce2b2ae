/**
 * An in-memory BuildsApi (builds/types.ts) for the tests of its doors (the HTTP routes, the
 * SDK and the CLI through them): it keeps what each call was given, and the test plays the
 * builder, appending log lines and ending builds by hand. Nothing runs.
 */
import type { Readable } from 'node:stream';
import {
  FINAL_BUILD_STATES,
  SandboxdError,
  type BuildFailure,
  type BuildLogEvent,
  type BuildState,
} from '@sandboxd/protocol';
import type { BuildOptions, BuildRecord, BuildsApi, TemplateRecord } from '../src/builds/types.js';
import type { AccountRecord } from '../src/store/store.js';

type LogLine = Extract<BuildLogEvent, { type: 'log' }>;
type CreateOptions = Parameters<BuildsApi['createFromDockerfile']>[1];

interface FakeBuild {
  rec: BuildRecord;
  logs: LogLine[];
  /** The context's bytes as received. */
  context: Buffer;
  options: CreateOptions;
}

export class FakeBuilds implements BuildsApi {
  readonly builds = new Map<string, FakeBuild>();
  readonly templates: TemplateRecord[] = [];
  /** Log iterations that ended because their signal aborted (the client went). */
  abortedFollows = 0;
  /** Log iterations under way. */
  openFollows = 0;
  /** When set, createFromDockerfile throws it after reading the context. */
  refuseWith: SandboxdError | null = null;
  private n = 0;
  private wake = new Set<() => void>();
  private now = Date.UTC(2030, 0, 1);

  async createFromDockerfile(account: AccountRecord, o: CreateOptions, context: Readable): Promise<BuildRecord> {
    const chunks: Buffer[] = [];
    for await (const c of context) chunks.push(c as Buffer);
    if (this.refuseWith) throw this.refuseWith;
    const id = `bld_fake${String(++this.n).padStart(12, '0')}`;
    const rec: BuildRecord = {
      id,
      accountId: account.id,
      name: o.name,
      tag: o.tag,
      extraTags: o.extraTags ?? [],
      state: 'queued',
      source: 'dockerfile',
      createdAt: this.now + this.n * 1000,
      stepsTotal: 3,
      stepsDone: 0,
      stepsCached: 0,
    };
    this.builds.set(id, { rec, logs: [], context: Buffer.concat(chunks), options: o });
    return { ...rec };
  }

  /** The build with id `id`, whoever owns it (for the test's own checks). */
  build(id: string): FakeBuild {
    const b = this.builds.get(id);
    if (!b) throw new Error(`no fake build ${id}`);
    return b;
  }

  /** Appends log lines (state `building`), waking followers. */
  log(id: string, ...texts: string[]): void {
    const b = this.build(id);
    b.rec.state = 'building';
    b.rec.startedAt ??= this.now;
    for (const text of texts)
      b.logs.push({
        type: 'log',
        seq: b.logs.length,
        time: new Date(this.now).toISOString(),
        step: 1,
        stream: 'stdout',
        text,
      });
    this.notify();
  }

  /** Ends a build. */
  finish(id: string, state: BuildState, error?: BuildFailure): void {
    const b = this.build(id);
    b.rec.state = state;
    b.rec.finishedAt = this.now + 60_000;
    if (state === 'ready') {
      b.rec.stepsDone = b.rec.stepsTotal;
      b.rec.digest = `sha256:${'a'.repeat(64)}`;
      b.rec.sizeBytes = 4096;
      this.templates.push({
        accountId: b.rec.accountId,
        name: b.rec.name,
        tag: b.rec.tag,
        driverRef: `snapshot/${b.rec.accountId}/_l.${'b'.repeat(64)}`,
        digest: b.rec.digest,
        sizeBytes: 4096,
        buildId: id,
        createdAt: b.rec.finishedAt,
      });
    }
    if (error) b.rec.error = error;
    this.notify();
  }

  /** Resolves at the next change (a line, an end); listeners are dropped as they fire. */
  changed(): Promise<void> {
    return new Promise((r) => this.wake.add(r));
  }

  private notify(): void {
    const w = [...this.wake];
    this.wake.clear();
    for (const f of w) f();
  }

  private own(accountId: string, buildId: string): FakeBuild {
    const b = this.builds.get(buildId);
    if (!b || b.rec.accountId !== accountId) throw new SandboxdError('not_found', `Build ${buildId} not found`);
    return b;
  }

  async get(accountId: string, buildId: string): Promise<BuildRecord> {
    return { ...this.own(accountId, buildId).rec };
  }

  async list(accountId: string, o: { name?: string; limit?: number } = {}): Promise<BuildRecord[]> {
    return [...this.builds.values()]
      .map((b) => b.rec)
      .filter((r) => r.accountId === accountId && (o.name === undefined || r.name === o.name))
      .sort((a, b) => b.createdAt - a.createdAt)
      .slice(0, o.limit ?? 100)
      .map((r) => ({ ...r }));
  }

  async cancel(accountId: string, buildId: string): Promise<BuildRecord> {
    const b = this.own(accountId, buildId);
    if (FINAL_BUILD_STATES.includes(b.rec.state))
      throw new SandboxdError('conflict', `Build ${buildId} is ${b.rec.state} already`, { state: b.rec.state });
    this.finish(buildId, 'cancelled');
    return { ...b.rec };
  }

  async delete(accountId: string, buildId: string): Promise<void> {
    const b = this.own(accountId, buildId);
    if (!FINAL_BUILD_STATES.includes(b.rec.state)) this.finish(buildId, 'cancelled');
    this.builds.delete(buildId);
    this.notify();
  }

  async *logs(
    accountId: string,
    buildId: string,
    o: { offset?: number; follow?: boolean; signal?: AbortSignal },
  ): AsyncIterable<BuildLogEvent> {
    const b = this.own(accountId, buildId);
    this.openFollows++;
    let aborted = false;
    const onAbort = () => {
      aborted = true;
      this.notify();
    };
    o.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      let i = o.offset ?? 0;
      for (;;) {
        while (i < b.logs.length) yield b.logs[i++];
        if (!o.follow) return;
        if (FINAL_BUILD_STATES.includes(b.rec.state)) {
          const end: BuildLogEvent = { type: 'end', state: b.rec.state };
          if (b.rec.error) end.error = b.rec.error;
          yield end;
          return;
        }
        if (aborted || o.signal?.aborted) {
          this.abortedFollows++;
          return;
        }
        await this.changed();
      }
    } finally {
      this.openFollows--;
      o.signal?.removeEventListener('abort', onAbort);
    }
  }

  async listTemplates(accountId: string, o: { name?: string } = {}): Promise<TemplateRecord[]> {
    return this.templates.filter((t) => t.accountId === accountId && (o.name === undefined || t.name === o.name));
  }

  async getTemplate(accountId: string, name: string, tag: string): Promise<TemplateRecord> {
    const t = this.templates.find((x) => x.accountId === accountId && x.name === name && x.tag === tag);
    if (!t) throw new SandboxdError('not_found', `Template ${name}:${tag} not found`);
    return t;
  }

  async deleteTemplate(accountId: string, name: string, tag?: string): Promise<void> {
    const hit = (t: TemplateRecord) =>
      t.accountId === accountId && t.name === name && (tag === undefined || t.tag === tag);
    if (!this.templates.some(hit))
      throw new SandboxdError('not_found', `Template ${name}${tag === undefined ? '' : `:${tag}`} not found`);
    for (let i = this.templates.length - 1; i >= 0; i--) if (hit(this.templates[i])) this.templates.splice(i, 1);
  }

  start(_a: AccountRecord, _p: unknown, _o: BuildOptions): Promise<BuildRecord> {
    return Promise.reject(new SandboxdError('unsupported', 'not in the fake'));
  }
  reserve(): Promise<BuildRecord> {
    return Promise.reject(new SandboxdError('unsupported', 'not in the fake'));
  }
  startReserved(): Promise<BuildRecord> {
    return Promise.reject(new SandboxdError('unsupported', 'not in the fake'));
  }
  hasUpload(): Promise<boolean> {
    return Promise.reject(new SandboxdError('unsupported', 'not in the fake'));
  }
  putUpload(): Promise<void> {
    return Promise.reject(new SandboxdError('unsupported', 'not in the fake'));
  }
}
