/**
 * E2B SDK benchmark: the unchanged npm `e2b` package against sandboxd's own SDK, on the same
 * server, in the same run, the two taking turns round by round (absolute times on shared
 * machines drift; the ratio is the figure). Server: the real one (own process, local
 * runtime); image `local/debian:bookworm` for both (E2B's `base` template maps to it).
 *
 *   create->first command  E2B: `Sandbox.create({template: 'base'})` then
 *                          `commands.run('true')`; sandboxd: `Sandbox.create({image})` then
 *                          `exec('true')`. Timed from the create call to the command's result.
 *   run round trip         one sandbox each: `commands.run('echo hi')` (Connect server stream
 *                          through the envd door, `/bin/bash -l -c`) against sandboxd's
 *                          `exec('echo hi')` (one JSON request), interleaved.
 *   run round trip (sh)    the same through sandboxd's SDK but as `bash -l -c 'echo hi'`, the
 *                          command E2B's SDK really runs: the cost of the login shell alone.
 *
 * The E2B SDK reaches the server as documented (E2B_API_URL=<server>/e2b, E2B_SANDBOX_URL=
 * <server>, E2B_API_KEY=<a sandboxd key>). Env: BENCH_ROUNDS (default 5), BENCH_RUNS (50).
 */
import { Sandbox as E2bSandbox } from 'e2b';
import { Sandbox, SandboxdClient } from '../packages/sdk/src/index.js';
import { newAccount, RUNTIME, startServer } from '../test/e2e/harness.js';
import { report, summarize, timeMs } from './stats.js';

if (RUNTIME !== 'local') throw new Error('run with SANDBOXD_E2E_RUNTIME=local (npm run bench sets it)');
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const RUNS = Number(process.env.BENCH_RUNS ?? 50);
const IMAGE = 'local/debian:bookworm';

const s = await startServer();
try {
  const { key } = await newAccount(s, { tokens: 10_000_000 });
  process.env.E2B_API_URL = `${s.baseUrl}/e2b`;
  process.env.E2B_SANDBOX_URL = s.baseUrl;
  process.env.E2B_API_KEY = key;
  const client = new SandboxdClient({ apiKey: key, apiUrl: s.baseUrl });

  // Warm-up: the image is unpacked and both code paths are loaded before anything is timed.
  await (await E2bSandbox.create({ template: 'base' })).kill();
  await (await Sandbox.create({ image: IMAGE }, client)).delete();

  const createE2b: number[] = [];
  const createOwn: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    let e2b: E2bSandbox | undefined;
    createE2b.push(
      await timeMs(async () => {
        e2b = await E2bSandbox.create({ template: 'base' });
        await e2b.commands.run('true');
      }),
    );
    await e2b?.kill();
    let own: Sandbox | undefined;
    createOwn.push(
      await timeMs(async () => {
        own = await Sandbox.create({ image: IMAGE }, client);
        await own.exec('true');
      }),
    );
    await own?.delete();
  }

  const e2b = await E2bSandbox.create({ template: 'base' });
  const own = await Sandbox.create({ image: IMAGE }, client);
  const runE2b: number[] = [];
  const runOwn: number[] = [];
  const runOwnBash: number[] = [];
  try {
    for (let i = 0; i < RUNS; i++) {
      runE2b.push(await timeMs(() => e2b.commands.run('echo hi')));
      runOwn.push(await timeMs(() => own.exec('echo hi')));
      runOwnBash.push(await timeMs(() => own.exec("bash -l -c 'echo hi'")));
    }
  } finally {
    await e2b.kill();
    await own.delete();
  }

  const rows = [
    { what: 'create->first command', side: 'e2b SDK', ...ms(createE2b) },
    { what: 'create->first command', side: 'sandboxd SDK', ...ms(createOwn) },
    { what: 'run round trip', side: 'e2b SDK', ...ms(runE2b) },
    { what: 'run round trip', side: 'sandboxd SDK', ...ms(runOwn) },
    { what: 'run round trip (bash -l)', side: 'sandboxd SDK', ...ms(runOwnBash) },
  ];
  report('e2b', rows, {
    rounds: ROUNDS,
    runs: RUNS,
    createToFirstCommand: { e2b: summarize(createE2b), sandboxd: summarize(createOwn) },
    runRoundTrip: { e2b: summarize(runE2b), sandboxd: summarize(runOwn), sandboxdBashLogin: summarize(runOwnBash) },
    ratio: {
      createP50: summarize(createE2b).p50 / summarize(createOwn).p50,
      runP50: summarize(runE2b).p50 / summarize(runOwn).p50,
      runP50VsBashLogin: summarize(runE2b).p50 / summarize(runOwnBash).p50,
    },
  });
} finally {
  await s.stop();
}

function ms(samples: number[]): { n: number; 'p50 ms': number; 'p99 ms': number; 'mean ms': number } {
  const x = summarize(samples);
  return { n: x.n, 'p50 ms': x.p50, 'p99 ms': x.p99, 'mean ms': x.mean };
}
