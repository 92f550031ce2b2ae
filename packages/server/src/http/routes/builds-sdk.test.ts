/**
 * The SDK's builds against the real HTTP server (fastify, auth, the routes) over a socket,
 * with the in-memory BuildsApi playing the builder (test/fake-builds.ts): the context tar
 * the SDK packs reaches the service whole, the followed log arrives line by line and ends
 * the call, BuildError carries the failure, aborting cancels, another account sees nothing.
 * The real builder is tested end to end in test/e2e/builds*.test.ts.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { gunzipSync } from 'node:zlib';
import { BuildError, NotFoundError, SandboxdClient, ValidationError, type BuildLogEvent } from '@sandboxd/sdk';
import { BuildContext } from '../../builds/context.js';
import { FakeBuilds } from '../../../test/fake-builds.js';
import { makeTestApp, type TestApp } from '../../../test/app.js';

describe('SDK builds through the HTTP server', { timeout: 60_000 }, () => {
  let t: TestApp;
  let fake: FakeBuilds;
  let alice: SandboxdClient;
  let bob: SandboxdClient;
  let tmp = '';
  before(async () => {
    t = await makeTestApp();
    fake = new FakeBuilds();
    t.app.services.builds = fake;
    const base = await t.app.http.listen({ host: '127.0.0.1', port: 0 });
    alice = new SandboxdClient({ apiUrl: base, apiKey: (await t.newAccount()).key, maxRetries: 0 });
    bob = new SandboxdClient({ apiUrl: base, apiKey: (await t.newAccount()).key, maxRetries: 0 });
    tmp = mkdtempSync(join(tmpdir(), 'builds-sdk-'));
    mkdirSync(join(tmp, 'ctx/app'), { recursive: true });
    writeFileSync(join(tmp, 'ctx/Dockerfile'), 'FROM local/busybox:latest\nCOPY app /app\n');
    writeFileSync(join(tmp, 'ctx/app/big.bin'), Buffer.alloc(5 << 20, 3));
  });
  after(async () => {
    // fetch (undici) opens a spare connection after an aborted request and sends nothing on
    // it; node's server does not count such a connection idle, so closing would wait for its
    // 60 s headers timeout. Those are cut here (the server's close is not what this tests).
    const closing = t.close();
    t.app.http.server.closeAllConnections();
    await closing;
    rmSync(tmp, { recursive: true, force: true });
  });

  it('images.build: the packed context reaches the service whole; the log streams live; it resolves ready', async () => {
    const got: BuildLogEvent[] = [];
    let id = '';
    const b = await alice.images.build({
      name: 'web',
      tag: 'v1',
      context: join(tmp, 'ctx'),
      buildArgs: { V: '1' },
      onStart: (s) => {
        id = s.id;
        fake.log(id, 'Step 1/3 : FROM local/busybox:latest');
      },
      onLog: (e) => {
        got.push(e);
        // Each line is seen before the next is logged: the stream is live, not buffered.
        if (e.type === 'log' && e.seq === 0) fake.log(id, 'Step 2/3 : COPY app /app');
        if (e.type === 'log' && e.seq === 1) fake.finish(id, 'ready');
      },
    });
    assert.equal(b.state, 'ready');
    assert.equal(b.image, 'templates/web:v1');
    assert.deepEqual(
      got.map((e) => (e.type === 'log' ? e.text : e.type)),
      ['Step 1/3 : FROM local/busybox:latest', 'Step 2/3 : COPY app /app', 'end'],
    );
    const sent = fake.build(b.id);
    assert.deepEqual(sent.options.buildArgs, { V: '1' });
    const names = execFileSync('tar', ['-t'], { input: sent.context }).toString().trimEnd().split('\n');
    assert.deepEqual(names, ['Dockerfile', 'app/', 'app/big.bin']);
    assert.ok(
      execFileSync('tar', ['-xO', 'app/big.bin'], { input: sent.context, maxBuffer: 10 << 20 }).equals(
        Buffer.alloc(5 << 20, 3),
      ),
    );
    assert.deepEqual(
      (await alice.templates.list()).map((x) => x.image),
      ['templates/web:v1'],
    );
  });

  it('a compressed context is accepted; a failure is a BuildError; a bad query a ValidationError', async () => {
    const e = await alice.images
      .build({
        name: 'web',
        context: { Dockerfile: 'FROM local/busybox:latest\nRUN false\n' },
        compress: true,
        onStart: (s) =>
          fake.finish(s.id, 'error', {
            code: 400,
            kind: 'validation',
            message: 'Step 2/2 (line 2) RUN false: exit code 1',
            details: { step: 2, line: 2, instruction: 'RUN false', exitCode: 1 },
          }),
      })
      .then(
        () => assert.fail('resolved'),
        (x: unknown) => x,
      );
    assert.ok(e instanceof BuildError, String(e));
    assert.equal(e.exitCode, 1);
    assert.equal(e.instruction, 'RUN false');
    const last = [...fake.builds.values()].at(-1)!;
    assert.ok(
      execFileSync('tar', ['-t'], { input: gunzipSync(last.context) })
        .toString()
        .includes('Dockerfile'),
    );

    await assert.rejects(alice.builds.create({ name: 'Not-Valid', dockerfileText: 'FROM x' }), ValidationError);
  });

  it("the SDK's tar opens in the server's BuildContext: long and UTF-8 names, symlinks, an inline Dockerfile hidden from COPY", async () => {
    const dir = join(tmp, 'interop');
    const deep = `${'d'.repeat(90)}/${'e'.repeat(90)}`;
    mkdirSync(join(dir, deep), { recursive: true });
    mkdirSync(join(dir, 'logs'));
    writeFileSync(join(dir, deep, `${'f'.repeat(120)}.txt`), 'deep');
    writeFileSync(join(dir, 'grüße.txt'), 'hallo');
    writeFileSync(join(dir, 'logs/a.log'), 'noise');
    writeFileSync(join(dir, '.dockerignore'), 'logs\n');
    symlinkSync('../../etc/passwd', join(dir, 'escape'));
    const text = 'FROM local/busybox:latest\nCOPY . /app\n';
    const b = await alice.builds.create({ name: 'interop', context: dir, dockerfileText: text });
    const sent = fake.build(b.id);
    const spoolDir = join(tmp, 'spool');
    const ctx = await BuildContext.open(
      (async function* () {
        yield sent.context;
      })(),
      { spoolDir, maxBytes: 1 << 24, maxEntries: 1000 },
    );
    try {
      const name = sent.options.dockerfile!;
      assert.match(name, /^\.dockerfile\.[0-9a-f]{20}$/);
      assert.equal((await ctx.readFile(name, 1 << 20)).toString(), text, 'the builder reads the inline Dockerfile');
      const sel = await ctx.select(['.'], '/app/');
      const paths = sel.entries.map((e) => e.path).sort();
      // The context's own .dockerignore is copied, as docker does unless it lists itself.
      assert.deepEqual(paths, [
        '.dockerignore',
        'd'.repeat(90),
        deep,
        `${deep}/${'f'.repeat(120)}.txt`,
        'escape',
        'grüße.txt',
      ]);
      const link = sel.entries.find((e) => e.path === 'escape')!;
      assert.equal(link.type, 'symlink');
      assert.equal(link.target, '../../etc/passwd', 'kept as a link, never followed');
    } finally {
      await ctx.close();
    }
  });

  it('aborting a build in progress cancels it on the server; another account can neither see nor follow it', async () => {
    const ac = new AbortController();
    let id = '';
    const p = alice.images.build({
      name: 'slow',
      dockerfileText: 'FROM local/busybox:latest\nRUN sleep 100\n',
      signal: ac.signal,
      onStart: (s) => {
        id = s.id;
        fake.log(s.id, 'Step 2/2 : RUN sleep 100');
      },
      onLog: () => ac.abort(new Error('enough')),
    });
    await assert.rejects(p, /enough/);
    assert.equal(fake.build(id).rec.state, 'cancelled');

    await assert.rejects(bob.builds.get(id), NotFoundError);
    await assert.rejects(async () => {
      for await (const _ of bob.builds.logs(id, { follow: true })) break;
    }, NotFoundError);
    assert.equal((await bob.builds.list()).length, 0);
    assert.equal((await bob.templates.list()).length, 0);
  });
});
