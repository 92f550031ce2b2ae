/**
 * The code interpreter's JSON-lines kernels (images/code-interpreter/kernels/) run on the host:
 * fast, no server, no sandbox. JavaScript runs on the host's /usr/bin/node (else the test's
 * own node) with the repo's TypeScript; bash runs on the host's python3 and bash.
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe } from 'node:test';
import { bashCases, javascriptCases, typescriptCases } from './kernel-cases.js';
import { type KernelClient, localKernel } from './kernel-driver.js';

const ROOT = resolve(fileURLToPath(import.meta.url), '../../../..');
const KERNELS = join(ROOT, 'images/code-interpreter/kernels');
const NODE = existsSync('/usr/bin/node') ? '/usr/bin/node' : process.execPath;
const TYPESCRIPT = `--typescript-module=${join(ROOT, 'node_modules/typescript')}`;
const PYTHON = ['/usr/bin/python3', '/usr/local/bin/python3'].find((p) => existsSync(p));
const BASH = existsSync('/bin/bash') || existsSync('/usr/bin/bash');

function suite(name: string, argv: () => string[], cases: (k: () => KernelClient) => void, skip?: string | false) {
  describe(name, { timeout: 120_000, skip }, () => {
    let k: KernelClient;
    before(() => {
      k = localKernel(argv());
    });
    after(() => k?.close());
    cases(() => k);
  });
}

suite('JavaScript kernel on the host', () => [NODE, join(KERNELS, 'js-kernel.mjs'), TYPESCRIPT], javascriptCases);
suite(
  'TypeScript kernel on the host',
  () => [NODE, join(KERNELS, 'js-kernel.mjs'), '--typescript', TYPESCRIPT],
  typescriptCases,
);
suite(
  'bash kernel on the host',
  () => [PYTHON as string, join(KERNELS, 'bash-kernel.py')],
  bashCases,
  !PYTHON ? 'no python3 on this host' : !BASH ? 'no bash on this host' : false,
);
