/**
 * Test kit of image builds: hand-made build plans, small tar archives (a build context),
 * and an app on the local runtime (its own bridge, subnet, uid range, cgroup folder and data
 * dir) whose accounts build, with everything it made removed after.
 */
import assert from 'node:assert/strict';
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import type { SandboxdError } from '@sandboxd/protocol';
import { buildApp, type Sandboxd } from '../src/app.js';
import type {
  BuildPlan,
  ConfigStep,
  CopyStep,
  ImageConfig,
  RunStep,
  Stage,
  Step,
  WorkdirStep,
} from '../src/builds/plan.js';
import { loadConfig, type Config, type PlanConfig, DEFAULT_PLANS } from '../src/config.js';
import { newAccountId } from '../src/domain/ids.js';
import type { LocalDriver, LocalDriverOptions } from '../src/runtime/local/driver.js';
import { SqliteStore } from '../src/store/sqlite/store.js';
import type { AccountRecord, BuildRecord, Store } from '../src/store/store.js';
import { makeTestDriver, TEST_IMAGE_DIR } from './local-driver.js';
import { hostSnapshot, type HostSnapshot } from '../src/runtime/local/rootfs/mounts.js';
import { removeAndCheckLeaks } from './local-driver.js';

let line = 1;
/** A RUN step of shell `cmd`. */
export const run = (cmd: string, args: Record<string, string> = {}): RunStep => ({
  kind: 'run',
  line: ++line,
  text: `RUN ${cmd}`,
  argv: ['/bin/sh', '-c', cmd],
  args,
});
/** A RUN step of exec form `argv`. */
export const exec = (argv: string[]): RunStep => ({
  kind: 'run',
  line: ++line,
  text: `RUN ${JSON.stringify(argv)}`,
  argv,
  args: {},
});
export const config = (set: Partial<ImageConfig>, text = `CONFIG ${JSON.stringify(set)}`): ConfigStep => ({
  kind: 'config',
  line: ++line,
  text,
  set,
});
export const workdir = (path: string): WorkdirStep => ({
  kind: 'workdir',
  line: ++line,
  text: `WORKDIR ${path}`,
  path,
});
export const copy = (sources: string[], dest: string, o: Partial<CopyStep> = {}): CopyStep => ({
  kind: 'copy',
  line: ++line,
  text: `COPY ${sources.join(' ')} ${dest}`,
  from: { kind: 'context' },
  sources,
  dest,
  ...o,
});
/** One stage from `ref` with `steps`. */
export const stage = (ref: string, steps: Step[], name?: string): Stage => ({
  line: ++line,
  base: { kind: 'image', ref },
  steps,
  ...(name ? { name } : {}),
});
/** A plan of `stages`, the last the target. */
export const plan = (...stages: Stage[]): BuildPlan => ({ stages, target: stages.length - 1 });

