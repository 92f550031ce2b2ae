/**
 * E2B's template builder with the unchanged npm `e2b` SDK against the real server on the
 * real runtime (SANDBOXD_E2E_RUNTIME=local): `Template.build` of a chain of every step kind
 * (files from a context with a .dockerignore, commands as the template's user and as root,
 * workdir, a user it makes, envs, a start command with its ready check), its logs, then
 * `Sandbox.create('<name>')` and commands in it seeing all of that; an unchanged rebuild from
 * the cache, `buildInBackground` + `getBuildStatus`, `exists`, tags, `skipCache`, a failing
 * step (the SDK's BuildError names it), `fromTemplate`, and deletes.
 */
import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { BuildError, type LogEntry, Sandbox, Template, waitForFile } from 'e2b';
import { newAccount, RUNTIME, startServer, until } from './harness.js';
import { stopClean } from './builds-support.js';
import { type E2bEnv, startE2b } from './e2b/support.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("E2B's template builder through the e2b SDK", {
  skip: RUNTIME !== 'local' && 'needs SANDBOXD_E2E_RUNTIME=local',
  timeout: 1_800_000,
}, () => {
  let env: E2bEnv;
  let dir: string;
  /** sandboxd's own API as the test's account. */
  const api = (method: string, path: string, body?: unknown) => env.s.api(method, path, { key: env.key, body });
  /**
   * Steps of a build's log (the builder's `Step n/N : ...` lines) and how many came from the
   * cache (its ` ---> CACHED` lines: file and config steps; a FROM is counted, not logged).
   */
  const cacheOf = (messages: string[]) => ({
    steps: messages.filter((m) => /^Step \d+\/\d+ : /.test(m)).length,
    cached: messages.filter((m) => m.trim() === '---> CACHED').length,
  });
  /** Every log line of a build, as E2B's status pages give them. */
  const logsOf = async (info: { templateId: string; buildId: string }) => {
    const out: string[] = [];
    for (let i = 0; i < 1000; i++) {
      const page = await Template.getBuildStatus(info, { logsOffset: out.length });
      if (page.logEntries.length === 0) return out;
      out.push(...page.logEntries.map((e) => e.message));
    }
    throw new Error('more than 1000 pages of logs');
  };

  /** The template every test builds on: each step kind of E2B's builder. */
  const appTemplate = () =>
    Template({ fileContextPath: dir })
      .fromBaseImage()
      .copy('app', '/srv/app/')
      .copy('run.sh', '/usr/local/bin/run.sh', { user: 'root', mode: 0o755 })
      .runCmd(['cat /srv/app/hello.txt > /home/user/seen', 'id -un > /home/user/built-by'])
      .runCmd('echo from-root > /root-file', { user: 'root' })
      .setWorkdir('/srv/work')
      .runCmd('pwd > /home/user/where')
      .setUser('app')
      .runCmd('id -un > /home/app/app-user')
      .setEnvs({ GREETING: 'hello there', EMPTY: '' })
      .setStartCmd(
        'echo "started as $(id -un) in $(pwd) with $GREETING" > /tmp/started; sleep 3600',
        waitForFile('/tmp/started'),
      );

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sandboxd-e2b-tpl-'));
    mkdirSync(join(dir, 'app', 'sub'), { recursive: true });
    writeFileSync(join(dir, 'app', 'hello.txt'), 'hello from the context\n');
    writeFileSync(join(dir, 'app', 'sub', 'x.txt'), 'x\n');
    writeFileSync(join(dir, 'app', 'secret.txt'), 'never uploaded\n');
    writeFileSync(join(dir, '.dockerignore'), 'app/secret.txt\n');
    writeFileSync(join(dir, 'run.sh'), '#!/bin/sh\necho run.sh ran\n');
    chmodSync(join(dir, 'run.sh'), 0o600);
    env = await startE2b();
  });
  after(async () => {
    // Its layer images live in the image store that test servers share: removed with it.
    await stopClean(env?.s, []);
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  let firstBuild: string;

  it('Template.build: logs as it goes, ready; Sandbox.create(name) has the files, env, user and start command', async () => {
    const logs: LogEntry[] = [];
    const info = await Template.build(appTemplate(), 'e2e-app', { onBuildLogs: (l) => logs.push(l) });
    firstBuild = info.buildId;
    assert.equal(info.templateId, 'e2e-app');
    assert.deepEqual(info.tags, ['latest']);
    const text = logs.map((l) => l.message).join('\n');
    assert.match(text, /Uploaded 'app'/, 'the SDK uploaded the files through the signed URL');
    assert.match(text, /pwd > \/home\/user\/where/, "the builder's own lines reach the SDK");
    const first = cacheOf(logs.map((l) => l.message));
    assert.ok(first.steps > 10 && first.cached < first.steps - 1, JSON.stringify(first));

    const sbx = await Sandbox.create('e2e-app', { timeoutMs: 300_000 });
    try {
      const run = async (cmd: string, user?: 'root') => {
        const r = await sbx.commands.run(cmd, user ? { user } : {});
        return r.stdout.trim();
      };
      assert.equal(await run('whoami'), 'app', "the template's last user is the sandbox's default");
      assert.equal(await run('echo "$GREETING|$EMPTY|"'), 'hello there||');
      assert.equal(await run('cat /srv/app/hello.txt /srv/app/sub/x.txt'), 'hello from the context\nx');
      assert.equal(await run('test -e /srv/app/secret.txt && echo there || echo absent'), 'absent', '.dockerignore');
      assert.equal(
        await run('cat /home/user/seen /home/user/built-by /root-file /home/user/where /home/app/app-user', 'root'),
        'hello from the context\nuser\nfrom-root\n/srv/work\napp',
      );
      assert.equal(await run('stat -c %U /srv/app/hello.txt'), 'user', "COPY's owner: the user at that step");
      assert.equal(await run('stat -c "%U %a" /usr/local/bin/run.sh'), 'root 755');
      assert.equal(await run('stat -c %U /srv/work'), 'user', "WORKDIR is the user's, as E2B makes it");
      assert.equal(await run('/usr/local/bin/run.sh'), 'run.sh ran');
      // The image's working dir (sandboxd's own exec runs there; E2B's commands in the user's home).
      const wd = await api('POST', `/api/v1/sandboxes/${sbx.sandboxId}/exec`, { command: 'pwd' });
      assert.equal(wd.body.stdout.trim(), '/srv/work', wd.text);
      // The create was answered once the ready check passed: the start command already ran.
      assert.equal(await run('cat /tmp/started'), 'started as app in /srv/work with hello there');
    } finally {
      await sbx.kill();
    }
  });

  it('an unchanged rebuild comes from the cache; buildInBackground + getBuildStatus; tags; exists', async () => {
    const sdkLogs: string[] = [];
    const info = await Template.buildInBackground(appTemplate(), 'e2e-app:v2', {
      tags: ['stable'],
      onBuildLogs: (l) => sdkLogs.push(l.message),
    });
    assert.deepEqual(info.tags, ['v2', 'stable']);
    assert.match(sdkLogs.join('\n'), /Skipping upload of 'app', already cached/, 'uploads are kept by content');
    let status = await Template.getBuildStatus(info);
    for (let i = 0; i < 600 && (status.status === 'building' || status.status === 'waiting'); i++) {
      await sleep(500);
      status = await Template.getBuildStatus(info);
    }
    assert.equal(status.status, 'ready', JSON.stringify(status.reason));
    const c = cacheOf(await logsOf(info));
    assert.ok(c.steps > 10, JSON.stringify(c));
    assert.equal(c.cached, c.steps - 1, 'every step but the FROM says CACHED');
    assert.notEqual(info.buildId, firstBuild);

    assert.equal(await Template.exists('e2e-app'), true);
    assert.equal(await Template.exists('e2e-app:stable'), true);
    assert.equal(await Template.exists('e2e-app:nope'), false);
    assert.equal(await Template.exists('e2e-nothing'), false);
    await Template.assignTags('e2e-app:v2', 'prod');
    assert.deepEqual((await Template.getTags('e2e-app')).map((t) => t.tag).sort(), ['latest', 'prod', 'stable', 'v2']);
    await Template.removeTags('e2e-app', ['prod', 'stable']);
    assert.deepEqual((await Template.getTags('e2e-app')).map((t) => t.tag).sort(), ['latest', 'v2']);
    const sbx = await Sandbox.create('e2e-app:v2', { timeoutMs: 120_000 });
    try {
      assert.equal((await sbx.commands.run('cat /home/user/where', { user: 'root' })).stdout.trim(), '/srv/work');
    } finally {
      await sbx.kill();
    }
  });

  it('another account sees none of it: not its template, its tags or its builds', async () => {
    const other = await newAccount(env.s, { tokens: 1_000_000 });
    const opts = { apiKey: other.key };
    assert.equal(await Template.exists('e2e-app', opts), false);
    await assert.rejects(Template.getBuildStatus({ templateId: 'e2e-app', buildId: firstBuild }, opts), /not found/i);
    await assert.rejects(Template.getTags('e2e-app', opts), /not found/i);
  });

  it('skipCache: the steps run again', async () => {
    const logs: string[] = [];
    await Template.build(appTemplate(), 'e2e-app:fresh', { skipCache: true, onBuildLogs: (l) => logs.push(l.message) });
    const c = cacheOf(logs);
    assert.ok(c.steps > 10, JSON.stringify(c));
    assert.equal(c.cached, 0);
  });

  it("a failing step: the SDK's BuildError names it, with its output, at the line that added it; nothing is tagged", async () => {
    const tpl = Template({ fileContextPath: dir })
      .fromImage('local/busybox:latest')
      .runCmd('echo fine')
      .runCmd('echo it broke >&2; exit 3');
    const logs: string[] = [];
    await assert.rejects(
      Template.build(tpl, 'e2e-broken', { onBuildLogs: (l) => logs.push(l.message) }),
      (e: unknown) => {
        assert.ok(e instanceof BuildError, String(e));
        assert.match(
          e.message,
          /^Step 2 failed: RUN echo it broke >&2; exit 3: .*3/,
          'E2B numbers it 2 (after echo fine)',
        );
        assert.ok(e.stack?.includes('e2b-templates.test.ts'), `the stack points at the runCmd call: ${e.stack}`);
        return true;
      },
    );
    assert.match(logs.join('\n'), /it broke/);
    assert.equal(await Template.exists('e2e-broken'), false);
  });

  it('a network allow list goes in a header of the connection options; a bad one is refused before anything runs', async () => {
    const tpl = Template({ fileContextPath: dir }).fromImage('local/busybox:latest').runCmd('true');
    await Template.build(tpl, 'e2e-net', { headers: { 'X-Sandboxd-Allow-Domains': 'example.com,*.example.org' } });
    assert.equal(await Template.exists('e2e-net'), true);
    await assert.rejects(
      Template.build(tpl, 'e2e-net-bad', { headers: { 'X-Sandboxd-Allow-Domains': 'not a domain!' } }),
      (e: unknown) => e instanceof BuildError && /allowDomains/.test(e.message),
    );
    assert.equal(await Template.exists('e2e-net-bad'), false);
  });

  it('fromTemplate builds on the account template; delete removes every tag', async () => {
    const child = Template({ fileContextPath: dir }).fromTemplate('e2e-app:v2').runCmd('echo child > /home/app/child');
    await Template.build(child, 'e2e-child');
    const sbx = await Sandbox.create('e2e-child', { timeoutMs: 120_000 });
    try {
      assert.equal(
        (await sbx.commands.run('cat /home/app/child /home/user/where', { user: 'root' })).stdout,
        'child\n/srv/work\n',
      );
    } finally {
      await sbx.kill();
    }
    const del = await fetch(`${env.s.baseUrl}/e2b/templates/e2e-child`, {
      method: 'DELETE',
      headers: { 'X-API-Key': env.key },
    });
    assert.equal(del.status, 204);
    assert.equal(await Template.exists('e2e-child'), false);
    await assert.rejects(Sandbox.create('e2e-child'), /not found/i);
  });

  it('a kill -9 mid-build: after the restart E2B sees an error with its reason, and no step sandbox is left', async () => {
    const tpl = Template({ fileContextPath: dir })
      .fromImage('local/busybox:latest')
      .runCmd('echo step-running; sleep 600');
    const info = await Template.buildInBackground(tpl, 'e2e-killed');
    await until('the RUN step running', async () => {
      const st = await Template.getBuildStatus(info);
      assert.equal(st.status === 'error' || st.status === 'ready', false, JSON.stringify(st));
      return (await logsOf(info)).some((m) => m.includes('step-running')) ? true : undefined;
    });
    const list = async () =>
      (await env.s.api('GET', '/api/v1/sandboxes?limit=1000', { key: env.key })).body.sandboxes as unknown[];
    assert.equal((await list()).length, 1, "the step's sandbox, while it runs");
    await env.s.kill('SIGKILL');
    env.s = await startServer({ dataDir: env.s.dataDir, port: env.s.port });
    const st = await Template.getBuildStatus(info);
    assert.equal(st.status, 'error');
    assert.match(st.reason?.message ?? '', /server/i, JSON.stringify(st.reason));
    await until('no sandbox left', async () => ((await list()).length === 0 ? true : undefined));
    assert.equal(await Template.exists('e2e-killed'), false, 'never a half template');
  });
});
