/**
 * The sandbox lifecycle through the real `sbx` binary (a child process) against the real
 * server (fake runtime by default; SANDBOXD_E2E_RUNTIME=local for crun): create with
 * --metadata and --on-timeout, ls filters, pause/resume/stop/start once each, the one-line
 * error of a wrong state, snapshot, snapshots ls/rm and a sandbox from a snapshot.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { IMAGE, newAccount, startServer, type Server } from './harness.js';

const SBX = resolve(fileURLToPath(import.meta.url), '../../../packages/cli/bin/sbx.js');

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

describe('sbx lifecycle verbs against the real server', { timeout: 300_000 }, () => {
  let s: Server;
  let key: string;
  let home: string;
  const made: string[] = [];
  const snaps: string[] = [];
  const tag = `t${randomBytes(4).toString('hex')}`;

  /** Runs sbx to completion (bounded), with a fresh HOME and the account's key. */
  const sbx = (args: string[]): Promise<Run> =>
    new Promise((res, rej) => {
      const env: Record<string, string> = {};
      for (const [k, v] of Object.entries(process.env))
        if (v !== undefined && !k.startsWith('SANDBOX_') && k !== 'XDG_CONFIG_HOME' && k !== 'FORCE_COLOR') env[k] = v;
      Object.assign(env, { HOME: home, SANDBOX_API_URL: s.baseUrl, SANDBOX_API_KEY: key, NO_COLOR: '1' });
      const p = spawn(process.execPath, [SBX, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      p.stdout.on('data', (b) => (stdout += b));
      p.stderr.on('data', (b) => (stderr += b));
      const timer = setTimeout(() => p.kill('SIGKILL'), 120_000);
      p.on('error', rej);
      p.on('close', (code) => {
        clearTimeout(timer);
        res({ code, stdout, stderr });
      });
    });
  const ok = (r: Run) => {
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    return r.stdout;
  };
  const json = async (args: string[]) => JSON.parse(ok(await sbx(args)));
  const oneErrorLine = (r: Run, re: RegExp) => {
    assert.equal(r.code, 1, r.stdout);
    const lines = r.stderr.trimEnd().split('\n');
    assert.equal(lines.length, 1, r.stderr);
    assert.match(lines[0], /^error: /);
    assert.match(lines[0], re);
  };
  /** The state of a sandbox as the API says, not as sbx printed it. */
  const stateOf = async (id: string) => (await s.api('GET', `/api/v1/sandboxes/${id}`, { key })).body.sandbox.state;

  before(async () => {
    s = await startServer();
    key = (await newAccount(s, { tokens: 100_000 })).key;
    home = mkdtempSync(join(tmpdir(), 'sbx-lifecycle-home-'));
  });
  after(async () => {
    for (const id of made) await s?.api('DELETE', `/api/v1/sandboxes/${id}`, { key });
    for (const name of snaps) await s?.api('DELETE', `/api/v1/snapshots/${name}`, { key });
    await s?.stop();
    rmSync(home, { recursive: true, force: true });
  });

  it('create --metadata --on-timeout, ls --metadata/--state, pause, resume, stop, start; a wrong state is one error line', async () => {
    const id = ok(
      await sbx([
        'create',
        '-q',
        '--image',
        IMAGE,
        '-m',
        `suite=${tag}`,
        '--metadata',
        'role=cli',
        '--on-timeout',
        'pause',
      ]),
    ).trim();
    made.push(id);
    const other = ok(await sbx(['create', '-q', '--image', IMAGE, '-m', `suite=${tag}`, '-m', 'role=other'])).trim();
    made.push(other);

    const mine = await json(['ls', '--json', '--metadata', `suite=${tag}`, '--metadata', 'role=cli']);
    assert.deepEqual(
      mine.map((x: { id: string }) => x.id),
      [id],
    );
    assert.deepEqual(mine[0].metadata, { suite: tag, role: 'cli' });
    assert.equal(mine[0].onTimeout, 'pause');
    const both = await json(['ls', '--json', '--metadata', `suite=${tag}`]);
    assert.deepEqual(new Set(both.map((x: { id: string }) => x.id)), new Set([id, other]));
    const table = ok(await sbx(['ls', '--metadata', `suite=${tag}`]));
    assert.match(table, /^ID +NAME +STATE +IMAGE +ISOLATION +CREATED +STOPS +EXPIRES +METADATA\n/);
    assert.match(table, new RegExp(`${id} .* started .* pause in \\d+m .*suite=${tag}, role=cli`));

    assert.match(ok(await sbx(['pause', id])), new RegExp(`^${id} paused`));
    assert.equal(await stateOf(id), 'paused');
    const paused = await json(['ls', '--json', '--state', 'paused', '--metadata', `suite=${tag}`]);
    assert.deepEqual(
      paused.map((x: { id: string }) => x.id),
      [id],
    );
    assert.match(ok(await sbx(['ls', '--state', 'paused'])), new RegExp(`${id} +\\S+ +paused `));
    oneErrorLine(await sbx(['pause', id]), /paused/);
    assert.equal(await stateOf(id), 'paused');

    assert.match(
      ok(await sbx(['resume', '--timeout', '5m', id])),
      new RegExp(`^${id} started; pauses at \\S+ \\(in [45]m\\)`),
    );
    assert.equal(await stateOf(id), 'started');
    assert.match(ok(await sbx(['stop', id])), new RegExp(`^${id} stopped; root layer kept`));
    assert.equal(await stateOf(id), 'stopped');
    oneErrorLine(await sbx(['resume', id]), /stopped/);
    const started = await json(['start', '--json', '-t', '2m', id]);
    assert.equal(started.state, 'started');
    assert.equal(await stateOf(id), 'started');
    assert.equal(ok(await sbx(['exec', id, '--', 'echo back'])), 'back\n');
    oneErrorLine(await sbx(['start', id]), /started/);
  });

  it('snapshot ID NAME, snapshots (table and --json), a sandbox from it, snapshots rm', async () => {
    const id = ok(await sbx(['create', '-q', '--image', IMAGE])).trim();
    made.push(id);
    ok(await sbx(['exec', id, '--', 'echo from-snapshot > /lifecycle-cli.txt']));
    const name = `${tag}-cli`;
    const out = ok(await sbx(['snapshot', id, name]));
    snaps.push(name);
    assert.match(
      out,
      new RegExp(
        `^Snapshot ${name} of ${id} \\(.+ over ${IMAGE.replace(/[.]/g, '\\.')}\\)\\n  image  snapshots/${name}\\n$`,
      ),
    );

    const table = ok(await sbx(['snapshots']));
    assert.match(table, /^NAME +IMAGE +SIZE +BASE IMAGE +FROM +CREATED\n/);
    assert.match(table, new RegExp(`^${name} +snapshots/${name} +.+ +${id} `, 'm'));
    const list = await json(['snapshots', 'ls', '--json']);
    const mine = list.find((x: { name: string }) => x.name === name);
    assert.equal(mine.image, `snapshots/${name}`);
    assert.equal(mine.sandboxId, id);

    const copy = ok(await sbx(['create', '-q', '--image', `snapshots/${name}`])).trim();
    made.push(copy);
    assert.equal(ok(await sbx(['exec', copy, '--', 'cat /lifecycle-cli.txt'])), 'from-snapshot\n');

    assert.equal(ok(await sbx(['snapshots', 'rm', name])), `Deleted snapshot ${name}\n`);
    assert.ok(!(await json(['snapshots', '--json'])).some((x: { name: string }) => x.name === name));
    const again = await sbx(['snapshots', 'rm', name]);
    assert.equal(again.code, 1);
    assert.match(again.stderr, new RegExp(`^error: ${name}: .+\\nerror: 1 of 1 snapshot\\(s\\) not deleted\\n$`));
    oneErrorLine(await sbx(['snapshot', id, 'Bad Name']), /./);
  });
});
