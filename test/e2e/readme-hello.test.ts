/**
 * The README's two hello-worlds, run as written: the code block that runs
 * `node examples/hello.mjs` and the one that installs the Python wheel into a venv and runs
 * `examples/hello.py`. Each block's command lines run in one bash, from the clone, as a user of
 * this machine (the machine's own node, Debian's python3 even where pyenv's comes first on
 * PATH, HOME in a temp dir so `~/` is there), with the key and the address exported as the README says; the only change to the
 * text is the server's address (`http://localhost:8080` becomes the test server's). Each
 * block's `# ...` lines are the expected output: every line must come, in order, with the ids
 * and names of the sandbox the run made; the sandbox is gone afterwards.
 *
 * pip's index is a closed port: the wheel comes from the server, its dependencies from
 * Debian. Local runtime only (the image is local/debian:bookworm, as on a fresh server).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { newAccount, startServer, type Server } from './harness.js';
import { localEnv, teardownLocal } from './local-runtime.js';
import { localUnavailable } from './proxy-support.js';
import { pythonUnavailable, pythonUserEnv } from './python-support.js';

const ROOT = resolve(fileURLToPath(import.meta.url), '../../..');
const README = readFileSync(join(ROOT, 'README.md'), 'utf8');

const skip = localUnavailable() ?? pythonUnavailable();

/** The README's fenced `sh` blocks. */
function shellBlocks(md: string): string[] {
  return [...md.matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
}

/** The one block that contains `marker`: its commands and its expected output (`# ` lines). */
function readmeBlock(marker: string): { commands: string[]; output: string[] } {
  const found = shellBlocks(README).filter((b) => b.includes(marker));
  assert.equal(found.length, 1, `one sh block of README.md contains ${marker}`);
  const lines = found[0].split('\n').filter((l) => l.trim() !== '');
  return {
    commands: lines.filter((l) => !l.startsWith('#')),
    output: lines.filter((l) => l.startsWith('# ')).map((l) => l.slice(2)),
  };
}

/** The expected output as patterns: the README's example ids and names stand for any. */
function outputPattern(line: string): RegExp {
  const escaped = line.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(
    `^${escaped.replace(/sbx_[a-z2-7]{20}/g, 'sbx_[a-z2-7]{20}').replace(/\\\([a-z]+-[a-z]+-\d+\\\)/g, '\\([a-z]+-[a-z]+-\\d+\\)')}$`,
  );
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

describe("the README's hello-worlds, as written (local runtime)", { skip: skip ?? false, timeout: 600_000 }, () => {
  let s: Server | undefined;
  let dataDir = '';
  let home = '';
  let key = '';

  before(async () => {
    home = mkdtempSync(join(tmpdir(), 'sandboxd-readme-home-'));
    dataDir = mkdtempSync(join(tmpdir(), 'sandboxd-e2e-readme-'));
    try {
      s = await startServer({ dataDir, env: { SANDBOXD_RUNTIME: 'local', ...localEnv(dataDir) } });
    } catch (e) {
      await teardownLocal(dataDir).catch(() => {});
      throw e;
    }
    key = (await newAccount(s)).key;
  });
  after(async () => {
    await s?.stop({ keepData: true });
    if (dataDir) {
      await teardownLocal(dataDir);
      if (!process.env.SANDBOXD_E2E_KEEP) rmSync(dataDir, { recursive: true, force: true });
    }
    if (home) rmSync(home, { recursive: true, force: true });
  });

  /** Runs a README block from the clone, key and address exported; checks its output against the block's. */
  const runAsWritten = async (marker: string) => {
    const server = s!;
    const block = readmeBlock(marker);
    assert.ok(block.output.length >= 4, `the block shows its output: ${block.output.join('\n')}`);
    const commands = block.commands.map((c) => c.replaceAll('http://localhost:8080', server.baseUrl));
    const script = [
      'set -e',
      `export SANDBOX_API_KEY=${key}`,
      `export SANDBOX_API_URL=${server.baseUrl}`,
      ...commands,
    ].join('\n');
    const r = await bash(script, { cwd: ROOT, env: pythonUserEnv(home) });
    const said = `${commands.join('\n')}\nexit ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`;
    assert.equal(r.code, 0, said);
    // The block's output lines, in order, among what the commands printed (pip prints too).
    const printed = r.stdout.split('\n');
    let at = 0;
    for (const want of block.output) {
      const re = outputPattern(want);
      while (at < printed.length && !re.test(printed[at])) at++;
      assert.ok(at < printed.length, `"${want}" printed after the lines before it\n${said}`);
      at++;
    }
    const created = /^created (sbx_[a-z2-7]{20}) \([a-z]+-[a-z]+-\d+\) from (\S+)$/m.exec(r.stdout);
    assert.ok(created, said);
    assert.equal(created[2], 'local/debian:bookworm');
    assert.match(r.stdout, new RegExp(`^deleted ${created[1]}$`, 'm'));
    assert.equal((await server.api('GET', `/api/v1/sandboxes/${created[1]}`, { key })).status, 404);
    return r;
  };

  it("JavaScript: `node examples/hello.mjs` from the clone with the machine's node", async () => {
    await runAsWritten('node examples/hello.mjs');
  });

  it("Python: a venv, pip install of the server's wheel (its version the current one), `examples/hello.py`", async () => {
    const { commands } = readmeBlock('examples/hello.py');
    // The wheel the server hands out now, by its stable URL's redirect.
    const wheel = (await s!.api('GET', '/sdk/python', { key: null })).headers.get('location') ?? '';
    const version = /^\/sdk\/sandboxd-(.+)-py3-none-any\.whl$/.exec(wheel)?.[1];
    assert.ok(version, wheel);
    assert.ok(
      commands.some((c) => c.includes(`http://localhost:8080${wheel}`)),
      `the README installs the server's current wheel (${wheel})`,
    );
    const r = await runAsWritten('examples/hello.py');
    assert.match(r.stdout, new RegExp(`Successfully installed sandboxd-${version.replaceAll('.', '\\.')}`));
    assert.ok(existsSync(join(home, 'sandboxd-venv/bin/python')), 'the venv is where the README puts it (~/)');
  });
});
