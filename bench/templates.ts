/**
 * Image build (template) benchmark, real server (own process, local runtime), one small
 * Dockerfile of six steps (FROM local/debian:bookworm, ENV, WORKDIR, COPY, a RUN writing
 * BENCH_TEMPLATES_MIB MiB, a last RUN):
 *
 *   cold build        every step run (`noCache`), from the POST to the `end` line of the
 *                     followed log (what `sbx build` waits for)
 *   unchanged rebuild the same Dockerfile and context again: every step from the cache
 *   last step changed the last RUN changed (a new value each round): only it runs
 *   by hand (floor)   the same steps done by hand through the API in one sandbox: create,
 *                     exec mkdir, upload the file, exec both RUNs, snapshot, delete (a build
 *                     makes one sandbox and one snapshot per file-changing step instead)
 *
 * Rounds alternate the four in the same run. Env: BENCH_TEMPLATES_ROUNDS (default 5),
 * BENCH_TEMPLATES_MIB (default 4).
 */
import { randomBytes } from 'node:crypto';
import { Builds, DEBIAN, stopClean, withDockerfile } from '../test/e2e/builds-support.js';
import { newAccount, RUNTIME, startServer } from '../test/e2e/harness.js';
import { report, summarize, timeMs } from './stats.js';

if (RUNTIME !== 'local') throw new Error('run with SANDBOXD_E2E_RUNTIME=local (npm run bench sets it)');
const ROUNDS = Number(process.env.BENCH_TEMPLATES_ROUNDS ?? 5);
const MIB = Number(process.env.BENCH_TEMPLATES_MIB ?? 4);

const s = await startServer();
let b: Builds | undefined;
try {
  const account = await newAccount(s, { tokens: 10_000_000, plan: 'PRO' });
  b = new Builds(s, account.key);
  const builds = b;
  const appTxt = `app ${randomBytes(8).toString('hex')}\n`;
  const writeCmd = `head -c ${MIB * 1024 * 1024} /dev/urandom > /app/data.bin`;
  const dockerfile = (last: string) =>
    [
      `FROM ${DEBIAN}`,
      'ENV APP=/app',
      'WORKDIR /app',
      'COPY app.txt ./',
      `RUN ${writeCmd}`,
      `RUN echo ${last} > /app/version`,
      '',
    ].join('\n');

  /** One build, timed from the POST to the `end` line of its followed log; throws unless ready with `cached` steps from the cache. */
  const build = async (tag: string, last: string, o: { noCache?: boolean; cached: 'all' | 'none' | 'one-less' }) => {
    let steps = { total: 0, cached: 0 };
    const ms = await timeMs(async () => {
      const started = await builds.started(
        { name: 'bench', tag, noCache: o.noCache },
        withDockerfile(dockerfile(last), { 'app.txt': appTxt }),
      );
      const end = (await builds.logs(started.id, { follow: true })).at(-1);
      if (end?.type !== 'end' || end.state !== 'ready') throw new Error(`build ${started.id}: ${JSON.stringify(end)}`);
      steps = (await builds.get(started.id)).body.build.steps;
    });
    const want = { all: steps.total, none: 0, 'one-less': steps.total - 1 }[o.cached];
    if (steps.cached !== want) throw new Error(`${tag}: ${steps.cached} of ${steps.total} steps cached, want ${want}`);
    return ms;
  };

  /** The same steps by hand: one sandbox, exec, an upload, a snapshot. */
  const byHand = async (round: number) => {
    const key = account.key;
    return timeMs(async () => {
      const id = await builds.sandbox(DEBIAN, { env: { APP: '/app' } });
      const mk = await builds.sh(id, 'mkdir -p /app');
      if (mk.exitCode !== 0) throw new Error(mk.stderr);
      const up = await fetch(`${s.baseUrl}/api/v1/sandboxes/${id}/files/content?path=/app/app.txt`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${key}` },
        body: appTxt,
      });
      if (up.status !== 200 && up.status !== 201) throw new Error(`upload: ${up.status} ${await up.text()}`);
      for (const cmd of [writeCmd, `echo hand-${round} > /app/version`]) {
        const r = await builds.sh(id, cmd, { cwd: '/app' });
        if (r.exitCode !== 0) throw new Error(r.stderr);
      }
      const snap = await s.api('POST', `/api/v1/sandboxes/${id}/snapshot`, { key, body: { name: `hand${round}` } });
      if (snap.status !== 201) throw new Error(`snapshot: ${snap.text}`);
      await builds.deleteSandbox(id);
    });
  };

  // Warm-up (not counted): the image is unpacked and every code path loaded.
  await build('warm', 'warm', { noCache: true, cached: 'none' });
  await byHand(-1);
  const t = { cold: [] as number[], rebuild: [] as number[], changed: [] as number[], hand: [] as number[] };
  for (let r = 0; r < ROUNDS; r++) {
    const last = `v${r}-${randomBytes(4).toString('hex')}`;
    t.cold.push(await build(`cold${r}`, last, { noCache: true, cached: 'none' }));
    t.rebuild.push(await build(`same${r}`, last, { cached: 'all' }));
    t.changed.push(await build(`changed${r}`, `${last}-changed`, { cached: 'one-less' }));
    t.hand.push(await byHand(r));
  }
  const row = (measure: string, xs: number[]) => {
    const x = summarize(xs);
    return { measure, n: x.n, p50_ms: x.p50, p95_ms: x.p95, mean_ms: x.mean };
  };
  report(
    'templates',
    [
      row('cold build (6 steps, noCache)', t.cold),
      row('unchanged rebuild (all cached)', t.rebuild),
      row('last step changed', t.changed),
      row('by hand: exec + upload + snapshot', t.hand),
    ],
    {
      mib: MIB,
      rounds: ROUNDS,
      cold: summarize(t.cold),
      rebuild: summarize(t.rebuild),
      changed: summarize(t.changed),
      byHand: summarize(t.hand),
      rebuildOverHand: summarize(t.rebuild).p50 / summarize(t.hand).p50,
      changedOverHand: summarize(t.changed).p50 / summarize(t.hand).p50,
    },
  );
} finally {
  await stopClean(s, b ? [b] : []);
}
