/**
 * The code interpreter's JSON-lines kernels (images/code-interpreter/kernels/) run on the host:
 * fast, no server, no sandbox. JavaScript runs on the host's /usr/bin/node (else the test's
 * own node) with the repo's TypeScript (and TypeScript's parser for JavaScript: the host has no
 * Debian node-acorn; the sandbox suite covers acorn); bash on the host's python3 and bash.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { bashCases, javascriptCases, typescriptCases } from './kernel-cases.js';
import { type KernelClient, localKernel, streamText } from './kernel-driver.js';

const ROOT = resolve(fileURLToPath(import.meta.url), '../../../..');
const KERNELS = join(ROOT, 'images/code-interpreter/kernels');
const NODE = existsSync('/usr/bin/node') ? '/usr/bin/node' : process.execPath;
const TYPESCRIPT = `--typescript-module=${join(ROOT, 'node_modules/typescript')}`;
const PYTHON = ['/usr/bin/python3', '/usr/local/bin/python3'].find((p) => existsSync(p));
const BASH = existsSync('/bin/bash') || existsSync('/usr/bin/bash');
/** The bash kernel keeps its cells in a temp dir, which a killed kernel cannot remove: this one goes after the file. */
const KERNEL_TMP = mkdtempSync(join(tmpdir(), 'sandboxd-kernels-host-'));
const KERNEL_ENV = { ...process.env, TMPDIR: KERNEL_TMP };
after(() => rmSync(KERNEL_TMP, { recursive: true, force: true }));

function suite(name: string, argv: () => string[], cases: (k: () => KernelClient) => void, skip?: string | false) {
  describe(name, { timeout: 120_000, skip }, () => {
    let k: KernelClient;
    before(() => {
      k = localKernel(argv(), KERNEL_ENV);
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

/** Whether process `pid` exists (signal 0). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('bash kernel on the host: what a cell started ends with the kernel', {
  timeout: 60_000,
  skip: !PYTHON || !BASH ? 'no python3 or bash on this host' : false,
}, () => {
  // SIGKILL to the kernel's group is how the code server ends a kernel; SIGTERM to the kernel alone.
  for (const sig of ['SIGKILL', 'SIGTERM'] as const) {
    it(`a background job and the running command end when the kernel gets ${sig}${sig === 'SIGKILL' ? ' (its group)' : ''}`, async () => {
      const k = localKernel([PYTHON as string, join(KERNELS, 'bash-kernel.py')], KERNEL_ENV);
      try {
        const bg = Number(streamText(await k.run('sleep 600 & echo $!')).trim());
        assert.ok(bg > 0 && alive(bg), 'the background job runs');
        let fg = 0;
        await new Promise<void>((res) => {
          void k
            .run('sleep 601 & echo "pid $!"; wait', {
              onEvent: (ev) => {
                const m = ev.type === 'stdout' ? /pid (\d+)/.exec(ev.text ?? '') : null;
                if (m && !fg) {
                  fg = Number(m[1]);
                  if (sig === 'SIGKILL') process.kill(-(k.transport.pid as number), 'SIGKILL');
                  else void k.transport.signal(sig);
                  res();
                }
              },
            })
            .catch(() => {});
        });
        assert.ok(fg > 0);
        // Bounded: 100 polls of 100 ms.
        for (let i = 0; i < 100 && (alive(bg) || alive(fg)); i++) await sleep(100);
        assert.deepEqual([alive(bg), alive(fg)], [false, false], 'nothing of the cell outlives the kernel');
      } finally {
        await k.close();
      }
    });
  }
});
