/**
 * The code interpreter's JSON-lines kernels in a real sandbox on the real runtime
 * (SANDBOXD_E2E_RUNTIME=local): the worktree's kernel files are uploaded with the files API
 * (so this tests them, not the copy baked into the image) and each kernel is a streamed exec
 * with stdin, interrupted with the processes API's SIGINT. JavaScript and TypeScript need
 * local/code-interpreter (Debian's node 18 and node-typescript); bash runs there too, or in
 * local/debian:bookworm while that image is not built.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { after, before, describe } from 'node:test';
import { fileURLToPath } from 'node:url';
import { ImageStore } from '../../../packages/server/src/runtime/local/images/store.js';
import { newAccount, RUNTIME, type Server, startServer } from '../harness.js';
import { TEST_IMAGE_DIR } from '../local-runtime.js';
import { bashCases, javascriptCases, typescriptCases } from './kernel-cases.js';
import { type KernelClient, sandboxKernel } from './kernel-driver.js';

const ROOT = resolve(fileURLToPath(import.meta.url), '../../../..');
const KERNELS = join(ROOT, 'images/code-interpreter/kernels');
const FILES = [
  'js-kernel.mjs',
  'js-kernel-main.mjs',
  'js-kernel-worker.mjs',
  'js-transform.mjs',
  'js-transform-acorn.mjs',
  'bash-kernel.py',
];
const DIR = '/tmp/sandboxd-kernels';
const CI_IMAGE = 'local/code-interpreter:latest';

const local = RUNTIME === 'local';
// Set-up builds the image: on the local runtime a missing one fails the suite, never skips it.
if (local)
  assert.ok(
    await new ImageStore({ dir: TEST_IMAGE_DIR }).has(CI_IMAGE),
    `no ${CI_IMAGE} in ${TEST_IMAGE_DIR} (scripts/setup.sh --test builds it)`,
  );
const noCi = local ? false : 'needs SANDBOXD_E2E_RUNTIME=local';

describe('code-interpreter kernels in a sandbox', {
  skip: local ? false : 'needs SANDBOXD_E2E_RUNTIME=local',
  timeout: 300_000,
}, () => {
  let s: Server;
  let key: string;
  const sandboxes = new Map<string, string>();

  /** fetch against /api/v1/sandboxes/{id} of the sandbox made from `image`. */
  const apiOf = (image: string) => (path: string, init: { method: string; body?: string; json?: unknown }) =>
    fetch(`${s.baseUrl}/api/v1/sandboxes/${sandboxes.get(image)}${path}`, {
      method: init.method,
      headers: {
        authorization: `Bearer ${key}`,
        ...(init.json !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      body: init.json !== undefined ? JSON.stringify(init.json) : init.body,
    });

  /** A sandbox of `image` with the worktree's kernels in DIR (made once per image). */
  async function sandbox(image: string) {
    if (!sandboxes.has(image)) {
      const c = await s.api('POST', '/api/v1/sandboxes', { key, body: { image } });
      assert.equal(c.status, 201, c.text);
      sandboxes.set(image, c.body.sandbox.id);
      const api = apiOf(image);
      const mk = await api('/files/mkdir', { method: 'POST', json: { path: DIR } });
      assert.ok(mk.status === 201 || mk.status === 409, `mkdir: ${mk.status}`);
      for (const f of FILES) {
        const put = await api(`/files/content?path=${encodeURIComponent(`${DIR}/${f}`)}&mode=0755`, {
          method: 'PUT',
          body: readFileSync(join(KERNELS, f), 'utf8'),
        });
        assert.equal(put.status, 200, `upload ${f}: ${await put.text()}`);
      }
    }
    return apiOf(image);
  }

  before(async () => {
    s = await startServer();
    key = (await newAccount(s, { tokens: 1_000_000 })).key;
  });
  after(() => s?.stop());

  function suite(
    name: string,
    image: string,
    command: string,
    cases: (k: () => KernelClient) => void,
    skip: string | false,
  ) {
    describe(name, { skip }, () => {
      let k: KernelClient;
      before(async () => {
        k = await sandboxKernel(await sandbox(image), command);
      });
      after(() => k?.close());
      cases(() => k);
    });
  }

  suite('JavaScript', CI_IMAGE, `exec node ${DIR}/js-kernel.mjs`, javascriptCases, noCi);
  suite(
    "JavaScript parsed with TypeScript's parser",
    CI_IMAGE,
    `exec node ${DIR}/js-kernel.mjs --parser=typescript`,
    javascriptCases,
    noCi,
  );
  suite('TypeScript', CI_IMAGE, `exec node ${DIR}/js-kernel.mjs --typescript`, typescriptCases, noCi);
  suite('bash', CI_IMAGE, `exec python3 ${DIR}/bash-kernel.py`, bashCases, false);
});
