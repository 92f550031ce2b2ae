/**
 * A newcomer with only the server's address: signs up in the console (headless Chromium),
 * walks the eight onboarding steps, and does literally what they show. The text of every
 * step's code blocks is read from the page (the API key made in step 4 included); the
 * commands run in one real shell (bash) in an empty folder, with the machine's own Node (the
 * first `node` on PATH once the project's Node 24 is taken off it: /usr/bin/node when there
 * is one) and its npm; hello.mjs is saved from step 7's block. `node hello.mjs` must greet.
 *
 * The npm registry is pointed at a closed port: installing the SDK from the server's
 * tarball must not need it. Local runtime only (the image of hello.mjs is
 * local/debian:bookworm, as on a fresh server); skipped with the reason where it cannot run.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { launch, type Browser } from './console-support.js';
import { startServer, type Server } from './harness.js';
import { localEnv, teardownLocal } from './local-runtime.js';
import { localUnavailable } from './proxy-support.js';
import { userPath, which } from './user-node.js';

const skip = localUnavailable();

/** A user's environment: nothing of this test run (npm's script variables, SANDBOX*, NODE_OPTIONS). */
function userEnv(tmp: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (/^(npm_|SANDBOX|NODE_OPTIONS$|NODE_PATH$)/i.test(k)) continue;
    env[k] = v;
  }
  return {
    ...env,
    PATH: userPath(),
    // No registry: the SDK must install from the server alone. npm still asks the registry
    // about the optional peer `ws` and carries on when it cannot; no retries keep that instant.
    npm_config_registry: 'http://127.0.0.1:9/',
    npm_config_fetch_retries: '0',
    npm_config_audit: 'false',
    npm_config_fund: 'false',
    npm_config_update_notifier: 'false',
    npm_config_cache: join(tmp, 'npm-cache'),
  };
}

/** Runs a bash script to its end (bounded); resolves with its exit code and output. */
function bash(script: string, o: { cwd: string; env: NodeJS.ProcessEnv }) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((res, rej) => {
    const p = spawn('bash', ['-c', script], { cwd: o.cwd, env: o.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (b) => (stdout += b));
    p.stderr.on('data', (b) => (stderr += b));
    const timer = setTimeout(() => p.kill('SIGKILL'), 300_000);
    p.on('error', rej);
    p.on('close', (code) => {
      clearTimeout(timer);
      res({ code, stdout, stderr });
    });
  });
}

describe('onboarding followed literally, with the Node of the machine (local runtime)', {
  skip: skip ?? false,
  timeout: 600_000,
}, () => {
  let s: Server | undefined;
  let b: Browser | undefined;
  let dataDir = '';
  let tmp = '';

  before(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'sandboxd-onboarding-'));
    dataDir = mkdtempSync(join(tmpdir(), 'sandboxd-e2e-onboarding-'));
    try {
      s = await startServer({ dataDir, env: { SANDBOXD_RUNTIME: 'local', ...localEnv(dataDir) } });
    } catch (e) {
      await teardownLocal(dataDir).catch(() => {});
      throw e;
    }
    b = await launch();
  });
  after(async () => {
    await b?.close();
    // The data dir is ours: stop keeps it, the host pieces of its sandboxes go, then the dir.
    await s?.stop({ keepData: true });
    if (dataDir) {
      await teardownLocal(dataDir);
      if (!process.env.SANDBOXD_E2E_KEEP) rmSync(dataDir, { recursive: true, force: true });
    }
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  it('signs up, reads the eight steps off the page and runs them in a shell: hello.mjs greets', async (t) => {
    const { page } = b!;
    const server = s!;
    await page.goto(`${server.baseUrl}/`);
    await page.getByRole('link', { name: 'Create one' }).click();
    await page.getByLabel('Email').fill(`newcomer-${Date.now()}@example.com`);
    await page.getByLabel('Password').fill('newcomer-password-1');
    await page.getByRole('button', { name: 'Create account' }).click();

    /** The text of each step's code blocks, as the page shows them. */
    const blocks: string[][] = [];
    for (let n = 1; n <= 8; n++) {
      await page.getByText(`Step ${n} of 8`).waitFor();
      if (n === 4) {
        await page.getByRole('button', { name: 'Create API key' }).click();
        await page.locator('.step-panel .code.secret pre').waitFor();
      }
      if (n === 6) await b!.shoot('onboarding-6-install');
      blocks[n] = (await page.locator('.step-panel .code pre').allTextContents()).map((t) => t.trim());
      if (n < 8) await page.getByRole('button', { name: 'Continue' }).click();
    }
    const [key] = blocks[4];
    assert.match(key, /^sk_[A-Za-z0-9]{40}$/);
    assert.deepEqual(blocks[5], [`export SANDBOX_API_KEY=${key}\nexport SANDBOX_API_URL=${server.baseUrl}`]);
    assert.deepEqual(blocks[6], [`npm install ${server.baseUrl}/sdk/sandboxd-sdk.tgz`]);
    for (const n of [2, 3, 5, 6, 7, 8]) assert.equal(blocks[n].length, 1, `step ${n} shows one code block`);

    // One terminal session, as a user would have it: steps 2, 3, 5 and 6 typed in, the
    // script of step 7 saved where the shell is, step 8 run there.
    const hello = join(tmp, 'hello-from-the-page.mjs');
    writeFileSync(hello, blocks[7][0]);
    const work = join(tmp, 'home');
    mkdirSync(work);
    const step = (n: number, text: string) => `echo '--- step ${n}' >&2\n${text}`;
    const script = [
      'set -e',
      step(2, blocks[2][0]),
      step(3, blocks[3][0]),
      step(5, blocks[5][0]),
      step(6, blocks[6][0]),
      step(7, `cp ${JSON.stringify(hello)} hello.mjs`),
      step(8, blocks[8][0]),
    ].join('\n');
    const env = userEnv(tmp);
    const plainNode = which('node', env.PATH!)!;
    const r = await bash(script, { cwd: work, env });
    const said = `exit ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`;
    assert.equal(r.code, 0, said);
    assert.match(r.stdout, /^Hello from sandboxd!$/m, said);

    // Step 3's claim held, with the machine's Node (not the project's Node 24 when there is another).
    const version = execFileSync(plainNode, ['--version']).toString().trim();
    assert.ok(r.stdout.split('\n').includes(version), `node --version printed ${version}: ${said}`);
    assert.ok(Number(/^v(\d+)/.exec(version)![1]) >= 20, version);
    t.diagnostic(`the shell's node: ${plainNode} (${version})`);

    // The SDK came from the server; the script cleaned up after itself.
    const installed = JSON.parse(
      readFileSync(join(work, 'sandboxd-hello/node_modules/@sandboxd/sdk/package.json'), 'utf8'),
    );
    assert.equal(installed.name, '@sandboxd/sdk');
    const id = /^deleted (sbx_[a-z2-7]{20})$/m.exec(r.stdout)?.[1];
    assert.ok(id, said);
    assert.equal((await server.api('GET', `/api/v1/sandboxes/${id}`, { key })).status, 404);
    assert.deepEqual(b!.errors, [], 'browser console errors');
  });
});
