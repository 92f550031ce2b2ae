/**
 * A newcomer with only the server's address: signs up in the console (headless Chromium),
 * walks the eight onboarding steps, and does literally what they show. The text of every
 * step's code blocks is read from the page (the API key made in step 4 included); the
 * commands run in one real shell (bash) in an empty folder, with the machine's own Node (the
 * first `node` on PATH once the project's Node 24 is taken off it: /usr/bin/node when there
 * is one) and its npm; hello.mjs is saved from step 7's block. `node hello.mjs` must greet.
 * Then the same on the Python tab, with Debian's python3: a venv, pip install of the wheel
 * the server hands out (its URL from step 6, which must answer 200 with a wheel), hello.py
 * saved from step 7; `python hello.py` must greet.
 *
 * The npm registry and pip's index are pointed at a closed port: installing the SDK from the
 * server must not need them (the Python SDK's dependencies come from Debian's packages).
 * Local runtime only (the image of the examples is local/debian:bookworm, as on a fresh
 * server); skipped with the reason where it cannot run.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { launch, type Browser } from './console-support.js';
import { startServer, type Server } from './harness.js';
import { localEnv, teardownLocal } from './local-runtime.js';
import { localUnavailable } from './proxy-support.js';
import { pythonUnavailable, pythonUserEnv } from './python-support.js';
import { userPath, which } from './user-node.js';

const skip = localUnavailable();
const ROOT = resolve(fileURLToPath(import.meta.url), '../../..');

/**
 * Walks the eight steps from the one shown (step 1) with Continue; `blocks[n]` is the text of
 * step n's code blocks, read after `at[n]` ran (what the user does there first).
 */
