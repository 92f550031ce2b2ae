/**
 * Image builds through the SDK and the `sbx` binary against the real server on the crun
 * runtime (SANDBOXD_E2E_RUNTIME=local; skipped otherwise): `images.build` of a directory (COPY of
 * nested files, a symlink kept, .dockerignore, RUN, ENV, WORKDIR) and a sandbox created from
 * the template; the unchanged rebuild all cached; an inline Dockerfile; a failing RUN as a
 * BuildError; an aborted build cancelled on the server; the log resumed from an offset; and
 * `sbx build`, `sbx builds`, `sbx templates`. Every build, template and layer image of the
 * account is removed afterwards.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { BuildError, type BuildLogEvent, type Sandbox, SandboxdClient } from '@sandboxd/sdk';
import { LocalDriver } from '../../packages/server/src/runtime/local/driver.js';
import { IMAGE, newAccount, RUNTIME, startServer, type Server } from './harness.js';
import { localOptions } from './local-runtime.js';

const SBX = resolve(fileURLToPath(import.meta.url), '../../../packages/cli/bin/sbx.js');

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

describe('image builds through the SDK and the CLI', {
  timeout: 600_000,
  // The fake runtime has no file operations (WORKDIR, COPY's owners): builds are the real runtime's.
  skip: RUNTIME !== 'local' && 'needs SANDBOXD_E2E_RUNTIME=local',
}, () => {
  let s: Server;
  let key = '';
  let client: SandboxdClient;
  let tmp = '';
  let home = '';
  const made: Sandbox[] = [];

  const sbx = (args: string[]): Promise<Run> =>
    new Promise((res, rej) => {
      const env: Record<string, string> = {};
      for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('SANDBOX_')) env[k] = v;
      Object.assign(env, { HOME: home, SANDBOX_API_URL: s.baseUrl, SANDBOX_API_KEY: key, NO_COLOR: '1' });
      delete env.XDG_CONFIG_HOME;
      const p = spawn(process.execPath, [SBX, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
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
  const ok = (r: Run) => assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);

  before(async () => {
    s = await startServer();
    key = (await newAccount(s, { tokens: 100_000 })).key;
    client = new SandboxdClient({ apiKey: key, apiUrl: s.baseUrl });
    tmp = mkdtempSync(join(tmpdir(), 'e2e-builds-sdk-'));
    home = join(tmp, 'home');
    mkdirSync(home);
    const ctx = join(tmp, 'ctx');
    mkdirSync(join(ctx, 'app/lib'), { recursive: true });
    writeFileSync(join(ctx, 'app/hello.txt'), 'hello from the context\n');
    writeFileSync(join(ctx, 'app/lib/deep.txt'), 'deep\n');
    writeFileSync(join(ctx, 'app/secret.key'), 'must not be copied\n');
    symlinkSync('hello.txt', join(ctx, 'app/link'));
    writeFileSync(join(ctx, '.dockerignore'), 'app/*.key\n');
    writeFileSync(
      join(ctx, 'Dockerfile'),
      [
        `FROM ${IMAGE}`,
        'ARG WHO=nobody',
        'ENV GREETING=hi',
        'COPY app /srv/app',
        'WORKDIR /srv/app',
        'RUN echo "built for $WHO" > /built.txt',
        '',
      ].join('\n'),
    );
  });
  after(async () => {
    for (const sb of made) await sb.delete().catch(() => {});
    if (client) {
      for (const t of await client.templates.list().catch(() => []))
        await client.templates.delete(t.name).catch(() => {});
      for (const b of await client.builds.list().catch(() => [])) await client.builds.delete(b.id).catch(() => {});
    }
    if (s) {
      await s.cleanup().catch(() => {});
      await s.kill('SIGTERM');
      // The cache's layer images live in the image store the test servers share.
      if (RUNTIME === 'local') {
        const driver = new LocalDriver(localOptions(s.dataDir));
        for (const img of await driver.listSnapshots().catch(() => []))
          await driver.deleteImage(img.ref).catch(() => {});
      }
      await s.stop();
    }
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  it('images.build of a directory: live log, ready; a sandbox from the template has its files, env and workdir', async () => {
    const lines: BuildLogEvent[] = [];
    let startedId = '';
    const b = await client.images.build({
      name: 'web',
      tag: 'v1',
      context: join(tmp, 'ctx'),
      buildArgs: { WHO: 'sdk' },
      onStart: (x) => {
        startedId = x.id;
      },
      onLog: (e) => lines.push(e),
    });
    assert.equal(b.state, 'ready', JSON.stringify(b));
    assert.equal(b.id, startedId);
    assert.equal(b.image, 'templates/web:v1');
    const texts = lines.filter((e) => e.type === 'log').map((e) => (e.type === 'log' ? e.text : ''));
    assert.ok(
      texts.some((t) => /^Step \d+\/\d+ : RUN echo/.test(t)),
      texts.join('\n'),
    );
    assert.deepEqual(lines.at(-1), { type: 'end', state: 'ready' });
    const seqs = lines.flatMap((e) => (e.type === 'log' ? [e.seq] : []));
    assert.deepEqual(
      seqs,
      seqs.map((_, i) => i),
      'every line once, in order',
    );
    assert.deepEqual(
      (await client.templates.list()).map((t) => t.image),
      ['templates/web:v1'],
    );

    const sb = await client.sandboxes.create({ image: b.image, timeoutMs: 300_000 });
    made.push(sb);
    const r = await sb.exec('cat /srv/app/hello.txt /srv/app/lib/deep.txt /built.txt');
    assert.equal(r.stdout, 'hello from the context\ndeep\nbuilt for sdk\n', r.stderr);
    const more = await sb.exec('readlink /srv/app/link; ls /srv/app; echo "$GREETING"; pwd');
    assert.equal(more.stdout, 'hello.txt\nhello.txt\nlib\nlink\nhi\n/srv/app\n', more.stderr);

    // The same build again: every step from the cache.
    const again = await client.images.build({
      name: 'web',
      tag: 'v1',
      context: join(tmp, 'ctx'),
      buildArgs: { WHO: 'sdk' },
    });
    assert.equal(again.state, 'ready');
    assert.equal(again.steps.cached, again.steps.total, JSON.stringify(again.steps));
  });

  it('an inline Dockerfile; a failing RUN is a BuildError naming the step; an aborted build is cancelled on the server', async () => {
    const inline = await client.images.build({
      name: 'inline',
      dockerfileText: `FROM ${IMAGE}\nRUN echo inline > /inline.txt\n`,
    });
    assert.equal(inline.state, 'ready');
    assert.equal(inline.image, 'templates/inline:latest');

    const e = await client.images
      .build({ name: 'broken', dockerfileText: `FROM ${IMAGE}\nRUN echo about to fail; exit 3\n` })
      .then(
        () => assert.fail('a failing RUN resolved'),
        (x: unknown) => x,
      );
    assert.ok(e instanceof BuildError, String(e));
    assert.equal(e.state, 'error');
    assert.equal(e.line, 2);
    assert.equal(e.exitCode, 3);
    assert.match(e.instruction ?? '', /RUN echo about to fail; exit 3/);
    assert.ok(!(await client.templates.list()).some((t) => t.name === 'broken'), 'no template of a failed build');

    const ac = new AbortController();
    let id = '';
    const p = client.images.build({
      name: 'slow',
      dockerfileText: `FROM ${IMAGE}\nRUN echo started; sleep 120\n`,
      signal: ac.signal,
      onStart: (x) => {
        id = x.id;
      },
      onLog: (l) => {
        if (l.type === 'log' && l.text.includes('started')) ac.abort(new Error('enough'));
      },
    });
    await assert.rejects(p, /enough/);
    assert.equal((await client.builds.get(id)).state, 'cancelled');

    // The log read again from an offset: the lines after it, the same ones.
    const all: BuildLogEvent[] = [];
    for await (const l of client.builds.logs(id)) all.push(l);
    const tail: BuildLogEvent[] = [];
    for await (const l of client.builds.logs(id, { offset: 2, follow: true })) tail.push(l);
    assert.deepEqual(tail.slice(0, -1), all.slice(2));
    assert.deepEqual(tail.at(-1), { type: 'end', state: 'cancelled' });
  });

  it('sbx build, sbx builds, sbx templates', async () => {
    const r = await sbx(['build', '-t', 'cli:v2', '--build-arg', 'WHO=cli', join(tmp, 'ctx')]);
    ok(r);
    assert.equal(r.stdout, 'templates/cli:v2\n');
    assert.match(r.stderr, /Step \d+\/\d+ : COPY app \/srv\/app/);
    assert.match(r.stderr, /✔ built templates\/cli:v2 in /);

    const sb = await client.sandboxes.create({ image: 'templates/cli:v2', timeoutMs: 300_000 });
    made.push(sb);
    assert.equal((await sb.exec('cat /built.txt')).stdout, 'built for cli\n');

    const fail = await sbx(['build', '-t', 'clifail', '-f', '-', join(tmp, 'ctx')]);
    // `-f -` reads stdin, which is empty here: the server refuses a Dockerfile without FROM.
    assert.equal(fail.code, 1);
    assert.match(fail.stderr, /^error: /m);

    const ls = await sbx(['builds']);
    ok(ls);
    assert.match(ls.stdout, /templates\/cli:v2 +ready/);
    const id = (await client.builds.list({ name: 'cli' }))[0].id;
    const logs = await sbx(['builds', 'logs', id, '-f']);
    ok(logs);
    assert.match(logs.stdout, /Step \d+\/\d+ : RUN echo/);
    assert.match(logs.stderr, new RegExp(`✔ build ${id} ready`));

    const t = await sbx(['templates']);
    ok(t);
    assert.match(t.stdout, /templates\/cli:v2 /);
    ok(await sbx(['templates', 'rm', 'cli:v2']));
    assert.ok(!(await client.templates.list()).some((x) => x.name === 'cli'));
    ok(await sbx(['builds', 'rm', id]));
    assert.ok(!(await client.builds.list()).some((x) => x.id === id));
  });
});
