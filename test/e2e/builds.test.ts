/**
 * Black-box, real runtime: image builds through the API (raw HTTP). A multi-stage Dockerfile
 * using every supported instruction, whose template shows each effect in a sandbox made from
 * it; the start and ready commands of a template; the cache (an unchanged rebuild creates no
 * sandbox, a changed last step reruns only it, a changed file reruns from its COPY); a failing
 * RUN (the failure names step, line, instruction, exit code and output; no template; no step
 * sandbox left); bad Dockerfiles refused with the line before anything runs; cancel mid-RUN;
 * the log stream followed live and resumed after a dropped connection with no line lost or
 * repeated.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Build, BuildLogEvent } from '@sandboxd/protocol';
import { newAccount, RUNTIME, type Server, startServer, until } from './harness.js';
import {
  BUSYBOX,
  Builds,
  context,
  DEBIAN,
  gzip,
  imageRecord,
  instanceImages,
  lines,
  stopClean,
  tar,
  withDockerfile,
} from './builds-support.js';

type Log = Extract<BuildLogEvent, { type: 'log' }>;
const isLog = (e: BuildLogEvent): e is Log => e.type === 'log';

describe('image builds (real runtime)', {
  skip: RUNTIME !== 'local' && 'needs SANDBOXD_E2E_RUNTIME=local',
  timeout: 1_800_000,
}, () => {
  let s: Server;
  let b: Builds;
  let accountId: string;

  before(async () => {
    s = await startServer();
    const a = await newAccount(s, { tokens: 1_000_000, plan: 'PRO' });
    b = new Builds(s, a.key);
    accountId = a.id;
  });
  after(() => stopClean(s, [b]));

  /** The build must be ready; prints its log otherwise. */
  const ready = async (build: Build): Promise<Build> => {
    if (build.state !== 'ready')
      assert.fail(`build ${build.state}: ${JSON.stringify(build.error)}\n${await b.logText(build.id)}`);
    return build;
  };

  it('a multi-stage Dockerfile with every supported instruction: its template shows each effect', async () => {
    // The bases a FROM may name besides an image: a snapshot and another template of the account.
    const src = await b.sandbox(BUSYBOX);
    assert.equal((await b.sh(src, 'echo from-snapshot > /snapfile')).exitCode, 0);
    const snap = await s.api('POST', `/api/v1/sandboxes/${src}/snapshot`, { key: b.key, body: { name: 'e2e-base' } });
    assert.equal(snap.status, 201, snap.text);
    await b.deleteSandbox(src);
    const base = await ready(
      await b.run(
        { name: 'tbase', tag: 'v1' },
        withDockerfile(`FROM ${BUSYBOX}\nRUN echo from-template > /tbase.txt\n`),
      ),
    );
    assert.equal(base.image, 'templates/tbase:v1');

    const dockerfile = [
      '# syntax=docker/dockerfile:1',
      '# escape=\\',
      `ARG BASE=${DEBIAN}`,
      'ARG GREETING=hello',
      `FROM \${BASE} AS builder`,
      'ARG GREETING',
      'ARG VERSION=0.0',
      'WORKDIR /src',
      'COPY src/*.txt ./',
      'COPY ["src/sub dir/", "./sub/"]',
      'COPY src/ /all/',
      'RUN ls /src > /src/listing.txt && ls -A /all > /src/all.txt \\',
      '    && echo "$GREETING $VERSION" > /src/built.txt && cat /src/a.txt >> /src/built.txt',
      'RUN ["/bin/sh", "-c", "echo exec-form > /src/exec.txt"]',
      '',
      'FROM snapshots/e2e-base AS snap',
      'RUN cp /snapfile /snapfile.copy',
      '',
      'FROM templates/tbase:v1 AS tmpl',
      '',
      `FROM ${DEBIAN}`,
      'ARG VERSION',
      `LABEL org.example.version="\${VERSION}" org.example.name=full`,
      'ENV APP_HOME=/opt/app GREETING_ENV="hello world"',
      'ENV LEGACY legacy value',
      'SHELL ["/bin/bash", "-c"]',
      `RUN useradd -u 1234 -m app && echo "\${BASH_VERSION:+bash}" > /shell.txt`,
      'WORKDIR $APP_HOME',
      'COPY --from=builder /src/built.txt /src/exec.txt /src/listing.txt /src/all.txt ./',
      'COPY --from=snap /snapfile.copy ./snap.txt',
      'COPY --from=tmpl /tbase.txt ./',
      'COPY --chown=app:app --chmod=0750 bin/ ./bin/',
      'COPY --chown=1234 logs/*.log ./logs/',
      'COPY links/ ./links/',
      'ADD files.tar ./extracted/',
      'ADD files.tgz /opt/app/extracted-gz/',
      'WORKDIR rel',
      'EXPOSE 8080 9090/udp',
      'USER app',
      'RUN whoami > /home/app/whoami.txt && pwd >> /home/app/whoami.txt \\',
      '    && echo "$VERSION-$GREETING_ENV" >> /home/app/whoami.txt',
      'ENTRYPOINT ["/bin/sh", "-c"]',
      'CMD ["echo hi"]',
      '',
    ].join('\n');
    const inner = tar([
      { name: 'inner/', type: 'dir' },
      { name: 'inner/one.txt', data: 'one\n' },
      { name: 'inner/two.txt', data: 'two\n' },
    ]);
    const ctx = context({
      Dockerfile: dockerfile,
      '.dockerignore': '# ignored\nsrc/secret.txt\nlogs/*.log\n!logs/keep.log\n**/*.tmp\n',
      'src/': { type: 'dir' },
      'src/a.txt': 'alpha\n',
      'src/b.txt': 'beta\n',
      'src/secret.txt': 'never copied\n',
      'src/x.tmp': 'never copied\n',
      'src/sub dir/inner.txt': 'in a dir with a space\n',
      'bin/tool': { data: '#!/bin/sh\necho tool-ran\n', mode: 0o755 },
      'bin/helper': { data: 'helper\n', mode: 0o644 },
      'logs/a.log': 'ignored\n',
      'logs/keep.log': 'kept\n',
      'links/target.txt': 'target\n',
      'links/rel': { type: 'symlink', link: 'target.txt' },
      'files.tar': inner,
      'files.tgz': gzip(inner),
    });
    const build = await ready(
      await b.run({ name: 'full', tag: 'v1', buildArgs: { VERSION: '1.2', UNUSED: 'x' } }, gzip(ctx)),
    );
    assert.equal(build.image, 'templates/full:v1');
    assert.equal(build.steps.done, build.steps.total);
    assert.ok(build.finishedAt && build.startedAt && build.digest, JSON.stringify(build));
    assert.deepEqual(await b.stepSandboxes(), [], 'no step sandbox left');

    const id = await b.sandbox('templates/full:v1');
    const got = await s.api('GET', `/api/v1/sandboxes/${id}`, { key: b.key });
    assert.equal(got.body.sandbox.image, 'templates/full:v1');
    const out = async (cmd: string, options?: Record<string, unknown>) => {
      const r = await b.sh(id, cmd, options);
      assert.equal(r.exitCode, 0, `${cmd}: ${r.stderr}`);
      return r.stdout;
    };
    // USER, WORKDIR (relative to the one before), ENV in both forms; ARGs are not kept.
    assert.equal(await out('whoami; pwd; id -u'), 'app\n/opt/app/rel\n1234\n');
    assert.equal(
      await out(`echo "$APP_HOME|$GREETING_ENV|$LEGACY|\${VERSION:-unset}|\${GREETING:-unset}|\${BASE:-unset}"`),
      '/opt/app|hello world|legacy value|unset|unset|unset\n',
    );
    // ARG: a global default redeclared in a stage, a --build-arg; RUN in shell and exec form.
    assert.equal(await out('cat /opt/app/built.txt'), 'hello 1.2\nalpha\n');
    assert.equal(await out('cat /opt/app/exec.txt'), 'exec-form\n');
    // COPY globs, the JSON form (a name with a space), .dockerignore (with an exception).
    assert.equal(await out('cat /opt/app/listing.txt'), 'a.txt\nb.txt\nlisting.txt\nsub\n');
    assert.equal(await out('cat /opt/app/all.txt'), 'a.txt\nb.txt\nsub dir\n');
    // FROM a snapshot and a template, COPY --from a stage of each.
    assert.equal(await out('cat /opt/app/snap.txt /opt/app/tbase.txt'), 'from-snapshot\nfrom-template\n');
    // --chown and --chmod; without them, root's and the context's mode.
    assert.equal(
      await out('stat -c "%n %U:%G %a" /opt/app/bin/tool /opt/app/bin/helper /opt/app/built.txt'),
      '/opt/app/bin/tool app:app 750\n/opt/app/bin/helper app:app 750\n/opt/app/built.txt root:root 644\n',
    );
    assert.equal(
      await out('stat -c "%U:%G %a" /opt/app/bin /opt/app/logs'),
      'app:app 750\napp:app 755\n',
      'the dirs a COPY makes get its --chown and --chmod',
    );
    assert.equal(await out('/opt/app/bin/tool'), 'tool-ran\n');
    assert.equal(await out('ls /opt/app/logs; stat -c "%u:%g" /opt/app/logs/keep.log'), 'keep.log\n1234:1234\n');
    // A symlink of the context is copied as a symlink.
    assert.equal(await out('readlink /opt/app/links/rel; cat /opt/app/links/rel'), 'target.txt\ntarget\n');
    // ADD of a local tar extracts it.
    assert.equal(
      await out('cat /opt/app/extracted/inner/one.txt /opt/app/extracted/inner/two.txt; ls /opt/app/extracted'),
      'one\ntwo\ninner\n',
    );
    assert.equal(await out('cat /opt/app/extracted-gz/inner/one.txt'), 'one\n', 'a gzip tar too');
    // SHELL: the RUN after it ran in bash; a RUN after USER ran as that user with its build args.
    assert.equal(await out('cat /shell.txt'), 'bash\n');
    assert.equal(await out('cat /home/app/whoami.txt'), 'app\n/opt/app/rel\n1.2-hello world\n');
    assert.equal(
      await out('test -e /src || echo no-builder-files'),
      'no-builder-files\n',
      'only the last stage is the image',
    );
    await b.deleteSandbox(id);

    // LABEL, CMD, ENTRYPOINT are in the image's config (the runtime's record of it).
    const rec = imageRecord(build.digest!);
    assert.deepEqual(rec.entrypoint, ['/bin/sh', '-c']);
    assert.deepEqual(rec.cmd, ['echo hi']);
    assert.equal(rec.labels?.['org.example.version'], '1.2');
    assert.equal(rec.labels?.['org.example.name'], 'full');
    assert.equal(rec.user, 'app');
    assert.equal(rec.workingDir, '/opt/app/rel');

    const tpl = (await b.templates()).find((t) => t.name === 'full');
    assert.deepEqual(tpl && { image: tpl.image, tag: tpl.tag, buildId: tpl.buildId }, {
      image: 'templates/full:v1',
      tag: 'v1',
      buildId: build.id,
    });
    assert.ok(layersOf().length > 0, 'layer images in the store');
    assert.equal((await s.api('DELETE', '/api/v1/snapshots/e2e-base', { key: b.key })).status, 204);
  });

  it('start and ready commands: the create answers once the check passes; a check that never passes fails the create with its output', async () => {
    const ok = await ready(
      await b.run(
        { name: 'svc' },
        withDockerfile(
          [
            `FROM ${DEBIAN}`,
            'LABEL org.sandboxd.start.cmd="sleep 1; echo up > /tmp/started; exec sleep 600"',
            'LABEL org.sandboxd.ready.cmd="test -f /tmp/started"',
          ].join('\n'),
        ),
      ),
    );
    assert.equal(ok.image, 'templates/svc:latest');
    for (const image of ['templates/svc:latest', 'templates/svc']) {
      const id = await b.sandbox(image);
      assert.equal((await b.sh(id, 'cat /tmp/started')).stdout, 'up\n', 'the start command ran before the answer');
      await b.deleteSandbox(id);
    }
    await ready(
      await b.run(
        { name: 'svc', tag: 'never' },
        withDockerfile(
          [
            `FROM ${DEBIAN}`,
            'LABEL org.sandboxd.ready.cmd="echo not-yet-ready; exit 7" org.sandboxd.ready.timeout=2000',
          ].join('\n'),
        ),
      ),
    );
    const ids = async () =>
      ((await s.api('GET', '/api/v1/sandboxes', { key: b.key })).body.sandboxes as Array<{ id: string }>).map(
        (x) => x.id,
      );
    const before = await ids();
    const balance = async () => (await s.api('GET', '/api/v1/account', { key: b.key })).body.balance;
    const tokens = await balance();
    const r = await s.api('POST', '/api/v1/sandboxes', { key: b.key, body: { image: 'templates/svc:never' } });
    assert.equal(r.status, 504, r.text);
    assert.equal(r.body.kind, 'upstream_timeout');
    assert.equal(r.body.details.exitCode, 7, r.text);
    assert.match(r.body.details.output, /not-yet-ready/);
    assert.deepEqual(await ids(), before, 'no sandbox nor record of the failed create');
    assert.equal(await balance(), tokens, 'its tokens refunded');
  });

  it('cache: an unchanged rebuild runs no step and creates no sandbox; a changed last RUN reruns only it; a changed file reruns from its COPY', async () => {
    const df = (last: string) =>
      [
        `FROM ${DEBIAN}`,
        'ENV A=1',
        'WORKDIR /w',
        'COPY f.txt ./',
        'RUN head -c 3000000 /dev/urandom > /w/blob && sha256sum /w/blob > /w/blob.sum',
        `RUN echo ${last} > /w/last`,
        '',
      ].join('\n');
    const first = await ready(await b.run({ name: 'cached', tag: 'v1' }, withDockerfile(df('one'), { 'f.txt': 'f1' })));
    // Six steps, FROM counted (cached when the step after it is).
    assert.deepEqual(first.steps, { total: 6, done: 6, cached: 0 });
    const creates = await b.creates();

    const again = await ready(await b.run({ name: 'cached', tag: 'v2' }, withDockerfile(df('one'), { 'f.txt': 'f1' })));
    assert.deepEqual(again.steps, { total: 6, done: 6, cached: 6 }, 'every step from the cache');
    assert.equal(await b.creates(), creates, 'an all-cached build created no sandbox');
    assert.equal(again.digest, first.digest, 'the same image');
    const log = await b.logs(again.id);
    const cachedLines = log.filter((e) => isLog(e) && e.stream === 'system' && /CACHED/.test(e.text));
    assert.ok(cachedLines.length >= 4, `CACHED lines: ${cachedLines.length}`);

    const changed = await ready(
      await b.run({ name: 'cached', tag: 'v3' }, withDockerfile(df('two'), { 'f.txt': 'f1' })),
    );
    assert.deepEqual(changed.steps, { total: 6, done: 6, cached: 5 }, 'only the last RUN ran');
    assert.equal(await b.creates(), creates + 1, 'one step sandbox: the last RUN');

    const fileChanged = await ready(
      await b.run({ name: 'cached', tag: 'v4' }, withDockerfile(df('two'), { 'f.txt': 'f2' })),
    );
    assert.deepEqual(fileChanged.steps, { total: 6, done: 6, cached: 3 }, 'FROM, ENV and WORKDIR cached, the rest ran');
    const noCache = await ready(
      await b.run({ name: 'cached', tag: 'v5', noCache: true }, withDockerfile(df('two'), { 'f.txt': 'f2' })),
    );
    assert.equal(noCache.steps.cached, 0);

    const show = async (tag: string) => {
      const id = await b.sandbox(`templates/cached:${tag}`);
      const r = await b.sh(id, 'cat /w/last /w/f.txt; echo; sha256sum -c --quiet /w/blob.sum && cat /w/blob.sum');
      await b.deleteSandbox(id);
      assert.equal(r.exitCode, 0, r.stderr);
      return r.stdout;
    };
    const [v1, v3, v4] = [await show('v1'), await show('v3'), await show('v4')];
    assert.match(v1, /^one\nf1\n/);
    assert.match(v3, /^two\nf1\n/);
    assert.match(v4, /^two\nf2\n/);
    assert.equal(
      v1.split('\n')[2],
      v3.split('\n')[2],
      'the RUN before the change was not run again (same random blob)',
    );
    assert.notEqual(v3.split('\n')[2], v4.split('\n')[2], 'a changed file reruns the steps after its COPY');
    assert.deepEqual(await b.stepSandboxes(), []);
  });

  it('a failing RUN ends the build `error` naming step, line, instruction, exit code and output; no template, no sandbox left', async () => {
    const creates = await b.creates();
    const df = [
      `FROM ${BUSYBOX}`,
      'RUN echo before',
      'RUN echo to-stdout && echo to-stderr >&2 && exit 3',
      'RUN echo never-runs',
      '',
    ].join('\n');
    const build = await b.run({ name: 'broken', tag: 'v1' }, withDockerfile(df));
    assert.equal(build.state, 'error', JSON.stringify(build));
    const e = build.error!;
    assert.equal(e.details?.line, 3, JSON.stringify(e));
    assert.equal(e.details?.exitCode, 3);
    assert.match(String(e.details?.instruction), /RUN echo to-stdout && echo to-stderr >&2 && exit 3/);
    assert.ok(Number.isInteger(e.details?.step) && e.details!.step! >= 1);
    assert.match(String(e.details?.output), /to-stdout/);
    assert.match(String(e.details?.output), /to-stderr/);
    assert.match(e.message, /exit|code|3/);
    assert.ok(build.steps.done < build.steps.total, JSON.stringify(build.steps));
    const events = await b.logs(build.id, { follow: true });
    const end = events.at(-1);
    assert.deepEqual(end && end.type === 'end' && end.state, 'error');
    const text = events
      .filter(isLog)
      .map((x) => x.text)
      .join('\n');
    assert.match(text, /to-stderr/);
    assert.doesNotMatch(text, /never-runs/);
    assert.ok(!(await b.templates()).some((t) => t.name === 'broken'), 'no template');
    const c = await s.api('POST', '/api/v1/sandboxes', { key: b.key, body: { image: 'templates/broken:v1' } });
    assert.equal(c.status, 404, c.text);
    assert.equal(c.body.kind, 'template_not_found');
    assert.deepEqual(await b.stepSandboxes(), [], 'no step sandbox left');
    assert.equal(await b.creates(), creates + 2, 'two steps ran (the second failed), the third never started');
  });

  it('a step sandbox deleted by its account mid-RUN fails the build (never ready), naming the step', async () => {
    const build = await b.started(
      { name: 'tampered' },
      withDockerfile(`FROM ${BUSYBOX}\nRUN echo step-running && sleep 600\nRUN echo never-runs\n`),
    );
    const step = await until('the step sandbox', async () => (await b.stepSandboxes(build.id))[0]);
    await until('the RUN to start', async () =>
      (await b.logText(build.id)).includes('step-running') ? true : undefined,
    );
    assert.equal((await s.api('DELETE', `/api/v1/sandboxes/${step.id}`, { key: b.key })).status, 204);
    const done = await b.wait(build.id, 120_000);
    assert.equal(done.state, 'error', JSON.stringify(done));
    assert.equal(done.error?.details?.line, 2, JSON.stringify(done.error));
    assert.doesNotMatch(await b.logText(build.id), /never-runs/);
    assert.ok(!(await b.templates()).some((t) => t.name === 'tampered'));
    assert.deepEqual(await b.stepSandboxes(), []);
  });

  it('bad Dockerfiles and arguments: 400 naming the line (or the argument) before anything runs', async () => {
    const creates = await b.creates();
    const buildsBefore = (await b.list()).length;
    const cases: Array<[string, string, RegExp]> = [
      ['HEALTHCHECK', `FROM ${BUSYBOX}\nHEALTHCHECK CMD true\n`, /line 2/],
      ['ONBUILD', `FROM ${BUSYBOX}\nRUN true\nONBUILD RUN true\n`, /line 3/],
      ['VOLUME', `FROM ${BUSYBOX}\nVOLUME /data\n`, /line 2/],
      ['STOPSIGNAL', `FROM ${BUSYBOX}\nSTOPSIGNAL SIGKILL\n`, /line 2/],
      ['RUN --mount', `FROM ${BUSYBOX}\nRUN --mount=type=cache,target=/c true\n`, /line 2/],
      ['RUN --network', `FROM ${BUSYBOX}\n\nRUN --network=host true\n`, /line 3/],
      ['ADD URL', `FROM ${BUSYBOX}\nADD https://example.com/x /x\n`, /line 2/],
      ['heredoc', `FROM ${BUSYBOX}\nRUN <<EOF\necho hi\nEOF\n`, /line 2/],
      ['unknown', `FROM ${BUSYBOX}\nFROBNICATE now\n`, /line 2/],
      ['before FROM', `RUN true\nFROM ${BUSYBOX}\n`, /line 1/],
      ['empty', '# nothing here\n', /empty|FROM|no instruction/i],
      ['later stage', `FROM ${BUSYBOX}\nCOPY --from=later /x /y\nFROM ${BUSYBOX} AS later\n`, /line 2/],
      ['--platform', `FROM --platform=linux/arm64 ${BUSYBOX}\n`, /line 1/],
      ['EXPOSE range', `FROM ${BUSYBOX}\nEXPOSE 8000-8010\n`, /line 2/],
    ];
    for (const [what, df, re] of cases) {
      const r = await b.start({ name: 'bad' }, withDockerfile(df));
      assert.equal(r.status, 400, `${what}: ${r.text}`);
      assert.equal(r.body.kind, 'validation', what);
      assert.match(r.body.message, re, `${what}: ${r.body.message}`);
    }
    // An image that does not exist for this account: refused with the line, before anything runs.
    for (const df of [
      'FROM local/nope:latest\n',
      'FROM templates/nope:v1\n',
      `FROM ${BUSYBOX}\nCOPY --from=snapshots/nope /x /y\n`,
    ]) {
      const r = await b.start({ name: 'bad' }, withDockerfile(df));
      assert.equal(r.status, 404, `${df}: ${r.text}`);
      assert.equal(r.body.kind, 'template_not_found');
      assert.match(r.body.message, /line [12]/i, r.text);
    }
    const args: Array<[string, Parameters<Builds['start']>[0], Buffer?, string?]> = [
      ['no Dockerfile in the context', { name: 'bad' }, context({ 'x.txt': 'x' })],
      [
        'a Dockerfile path not in it',
        { name: 'bad', dockerfile: 'sub/Dockerfile' },
        withDockerfile(`FROM ${BUSYBOX}\n`),
      ],
      ['buildArgs not JSON', { name: 'bad', buildArgs: '{nope' }],
      ['buildArgs not an object of strings', { name: 'bad', buildArgs: '{"A":1}' }],
      ['buildArgs an array', { name: 'bad', buildArgs: '["A"]' }],
      ['bad name', { name: 'Bad Name' }],
      ['bad tag', { name: 'bad', tag: '-x' }],
      ['bad allowDomains', { name: 'bad', allowDomains: 'bad_name..org' }],
      ['not a tar', { name: 'bad' }, Buffer.from('this is not a tar archive, not at all'.repeat(20))],
      ['a truncated gzip', { name: 'bad' }, gzip(withDockerfile(`FROM ${BUSYBOX}\n`)).subarray(0, 40)],
    ];
    for (const [what, q, body] of args) {
      const r = await b.start(q, body ?? withDockerfile(`FROM ${BUSYBOX}\n`));
      assert.equal(r.status, 400, `${what}: ${r.text}`);
      assert.equal(r.body.kind, 'validation', what);
    }
    const wrongType = await fetch(`${s.baseUrl}/api/v1/images/builds?name=bad`, {
      method: 'POST',
      headers: { authorization: `Bearer ${b.key}`, 'content-type': 'application/json' },
      body: '{}',
    });
    assert.ok([400, 415].includes(wrongType.status), `json body: ${wrongType.status}`);
    const noKey = await fetch(`${s.baseUrl}/api/v1/images/builds?name=bad`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-tar' },
      body: new Uint8Array(withDockerfile(`FROM ${BUSYBOX}\n`)),
    });
    assert.equal(noKey.status, 401);
    // A COPY of something the context lacks (or that .dockerignore hides): refused before anything runs.
    for (const [files, name] of [
      [{}, 'nothing-here.txt'],
      [{ '.dockerignore': 'nothing-here.txt\n', 'nothing-here.txt': 'ignored' }, 'nothing-here.txt'],
    ] as const) {
      const missing = await b.start({ name: 'bad' }, withDockerfile(`FROM ${BUSYBOX}\nCOPY ${name} /x\n`, files));
      assert.equal(missing.status, 400, missing.text);
      assert.match(missing.body.message, /line 2/i);
      assert.match(missing.body.message, /nothing-here\.txt/);
    }
    assert.equal((await b.list()).length, buildsBefore, 'no build was made');
    assert.ok(!(await b.templates()).some((t) => t.name === 'bad'));
    assert.equal(await b.creates(), creates, 'no sandbox was started');
  });

  it('templates: a rebuild of a tag replaces it, tags are listed and deleted one or all; sandboxes made from a deleted one keep their files', async () => {
    const df = (v: string) => withDockerfile(`FROM ${BUSYBOX}\nRUN echo ${v} > /v\n`);
    const v1 = await ready(await b.run({ name: 'tagged', tag: 'v1' }, df('one')));
    await ready(await b.run({ name: 'tagged', tag: 'v2' }, df('two')));
    const old = await b.sandbox('templates/tagged:v1');
    const again = await ready(await b.run({ name: 'tagged', tag: 'v1' }, df('three')));
    const tags = (await b.templates()).filter((t) => t.name === 'tagged');
    assert.deepEqual(tags.map((t) => t.tag).sort(), ['v1', 'v2']);
    assert.equal(tags.find((t) => t.tag === 'v1')?.buildId, again.id, 'the rebuild replaced the tag');
    const fresh = await b.sandbox('templates/tagged:v1');
    assert.equal((await b.sh(fresh, 'cat /v')).stdout, 'three\n');
    assert.equal((await b.sh(old, 'cat /v')).stdout, 'one\n', 'a sandbox of the replaced image keeps its files');
    assert.equal((await b.get(v1.id)).body.build.state, 'ready', 'the replaced build is still listed');
    assert.equal((await b.deleteTemplate('tagged', 'v1')).status, 204);
    assert.deepEqual(
      (await b.templates()).filter((t) => t.name === 'tagged').map((t) => t.tag),
      ['v2'],
    );
    assert.equal(
      (await s.api('POST', '/api/v1/sandboxes', { key: b.key, body: { image: 'templates/tagged:v1' } })).status,
      404,
    );
    assert.equal((await b.sh(fresh, 'cat /v')).stdout, 'three\n', 'a sandbox of a deleted template keeps its files');
    assert.equal((await b.deleteTemplate('tagged')).status, 204, 'every tag');
    assert.ok(!(await b.templates()).some((t) => t.name === 'tagged'));
    assert.equal((await b.deleteTemplate('tagged')).status, 404);
    assert.equal((await b.deleteTemplate('Bad Name')).status, 400);
    for (const id of [old, fresh]) await b.deleteSandbox(id);
  });

  it('cancel of a queued build and delete of a running one: no sandbox, no template', async () => {
    // The plan runs two builds of an account at once: a third waits `queued`.
    const sleepers = [
      await b.started({ name: 'sleeper', tag: 'a' }, withDockerfile(`FROM ${BUSYBOX}\nRUN echo a && sleep 600\n`)),
      await b.started({ name: 'sleeper', tag: 'b' }, withDockerfile(`FROM ${BUSYBOX}\nRUN echo b && sleep 600\n`)),
    ];
    for (const x of sleepers) await until('a step sandbox', async () => (await b.stepSandboxes(x.id))[0]);
    const queued = await b.started({ name: 'sleeper', tag: 'c' }, withDockerfile(`FROM ${BUSYBOX}\nRUN echo c\n`));
    assert.equal((await b.get(queued.id)).body.build.state, 'queued');
    const c = await b.cancel(queued.id);
    assert.equal(c.status, 200, c.text);
    assert.equal((await b.wait(queued.id)).state, 'cancelled');
    assert.deepEqual(await b.stepSandboxes(queued.id), []);
    // Deleting a running build cancels it first; its sandbox goes with it.
    assert.equal((await b.delete(sleepers[0].id)).status, 204);
    assert.equal((await b.get(sleepers[0].id)).status, 404);
    assert.equal((await b.cancel(sleepers[1].id)).status, 200);
    assert.equal((await b.wait(sleepers[1].id)).state, 'cancelled');
    await until('the step sandboxes to go', async () => ((await b.stepSandboxes()).length === 0 ? true : undefined));
    assert.ok(!(await b.templates()).some((t) => t.name === 'sleeper'));
  });

  it('cancel mid-RUN: `cancelled`, its step sandbox gone, no template; list, get, delete', async () => {
    const build = await b.started(
      { name: 'slow' },
      withDockerfile(`FROM ${BUSYBOX}\nRUN echo started-sleeping && sleep 600\nRUN echo never\n`),
    );
    // Running: its step sandbox exists and the log says the RUN started.
    const sandbox = await until('the step sandbox', async () => (await b.stepSandboxes(build.id))[0]);
    await until('the RUN to start', async () =>
      (await b.logText(build.id)).includes('started-sleeping') ? true : undefined,
    );
    assert.equal((await b.get(build.id)).body.build.state, 'building');
    assert.ok((await b.list()).some((x) => x.id === build.id && x.state === 'building'));
    const c = await b.cancel(build.id);
    assert.equal(c.status, 200, c.text);
    const done = await b.wait(build.id, 120_000);
    assert.equal(done.state, 'cancelled');
    assert.deepEqual(await b.stepSandboxes(), [], 'its step sandbox is gone');
    const gone = await s.api('GET', `/api/v1/sandboxes/${sandbox.id}`, { key: b.key });
    assert.equal(gone.status, 404, gone.text);
    assert.ok(!(await b.templates()).some((t) => t.name === 'slow'), 'no template');
    const again = await b.cancel(build.id);
    assert.equal(again.status, 409, again.text);
    assert.equal(again.body.kind, 'conflict');
    const events = await b.logs(build.id, { follow: true });
    assert.deepEqual(events.at(-1), { type: 'end', state: 'cancelled' });
    assert.equal((await b.delete(build.id)).status, 204);
    assert.equal((await b.get(build.id)).status, 404);
    assert.equal((await b.delete(build.id)).status, 404);
    assert.equal((await b.cancel(build.id)).status, 404);
    assert.ok(!(await b.list()).some((x) => x.id === build.id));
  });

  it('logs: follow streams lines as they come; a dropped stream resumes with `offset`, no line lost or repeated', async () => {
    const n = 40;
    const build = await b.started(
      { name: 'chatty' },
      withDockerfile(
        `FROM ${BUSYBOX}\nRUN for i in $(seq 1 ${n}); do echo line-$i; [ $((i % 2)) = 0 ] && echo err-$i >&2; sleep 0.1; done\n`,
      ),
    );
    // First connection: read until a few lines of the RUN arrived while the build still runs, then drop it.
    const abort = new AbortController();
    const res = await b.openLogs(build.id, { follow: true, signal: abort.signal });
    assert.equal(res.status, 200);
    const first: BuildLogEvent[] = [];
    let stateMidway = '';
    for await (const e of lines(res)) {
      first.push(e);
      if (isLog(e) && e.text.includes('line-5')) {
        stateMidway = (await b.get(build.id)).body.build.state;
        break;
      }
    }
    abort.abort();
    assert.equal(stateMidway, 'building', 'lines arrived while the build ran');
    const seqs1 = first.filter(isLog).map((e) => e.seq);
    assert.deepEqual(
      seqs1,
      seqs1.map((_, i) => i),
      'seq from 0 without gaps',
    );
    const next = seqs1.at(-1)! + 1;
    const rest = await b.logs(build.id, { follow: true, offset: next });
    const all = [...first.filter(isLog), ...rest.filter(isLog)];
    assert.deepEqual(
      all.map((e) => e.seq),
      all.map((_, i) => i),
      'no line lost or repeated',
    );
    const end = rest.at(-1);
    assert.deepEqual(end, { type: 'end', state: 'ready' });
    assert.equal(rest.filter((e) => e.type === 'end').length, 1);
    const out = all.filter((e) => e.stream === 'stdout').map((e) => e.text.trim());
    const err = all.filter((e) => e.stream === 'stderr').map((e) => e.text.trim());
    assert.deepEqual(
      out.filter((t) => t.startsWith('line-')),
      Array.from({ length: n }, (_, i) => `line-${i + 1}`),
    );
    assert.deepEqual(
      err.filter((t) => t.startsWith('err-')),
      Array.from({ length: n / 2 }, (_, i) => `err-${2 * (i + 1)}`),
    );
    for (const e of all) assert.ok(!Number.isNaN(Date.parse(e.time)));
    // The whole log again without follow: the same lines, no `end`; an offset past the end: nothing.
    const whole = await b.logs(build.id);
    assert.deepEqual(whole.filter(isLog), all);
    const past = await b.logs(build.id, { offset: all.length + 10 });
    assert.deepEqual(past.filter(isLog), []);
    const bad = await b.openLogs(build.id, { offset: -1 } as never);
    assert.equal(bad.status, 400);
    await bad.text();
  });

  /** The layer images this suite's account has in the store. */
  const layersOf = () => instanceImages(s.dataDir).refs.filter((r) => r.startsWith(`snapshot/${accountId}/_l.`));
});