/** A ustar archive of `entries` (paths under 100 bytes). */
export function tarOf(
  entries: Array<{
    path: string;
    type?: 'file' | 'dir' | 'symlink';
    body?: string | Buffer;
    mode?: number;
    target?: string;
    uid?: number;
  }>,
): Buffer {
  const blocks: Buffer[] = [];
  for (const e of entries) {
    const type = e.type ?? 'file';
    const body = type === 'file' ? Buffer.from(e.body ?? '') : Buffer.alloc(0);
    const h = Buffer.alloc(512);
    h.write(e.path + (type === 'dir' && !e.path.endsWith('/') ? '/' : ''), 0, 100, 'utf8');
    const oct = (n: number, len: number) => `${n.toString(8).padStart(len - 1, '0')}\0`;
    h.write(oct(e.mode ?? (type === 'dir' ? 0o755 : 0o644), 8), 100);
    h.write(oct(e.uid ?? 1000, 8), 108);
    h.write(oct(e.uid ?? 1000, 8), 116);
    h.write(oct(body.length, 12), 124);
    h.write(oct(1_700_000_000, 12), 136);
    h.write('        ', 148);
    h.write(type === 'file' ? '0' : type === 'dir' ? '5' : '2', 156);
    if (e.target) h.write(e.target, 157, 100, 'utf8');
    h.write('ustar\0', 257);
    h.write('00', 263);
    let sum = 0;
    for (const b of h) sum += b;
    h.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
    blocks.push(h, body, Buffer.alloc((512 - (body.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

/** Fails when the image store holds an image made by `driver`'s instance (a snapshot or a layer it did not remove). */
export function assertNoImagesOf(driver: LocalDriver): void {
  const dir = join(TEST_IMAGE_DIR, 'by-digest');
  const left = readdirSync(dir).filter((d) => {
    try {
      return JSON.parse(readFileSync(join(dir, d, 'image.json'), 'utf8')).snapshot?.instance === driver.key;
    } catch {
      return false;
    }
  });
  assert.deepEqual(left, [], 'no image of the instance is left after destroyAll');
}

/** The config of a build test's app on `dataDir` over a driver of `options`, with `o.plans` beside the built-in ones. */
export function buildConfig(
  dataDir: string,
  options: LocalDriverOptions,
  o: { plans?: Record<string, Partial<PlanConfig>>; config?: Partial<Config> } = {},
): Readonly<Config> {
  const plans: Record<string, PlanConfig> = {};
  for (const [name, p] of Object.entries(o.plans ?? {})) plans[name] = { ...DEFAULT_PLANS.FREE, ...p } as PlanConfig;
  return loadConfig(
    {},
    {
      runtime: 'local',
      dataDir,
      dbPath: join(dataDir, 'sandboxd.db'),
      imageDir: options.imageDir,
      bridge: options.bridge,
      subnet: options.subnet,
      uidRangeStart: options.uidRangeStart,
      cgroupParent: options.cgroupParent,
      runDir: options.runDir,
      warmPool: [],
      minFreeMb: 0,
      createMinFreeMb: 0,
      createMinMemoryMb: 0,
      bootstrap: {},
      plans,
      ...o.config,
    },
  );
}

/** An account of `plan` with plenty of tokens, made in `store`. */
export async function newBuildAccount(store: Store, plan = 'FREE'): Promise<AccountRecord> {
  const a: AccountRecord = {
    id: newAccountId(),
    email: `${newAccountId()}@example.com`,
    passwordHash: null,
    plan,
    admin: false,
    createdAt: Date.now(),
  };
  await store.createAccount(a, { tokens: 100_000, reason: 'signup' });
  return a;
}

/** An app on the local runtime for build tests. */
export interface BuildApp {
  app: Sandboxd;
  /** The app's data dir (its builds' spools are below it). */
  dataDir: string;
  driver: LocalDriver;
  /** Sandboxes the driver was asked to create since the start (ids). */
  creates: string[];
  newAccount(plan?: string): Promise<AccountRecord>;
  /** Waits until build `id` of `account` is final (bounded). */
  waitFinal(account: AccountRecord, id: string, timeoutMs?: number): Promise<BuildRecord>;
  /** Waits until `pred` holds of the build (bounded). */
  waitFor(
    account: AccountRecord,
    id: string,
    pred: (b: BuildRecord) => boolean,
    timeoutMs?: number,
  ): Promise<BuildRecord>;
  /** Live sandbox records of step sandboxes of build `id`. */
  stepSandboxes(account: AccountRecord, id: string): Promise<string[]>;
  close(): Promise<void>;
}

/**
 * Starts an app over a fresh local driver (makeTestDriver) with SQLite in its data dir and
 * `plans` beside the built-in ones. `close()` deletes what the accounts made (templates,
 * layers, sandboxes), stops the app, removes every trace from the host and checks no mount or
 * loop device leaked.
 */
export async function startBuildApp(
  tag: string,
  o: { plans?: Record<string, Partial<PlanConfig>>; config?: Partial<Config> } = {},
): Promise<BuildApp> {
  const hostBefore: HostSnapshot = await hostSnapshot();
  const { driver, options, dataDir: base } = makeTestDriver(tag);
  const dataDir = join(base, 'data');
  mkdirSync(dataDir, { recursive: true });
  const config = buildConfig(dataDir, options, o);
  const creates: string[] = [];
  const create = driver.create.bind(driver);
  driver.create = async (spec) => {
    creates.push(spec.id);
    return create(spec);
  };
  const app = await buildApp({
    config,
    driver,
    store: new SqliteStore(config.dbPath),
    logger: pino({ level: process.env.SANDBOXD_TEST_LOG ?? 'silent' }),
  });
  await app.start();
  const accounts: AccountRecord[] = [];
  const waitFor: BuildApp['waitFor'] = async (account, id, pred, timeoutMs = 240_000) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const b = await app.services.builds.get(account.id, id);
      if (pred(b)) return b;
      if (Date.now() > deadline) throw new Error(`build ${id} stayed ${b.state}: ${JSON.stringify(b)}`);
      await sleep(100);
    }
  };
  return {
    app,
    dataDir,
    driver,
    creates,
    async newAccount(plan = 'FREE') {
      const a = await newBuildAccount(app.store, plan);
      accounts.push(a);
      return a;
    },
    waitFor,
    waitFinal: (account, id, timeoutMs) =>
      waitFor(account, id, (b) => ['ready', 'error', 'cancelled'].includes(b.state), timeoutMs),
    async stepSandboxes(account, id) {
      const page = await app.services.sandboxes.list(account.id, {
        limit: 100,
        'metadata.sandboxd.build': id,
      } as never);
      return page.items.map((r) => r.id);
    },
    async close() {
      try {
        for (const a of accounts) {
          for (const b of await app.services.builds.list(a.id)) {
            await app.services.builds.delete(a.id, b.id).catch((e: SandboxdError) => e);
          }
          for (const t of await app.services.builds.listTemplates(a.id))
            await app.services.builds.deleteTemplate(a.id, t.name, t.tag).catch(() => undefined);
          for (const l of await app.store.listLayers(a.id)) {
            await driver.deleteImage(l.driverRef).catch(() => undefined);
            await app.store.deleteLayer(a.id, l.key);
          }
          const page = await app.services.sandboxes.list(a.id, { limit: 100 });
          for (const r of page.items) await app.services.sandboxes.delete(a.id, r.id).catch(() => undefined);
        }
        // Layer images of these accounts that no row named (a test's strays).
        for (const img of await driver.listSnapshots())
          if (accounts.some((a) => img.ref.startsWith(`snapshot/${a.id}/`)))
            await driver.deleteImage(img.ref).catch(() => undefined);
      } finally {
        await app.close();
        await driver.destroyAll();
        await removeAndCheckLeaks(base, hostBefore);
        assertNoImagesOf(driver);
      }
    },
  };
}