async function readSteps(page: Browser['page'], at: Record<number, () => Promise<void>> = {}): Promise<string[][]> {
  const blocks: string[][] = [];
  for (let n = 1; n <= 8; n++) {
    await page.getByText(`Step ${n} of 8`).waitFor();
    await at[n]?.();
    blocks[n] = (await page.locator('.step-panel .code pre').allTextContents()).map((t) => t.trim());
    if (n < 8) await page.getByRole('button', { name: 'Continue' }).click();
  }
  return blocks;
}

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
  /** The key made in step 4 of the first walk (the page keeps showing it on the other tab). */
  let accountKey = '';

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

    await page.getByText('Step 1 of 8').waitFor();
    assert.equal(await page.getByRole('tab', { name: 'JavaScript' }).getAttribute('aria-selected'), 'true');
    const blocks = await readSteps(page, {
      4: async () => {
        await page.getByRole('button', { name: 'Create API key' }).click();
        await page.locator('.step-panel .code.secret pre').waitFor();
      },
      6: () => b!.shoot('onboarding-6-install'),
    });
    const [key] = blocks[4];
    assert.match(key, /^sk_[A-Za-z0-9]{40}$/);
    accountKey = key;
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

  it("the Python tab: reads the steps off the page and runs them with Debian's python3: pip installs the server's wheel, hello.py greets", {
    skip: pythonUnavailable() ?? false,
  }, async (t) => {
    const { page } = b!;
    const server = s!;
    assert.ok(accountKey, 'the JavaScript walk made a key');
    // The page of the first walk, on its last step: the choice of language applies to every step.
    await page.getByText('node hello.mjs').waitFor();
    await page.getByRole('tab', { name: 'Python' }).click();
    assert.equal(await page.getByRole('tab', { name: 'Python' }).getAttribute('aria-selected'), 'true');
    assert.equal(await page.getByRole('tab', { name: 'JavaScript' }).getAttribute('aria-selected'), 'false');
    await page.getByText('python hello.py').waitFor();
    await page.getByRole('button', { name: /Welcome/ }).click();
    await page.getByText(/install the SDK for JavaScript \(TypeScript\) or Python/).waitFor();
    const blocks = await readSteps(page, { 6: () => b!.shoot('onboarding-6-install-python') });

    const wheelPath = (await server.api('GET', '/sdk/python', { key: null })).headers.get('location');
    assert.match(String(wheelPath), /^\/sdk\/sandboxd-\d+\.\d+\.\d+-py3-none-any\.whl$/);
    assert.deepEqual(blocks[2], [
      'mkdir sandboxd-hello && cd sandboxd-hello\npython3 -m venv --system-site-packages .venv\n. .venv/bin/activate',
    ]);
    assert.deepEqual(blocks[3], ['python --version']);
    assert.deepEqual(blocks[4], [accountKey]);
    assert.deepEqual(blocks[5], [`export SANDBOX_API_KEY=${accountKey}\nexport SANDBOX_API_URL=${server.baseUrl}`]);
    assert.deepEqual(blocks[6], [`pip install ${server.baseUrl}${wheelPath}`]);
    const helloPy = readFileSync(join(ROOT, 'examples/hello.py'), 'utf8');
    assert.equal(blocks[7][0], helloPy.replace(/^(#.*\n)+\n?/, '').trim(), 'step 7 is examples/hello.py');
    assert.deepEqual(blocks[8], ['python hello.py']);
    assert.equal(await page.getByRole('button', { name: /Verify Python/ }).count(), 1, 'step 3 is named for Python');

    // The pip URL of step 6 answers with the wheel.
    const pipUrl = blocks[6][0].replace(/^pip install /, '');
    const wheel = await fetch(pipUrl);
    assert.equal(wheel.status, 200);
    assert.equal(wheel.headers.get('content-type'), 'application/zip');
    assert.equal(
      wheel.headers.get('content-disposition'),
      `attachment; filename="${pipUrl.slice(pipUrl.lastIndexOf('/') + 1)}"`,
    );
    assert.equal(
      Buffer.from(await wheel.arrayBuffer())
        .subarray(0, 4)
        .toString('hex'),
      '504b0304',
    );

    // One terminal session with Debian's python3: steps 2, 3, 5 and 6 typed in, step 7's
    // script saved where the shell is, step 8 run there.
    const hello = join(tmp, 'hello-from-the-page.py');
    writeFileSync(hello, blocks[7][0]);
    const work = join(tmp, 'home-python');
    mkdirSync(work);
    const step = (n: number, text: string) => `echo '--- step ${n}' >&2\n${text}`;
    const script = [
      'set -e',
      step(2, blocks[2][0]),
      step(3, blocks[3][0]),
      step(5, blocks[5][0]),
      step(6, blocks[6][0]),
      step(7, `cp ${JSON.stringify(hello)} hello.py`),
      step(8, blocks[8][0]),
    ].join('\n');
    const r = await bash(script, { cwd: work, env: pythonUserEnv(work) });
    const said = `exit ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`;
    assert.equal(r.code, 0, said);
    assert.match(r.stdout, /^Hello from sandboxd!$/m, said);
    const version = /^Python 3\.(\d+)\.\d+$/m.exec(r.stdout);
    assert.ok(version && Number(version[1]) >= 10, `step 3's claim held: ${said}`);
    t.diagnostic(`the venv's python: 3.${version[1]}`);
    assert.match(r.stdout, /^Successfully installed sandboxd-/m, said);
    assert.ok(existsSync(join(work, 'sandboxd-hello/.venv/bin/python')), 'the venv is in the workspace');
    const id = /^deleted (sbx_[a-z2-7]{20})$/m.exec(r.stdout)?.[1];
    assert.ok(id, said);
    assert.equal((await server.api('GET', `/api/v1/sandboxes/${id}`, { key: accountKey })).status, 404);

    // The choice is kept in this browser; the tabs also answer the arrow keys.
    await page.reload();
    await page.getByText('python hello.py').waitFor();
    await page.getByRole('tab', { name: 'Python' }).focus();
    await page.keyboard.press('ArrowRight');
    await page.getByText('node hello.mjs').waitFor();
    assert.equal(await page.getByRole('tab', { name: 'JavaScript' }).getAttribute('aria-selected'), 'true');
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'onboarding-lang-javascript');
    assert.deepEqual(b!.errors, [], 'browser console errors');
  });
});
