/**
 * The builds service on the real runtime (crun; SANDBOXD_E2E_RUNTIME=local, as npm test
 * runs it), with hand-made plans and Dockerfiles: steps and their effects, the cache,
 * failures, cancel, recovery after a crash, the cache's quota and collection, templates in
 * creates and their isolation between accounts. Everything made is removed after, and the
 * host is checked for leaked mounts and loop devices.
 */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { type BuildLogEvent, SandboxdError } from '@sandboxd/protocol';
import {
  type BuildApp,
  config,
  copy,
  exec,
  plan,
  run,
  stage,
  startBuildApp,
  tarOf,
  workdir,
} from '../../test/builds.js';
import { BuildContext } from '../builds/context.js';
import type { BuildPlan } from '../builds/plan.js';
import { layerRef } from '../domain/snapshots.js';
import type { AccountRecord } from '../store/store.js';
import type { BuildService } from './builds.js';

const BUSYBOX = 'local/busybox:latest';
const MiB = 2 ** 20;
const LOCAL = process.env.SANDBOXD_E2E_RUNTIME === 'local' && process.getuid?.() === 0;

describe('builds service on the local runtime', { skip: LOCAL ? false : 'needs SANDBOXD_E2E_RUNTIME=local' }, () => {
  let t: BuildApp;
  let builds: BuildService;
  before(async () => {
    t = await startBuildApp('builds', {
      plans: {
        // Layers of ~4 MiB: three fit; a fourth pushes the least recently used unused one out.
        CACHE13: { buildCacheBytes: 13 * MiB },
        TINY: { buildCacheBytes: MiB },
        NOEGRESS: { egress: 'none' },
      },
    });
    builds = t.app.services.builds as BuildService;
  });
  after(async () => {
    await t?.close();
  });

  /** Runs `cmd` in a new sandbox of `image` for `account`; its stdout. */
  async function inSandbox(account: AccountRecord, image: string, cmd: string): Promise<string> {
    const s = await t.app.services.sandboxes.create(account, { image });
    try {
      const r = await t.app.driver.exec(s.id, cmd, { timeoutMs: 30_000 });
      assert.equal(r.exitCode, 0, `${cmd}: ${r.stdout}${r.stderr}`);
      return r.stdout;
    } finally {
      await t.app.services.sandboxes.delete(account.id, s.id);
    }
  }

  /** The account's cache layers with an image (not the markers of config steps and bases). */
  const imageLayers = async (account: AccountRecord) =>
    (await t.app.store.listLayers(account.id)).filter((l) => l.driverRef !== '');

  async function logOf(account: AccountRecord, id: string): Promise<string> {
    const lines: string[] = [];
    for await (const e of builds.logs(account.id, id, {})) if (e.type === 'log') lines.push(e.text);
    return lines.join('\n');
  }

  const contextOf = (files: Parameters<typeof tarOf>[0]) =>
    BuildContext.open(Readable.from([tarOf(files)]), {
      spoolDir: `${t.dataDir}/spool`,
      maxBytes: 64 * MiB,
      maxEntries: 1000,
    });

  /** Builds `p` (with `files` as its context) for `account` and waits for the end. */
  async function build(
    account: AccountRecord,
    p: BuildPlan,
    name: string,
    o: { files?: Parameters<typeof tarOf>[0]; tag?: string; noCache?: boolean } = {},
  ) {
    const ctx = o.files ? await contextOf(o.files) : null;
    const b = await builds.startWith(
      account,
      p,
      { name, tag: o.tag ?? 'latest', noCache: o.noCache, source: 'dockerfile' },
      ctx,
    );
    return t.waitFinal(account, b.id);
  }

  const FILES = [
    { path: 'hello.txt', body: 'hi there\n' },
    { path: 'bin', type: 'dir' as const },
    { path: 'bin/run.sh', body: '#!/bin/sh\necho run\n', mode: 0o755 },
    { path: 'link', type: 'symlink' as const, target: 'hello.txt' },
  ];
  const effects = (last = 'echo one > /tmp/last') =>
    plan(
      stage(BUSYBOX, [
        config({ env: { GREETING: 'hello' } }),
        run(
          'echo "$GREETING from $ARG1" > /greeting && echo app:x:1234:1234::/home/app:/bin/sh >> /etc/passwd && echo app:x:1234: >> /etc/group',
          { ARG1: 'args' },
        ),
        workdir('/srv/app'),
        copy(['.'], '/srv/app/', { chown: 'app' }),
        exec(['sh', '-c', 'pwd > /srv/where; id -un >> /srv/where']),
        config({ user: 'app', labels: { 'org.example': 'yes' }, cmd: ['sh'] }),
        run(last),
      ]),
    );

  it('RUN, WORKDIR, config steps and COPY from a context make a template whose sandboxes see each effect; no step sandbox is left', async () => {
    const a = await t.newAccount();
    const creates = t.creates.length;
    const done = await build(a, effects(), 'web', { files: FILES, tag: 'v1' });
    assert.equal(done.state, 'ready', JSON.stringify(done.error));
    assert.deepEqual([done.stepsTotal, done.stepsDone, done.stepsCached], [8, 8, 0]);
    assert.match(done.digest ?? '', /^sha256:/);
    assert.ok((done.sizeBytes ?? 0) > 0);
    assert.equal(t.creates.length - creates, 5, 'one sandbox per file step (RUN, WORKDIR, COPY, RUN, RUN)');
    assert.deepEqual(await t.stepSandboxes(a, done.id), [], 'no step sandbox left');
    const [tpl] = await builds.listTemplates(a.id);
    assert.deepEqual([tpl.name, tpl.tag, tpl.buildId, tpl.digest], ['web', 'v1', done.id, done.digest]);
    const out = await inSandbox(
      a,
      'templates/web:v1',
      'cat /greeting /srv/where /tmp/last; echo "$GREETING"; pwd; id -un; ls -ln /srv/app | tail -n +2 | awk \'{print $1, $3, $9, $10, $11}\'; cat /srv/app/link',
    );
    assert.equal(
      out,
      [
        'hello from args',
        '/srv/app',
        'root',
        'one',
        'hello',
        '/srv/app',
        'app',
        'drwxr-xr-x 1234 bin  ',
        '-rw-r--r-- 1234 hello.txt  ',
        'lrwxrwxrwx 1234 link -> hello.txt',
        'hi there',
        '',
      ].join('\n'),
    );
    const log = await logOf(a, done.id);
    assert.match(log, /Step 1\/8 : FROM local\/busybox:latest/);
    assert.match(log, /Step 8\/8 : RUN echo one/);
    assert.match(log, /Successfully built templates\/web:v1/);
  });

  it('an unchanged rebuild takes every step from the cache (no sandbox); a changed last step reruns only it', async () => {
    const a = await t.newAccount();
    const first = await build(a, effects(), 'app', { files: FILES });
    assert.equal(first.state, 'ready', JSON.stringify(first.error));
    let creates = t.creates.length;
    const again = await build(a, effects(), 'app', { files: FILES });
    assert.equal(again.state, 'ready', JSON.stringify(again.error));
    assert.deepEqual([again.stepsDone, again.stepsCached], [8, 8], 'every step cached');
    assert.equal(t.creates.length, creates, 'no sandbox was made');
    assert.equal(again.digest, first.digest);
    assert.equal(again.sizeBytes, 0, 'no new layer');
    assert.match(await logOf(a, again.id), /CACHED/);
    creates = t.creates.length;
    const changed = await build(a, effects('echo two > /tmp/last'), 'app', { files: FILES });
    assert.equal(changed.state, 'ready', JSON.stringify(changed.error));
    assert.deepEqual([changed.stepsDone, changed.stepsCached], [8, 7]);
    assert.equal(t.creates.length - creates, 1, 'only the last step ran');
    assert.equal(await inSandbox(a, 'templates/app', 'cat /tmp/last'), 'two\n');
    // A changed file of the context reruns its COPY and what follows.
    creates = t.creates.length;
    const files = FILES.map((f) => (f.path === 'hello.txt' ? { ...f, body: 'changed\n' } : f));
    const edited = await build(a, effects('echo two > /tmp/last'), 'app', { files });
    assert.equal(edited.state, 'ready', JSON.stringify(edited.error));
    assert.equal(t.creates.length - creates, 3, 'COPY, RUN, RUN');
    assert.equal(await inSandbox(a, 'templates/app', 'cat /srv/app/hello.txt'), 'changed\n');
    // noCache runs every step again.
    creates = t.creates.length;
    const fresh = await build(a, effects('echo two > /tmp/last'), 'app', { files, noCache: true });
    assert.equal(fresh.state, 'ready', JSON.stringify(fresh.error));
    assert.equal(fresh.stepsCached, 0);
    assert.equal(t.creates.length - creates, 5);
  });

  it('a Dockerfile through createFromDockerfile: build args, stages, WORKDIR, COPY --from, --chmod, globs, .dockerignore, a start command', async () => {
    const a = await t.newAccount();
    const dockerfile = [
      'ARG BASE=local/busybox:latest',
      // biome-ignore lint/suspicious/noTemplateCurlyInString: a Dockerfile substitution
      'FROM ${BASE} AS build',
      'ARG WHO=world',
      'RUN echo "hello $WHO" > /hello',
      '',
      'FROM local/busybox:latest',
      'ENV APP=/opt/app',
      'WORKDIR $APP',
      'COPY --from=build /hello ./',
      'COPY --chmod=0640 src/ ./src/',
      'COPY *.txt ./',
      'LABEL org.sandboxd.start.cmd="echo started > /tmp/started"',
      'CMD ["sh"]',
    ].join('\n');
    const tar = tarOf([
      { path: 'Dockerfile', body: dockerfile },
      { path: '.dockerignore', body: 'secret.txt\n' },
      { path: 'src', type: 'dir' },
      { path: 'src/a.sh', body: 'echo a\n', mode: 0o755 },
      { path: 'readme.txt', body: 'read me\n' },
      { path: 'secret.txt', body: 'do not copy\n' },
    ]);
    const b = await builds.createFromDockerfile(
      a,
      { name: 'fromfile', tag: 'v2', buildArgs: { WHO: 'builder' } },
      Readable.from([tar]),
    );
    assert.equal(b.state, 'queued');
    const done = await t.waitFinal(a, b.id);
    assert.equal(done.state, 'ready', JSON.stringify(done.error));
    const out = await inSandbox(
      a,
      'templates/fromfile:v2',
      'cat hello readme.txt; stat -c "%a %n" src/a.sh; ls; echo "$APP"; sleep 0.5; cat /tmp/started',
    );
    assert.equal(out, 'hello builder\nread me\n640 src/a.sh\nhello\nreadme.txt\nsrc\n/opt/app\nstarted\n');
    assert.deepEqual(readdirSync(join(t.dataDir, 'builds', 'tmp')), [], 'the context spool went with the build');
  });

  it('a Dockerfile refused before anything runs: the line of what is unsupported, missing or not allowed; nothing made', async () => {
    const a = await t.newAccount('NOEGRESS');
    const refuse = async (
      dockerfile: string,
      o: { allowDomains?: string[]; files?: Parameters<typeof tarOf>[0] } = {},
    ) => {
      const tar = tarOf([{ path: 'Dockerfile', body: dockerfile }, ...(o.files ?? [])]);
      const e = await builds
        .createFromDockerfile(a, { name: 'refused', tag: 'latest', allowDomains: o.allowDomains }, Readable.from([tar]))
        .then(
          () => assert.fail('accepted'),
          (err: unknown) => err as SandboxdError,
        );
      assert.ok(e instanceof SandboxdError, String(e));
      return e;
    };
    let e = await refuse('FROM local/busybox:latest\nRUN true\nHEALTHCHECK CMD true\n');
    assert.equal(e.kind, 'validation');
    assert.match(e.message, /line 3/);
    e = await refuse('FROM local/busybox:latest\nRUN true\nFROM templates/missing\nRUN true\n');
    assert.equal(e.kind, 'template_not_found');
    assert.match(e.message, /Dockerfile line 3: FROM templates\/missing/);
    e = await refuse('FROM local/busybox:latest\nCOPY nothere.txt /x\n');
    assert.equal(e.kind, 'validation');
    assert.match(e.message, /Dockerfile line 2: COPY nothere.txt \/x: .*nothere.txt/);
    e = await refuse('FROM scratch\nCOPY a /a\n', { files: [{ path: 'a', body: 'a' }] });
    assert.match(e.message, /scratch is not supported/);
    e = await refuse('FROM local/busybox:latest\nRUN true\n', { allowDomains: ['pypi.org'] });
    assert.equal(e.kind, 'validation');
    assert.match(e.message, /allowDomains: .*plan/);
    e = await refuse('FROM local/busybox:latest\nRUN true\n', { allowDomains: ['not a domain!'] });
    assert.equal(e.kind, 'validation');
    e = await refuse('');
    assert.equal(e.kind, 'validation', 'an empty Dockerfile');
    const noDockerfile = await builds
      .createFromDockerfile(
        a,
        { name: 'refused', tag: 'latest' },
        Readable.from([tarOf([{ path: 'other', body: 'x' }])]),
      )
      .then(
        () => null,
        (err: SandboxdError) => err,
      );
    assert.match(noDockerfile?.message ?? '', /no file Dockerfile/);
    const badName = await builds.createFromDockerfile(a, { name: 'Bad Name', tag: 'latest' }, Readable.from([])).then(
      () => null,
      (err: SandboxdError) => err,
    );
    assert.equal(badName?.kind, 'validation');
    assert.deepEqual(await builds.list(a.id), [], 'no build was recorded');
    assert.deepEqual(readdirSync(join(t.dataDir, 'builds', 'tmp')), [], 'no spool is left');
  });

  it('a failing RUN ends the build error with its step, line, exit code and output; no template, no sandbox left', async () => {
    const a = await t.newAccount();
    const failing = run('echo about to fail; echo on stderr >&2; exit 3');
    const p = plan(stage(BUSYBOX, [run('echo ok > /ok'), failing, run('echo never')]));
    const done = await build(a, p, 'bad');
    assert.equal(done.state, 'error');
    assert.equal(done.error?.kind, 'validation');
    const d = done.error?.details as Record<string, unknown>;
    assert.equal(d.step, 3);
    assert.equal(d.line, failing.line);
    assert.equal(d.instruction, failing.text);
    assert.equal(d.exitCode, 3);
    assert.match(String(d.output), /about to fail\non stderr\n/);
    assert.match(done.error?.message ?? '', /non-zero code: 3/);
    assert.equal(done.stepsDone, 2, 'FROM and the first RUN');
    assert.deepEqual(await builds.listTemplates(a.id), []);
    assert.deepEqual(await t.stepSandboxes(a, done.id), []);
    assert.doesNotMatch(await logOf(a, done.id), /never|Successfully/);
    // An exec-form command that does not exist: 127, said so.
    const missing = await build(a, plan(stage(BUSYBOX, [exec(['no-such-command'])])), 'bad');
    assert.equal(missing.state, 'error');
    assert.equal((missing.error?.details as { exitCode?: number } | undefined)?.exitCode, 127);
    assert.match(missing.error?.message ?? '', /no-such-command: not found in PATH/);
  });

  it('cancel mid-RUN: cancelled, its sandbox gone, no template', async () => {
    const a = await t.newAccount();
    const b = await builds.startWith(
      a,
      plan(stage(BUSYBOX, [run('echo started; sleep 300')])),
      { name: 'slow', tag: 'latest', source: 'dockerfile' },
      null,
    );
    const seen: BuildLogEvent[] = [];
    for await (const e of builds.logs(a.id, b.id, { follow: true })) {
      seen.push(e);
      if (e.type === 'log' && e.text === 'started') break;
    }
    const [sandbox] = await t.stepSandboxes(a, b.id);
    assert.ok(sandbox, 'the step runs in a sandbox');
    const cancelled = await builds.cancel(a.id, b.id);
    assert.equal(cancelled.state, 'cancelled');
    assert.equal((await builds.get(a.id, b.id)).state, 'cancelled');
    assert.deepEqual(await t.stepSandboxes(a, b.id), []);
    assert.equal(await t.driver.inspect(sandbox), null, 'the runtime has no trace of it');
    assert.deepEqual(await builds.listTemplates(a.id), []);
    await assert.rejects(builds.cancel(a.id, b.id), (e: SandboxdError) => e.kind === 'conflict');
    // Its log ends with one end line.
    const tail = [];
    for await (const e of builds.logs(a.id, b.id, { follow: true, offset: 0 })) tail.push(e);
    assert.deepEqual(tail.at(-1), { type: 'end', state: 'cancelled' });
    assert.equal(tail.filter((e) => e.type === 'end').length, 1);
  });

  it('multi-stage: FROM an earlier stage, COPY --from a stage and from an image', async () => {
    const a = await t.newAccount();
    const builder = stage(
      BUSYBOX,
      [run('mkdir -p /out/sub && echo built > /out/sub/file && echo one > /out/single')],
      'builder',
    );
    const p: BuildPlan = {
      stages: [
        builder,
        {
          line: 20,
          base: { kind: 'image', ref: BUSYBOX },
          steps: [
            copy(['/out'], '/copied/', { from: { kind: 'stage', stage: 0 } }),
            copy(['/out/single'], '/renamed', { from: { kind: 'stage', stage: 0 }, chmod: 0o600 }),
            copy(['/bin/busybox'], '/tools/', { from: { kind: 'image', ref: BUSYBOX } }),
          ],
        },
        { line: 30, base: { kind: 'stage', stage: 1 }, steps: [run('cat /copied/sub/file /renamed > /both')] },
      ],
      target: 2,
    };
    const done = await build(a, p, 'multi');
    assert.equal(done.state, 'ready', JSON.stringify(done.error));
    const out = await inSandbox(
      a,
      'templates/multi',
      'cat /both; stat -c %a /renamed; test -x /tools/busybox && echo tool',
    );
    assert.equal(out, 'built\none\n600\ntool\n');
  });

  it('templates: used in creates by their own account only; another account sees none and cannot build FROM them; layers are never named', async () => {
    const a = await t.newAccount();
    const other = await t.newAccount();
    const done = await build(a, plan(stage(BUSYBOX, [run('echo mine > /owner')])), 'private');
    assert.equal(done.state, 'ready', JSON.stringify(done.error));
    assert.equal(await inSandbox(a, 'templates/private:latest', 'cat /owner'), 'mine\n');
    // A template FROM a template of the same account.
    const child = await build(a, plan(stage('templates/private', [run('echo child >> /owner')])), 'child');
    assert.equal(child.state, 'ready', JSON.stringify(child.error));
    assert.equal(await inSandbox(a, 'templates/child', 'cat /owner'), 'mine\nchild\n');
    for (const image of ['templates/private', 'templates/private:latest', 'templates/private:v9']) {
      await assert.rejects(
        t.app.services.sandboxes.create(other, { image }),
        (e: SandboxdError) => e.kind === 'template_not_found',
      );
    }
    const ref = (await builds.getTemplate(a.id, 'private', 'latest')).driverRef;
    await assert.rejects(
      t.app.services.sandboxes.create(a, { image: ref }),
      (e: SandboxdError) => e.kind === 'template_not_found',
    );
    await assert.rejects(
      t.app.services.sandboxes.create(other, { image: ref }),
      (e: SandboxdError) => e.kind === 'template_not_found',
    );
    assert.deepEqual(await builds.listTemplates(other.id), []);
    await assert.rejects(builds.get(other.id, done.id), (e: SandboxdError) => e.kind === 'not_found');
    await assert.rejects(builds.cancel(other.id, done.id), (e: SandboxdError) => e.kind === 'not_found');
    await assert.rejects(builds.deleteTemplate(other.id, 'private'), (e: SandboxdError) => e.kind === 'not_found');
    for (const from of ['templates/private', ref, `snapshot/${a.id}/private`]) {
      await assert.rejects(
        builds.start(other, plan(stage(from, [run('true')])), { name: 'steal', tag: 'latest', source: 'dockerfile' }),
        (e: SandboxdError) => e.kind === 'template_not_found' && /Dockerfile line \d+: FROM/.test(e.message),
        from,
      );
    }
    assert.deepEqual(await builds.list(other.id), [], 'a refused build leaves nothing');
    // Deleting the template: creates from it are refused; its layer stays as cache.
    await builds.deleteTemplate(a.id, 'private');
    await assert.rejects(
      t.app.services.sandboxes.create(a, { image: 'templates/private' }),
      (e: SandboxdError) => e.kind === 'template_not_found',
    );
    assert.ok(await t.app.store.getLayer(a.id, ref.split('_l.')[1]), 'the layer is cache now');
  });

  it('the cache is held to the plan: least recently used unused layers go; a build passing it even then fails quota', async () => {
    const a = await t.newAccount('CACHE13');
    const twoLayers = (tag: string) =>
      plan(
        stage(BUSYBOX, [
          run(`dd if=/dev/urandom of=/a bs=1M count=4 2>/dev/null; echo ${tag}`),
          run(`dd if=/dev/urandom of=/b bs=1M count=4 2>/dev/null; echo ${tag}`),
        ]),
      );
    const one = await build(a, twoLayers('one'), 'one');
    assert.equal(one.state, 'ready', JSON.stringify(one.error));
    const layersOne = await imageLayers(a);
    assert.equal(layersOne.length, 2);
    const two = await build(a, twoLayers('two'), 'two');
    assert.equal(two.state, 'ready', JSON.stringify(two.error));
    const left = await imageLayers(a);
    const named = new Set((await builds.listTemplates(a.id)).map((x) => x.driverRef));
    assert.equal(left.length, 3, 'the oldest unused layer went');
    assert.ok(!left.some((l) => l.key === layersOne[0].key), 'it was the first layer of the first build');
    assert.ok(named.size === 2 && [...named].every((r) => left.some((l) => l.driverRef === r)), 'template layers stay');
    assert.ok((await t.app.store.layerBytes(a.id)) <= 13 * MiB);
    assert.deepEqual(
      (await t.driver.listSnapshots())
        .map((i) => i.ref)
        .filter((r) => r.startsWith(`snapshot/${a.id}/`))
        .sort(),
      left.map((l) => l.driverRef).sort(),
      'removed layers left no image',
    );
    assert.equal(await inSandbox(a, 'templates/one', 'ls /a /b'), '/a\n/b\n');

    const tiny = await t.newAccount('TINY');
    const refused = await build(tiny, twoLayers('tiny'), 'big');
    assert.equal(refused.state, 'error');
    assert.equal(refused.error?.kind, 'quota');
    assert.equal((refused.error?.details as { quota?: string } | undefined)?.quota, 'buildCacheBytes');
    assert.deepEqual(await imageLayers(tiny), [], 'its layers went with it');
    assert.deepEqual(await builds.listTemplates(tiny.id), []);
  });

  it('after a crash: builds left running end error, their sandboxes are deleted, stray layers removed, kept ones stay', async () => {
    const a = await t.newAccount();
    const kept = await build(a, plan(stage(BUSYBOX, [run('echo kept > /k')])), 'kept');
    assert.equal(kept.state, 'ready');
    // What a server killed mid-build leaves: a build row held by a server that is gone, its
    // step sandbox running, a layer image without a row.
    const id = 'bld_crashedcrashedcrashe';
    await t.app.store.createBuild({
      id,
      accountId: a.id,
      name: 'lost',
      tag: 'latest',
      extraTags: [],
      state: 'building',
      source: 'dockerfile',
      createdAt: Date.now(),
      startedAt: Date.now(),
      stepsTotal: 2,
      stepsDone: 1,
      stepsCached: 0,
      plan: plan(stage(BUSYBOX, [run('sleep 100')])),
      allowDomains: null,
      noCache: false,
      holder: 'gone-host/1/000000',
    });
    const s = await t.app.services.sandboxes.create(a, {
      image: BUSYBOX,
      metadata: { 'sandboxd.build': id, 'sandboxd.step': '2' },
    });
    const stray = layerRef(a.id, 'f'.repeat(64));
    await t.driver.snapshot(s.id, stray);
    const r = await builds.recover({ startup: true, sweep: true });
    assert.deepEqual(r.ended, [id]);
    const lost = await builds.get(a.id, id);
    assert.equal(lost.state, 'error');
    assert.equal(lost.error?.kind, 'unavailable');
    assert.match(lost.error?.message ?? '', /server stopped during the build/);
    assert.deepEqual(await t.stepSandboxes(a, id), []);
    assert.equal(await t.driver.inspect(s.id), null);
    const images = (await t.driver.listSnapshots()).map((i) => i.ref);
    assert.ok(!images.includes(stray), 'the stray layer is gone');
    assert.ok(images.includes((await builds.getTemplate(a.id, 'kept', 'latest')).driverRef), 'a template layer stays');
    assert.equal(await inSandbox(a, 'templates/kept', 'cat /k'), 'kept\n');
    // A second pass finds nothing more to do.
    assert.deepEqual((await builds.recover({ sweep: true })).ended, []);
  });

  it('logs: followed as they come, resumed from an offset without a line lost or repeated, ended by one end line', async () => {
    const a = await t.newAccount();
    const b = await builds.startWith(
      a,
      plan(stage(BUSYBOX, [run('for i in 1 2 3 4 5; do echo line$i; sleep 0.2; done')])),
      { name: 'logs', tag: 'latest', source: 'dockerfile' },
      null,
    );
    const first: BuildLogEvent[] = [];
    for await (const e of builds.logs(a.id, b.id, { follow: true })) {
      first.push(e);
      if (e.type === 'log' && e.text === 'line2') break; // a dropped connection
    }
    const last = first.at(-1) as Extract<BuildLogEvent, { type: 'log' }>;
    const rest: BuildLogEvent[] = [];
    for await (const e of builds.logs(a.id, b.id, { follow: true, offset: last.seq + 1 })) rest.push(e);
    const all = [...first, ...rest];
    const logs = all.filter((e): e is Extract<BuildLogEvent, { type: 'log' }> => e.type === 'log');
    assert.deepEqual(
      logs.map((e) => e.seq),
      logs.map((_, i) => i),
    );
    assert.deepEqual(
      logs.filter((e) => e.stream === 'stdout').map((e) => e.text),
      ['line1', 'line2', 'line3', 'line4', 'line5'],
    );
    assert.ok(logs.filter((e) => e.stream === 'stdout').every((e) => e.step === 2));
    assert.deepEqual(all.at(-1), { type: 'end', state: 'ready' });
  });
});

void Readable;
