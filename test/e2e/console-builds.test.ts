/**
 * Image builds in the browser console (headless Chromium) against the real server and the
 * real builder: a build started from the page (a Dockerfile typed in, a context folder, a
 * build arg) whose log lines appear while it runs, through a log stream cut by the test
 * (the page resumes from the next line: every line once, in order); the template in the
 * Templates page and a sandbox created from it (its files checked through the API); a
 * rebuild from the cache; a failing RUN shown with its step, line, instruction, exit code and
 * output; a Dockerfile error at its field; cancel from the build page and from the list;
 * delete of builds and templates in two clicks. Every state is checked through the API. Any
 * browser console error fails the test except the ones a test provokes and names. The
 * tests that run builds need the real runtime (SANDBOXD_E2E_RUNTIME=local); on the fake one
 * only the form's checks and the server's refusal run.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Page } from 'playwright-core';
import { launch, type Browser } from './console-support.js';
import { LocalDriver } from '../../packages/server/src/runtime/local/driver.js';
import { IMAGE, RUNTIME, startServer, until, type Server } from './harness.js';
import { localOptions } from './local-runtime.js';

const EMAIL = `builds-${Date.now()}@example.com`;
const PASSWORD = 'console-builds-password-1';
const SUFFIX = randomBytes(3).toString('hex');
const NAME = `web-${SUFFIX}`;
const BAD = `bad-${SUFFIX}`;
const SLOW = `slow-${SUFFIX}`;

/** Tests that run a build: the fake runtime's RUN steps run nothing (no output, no files). */
const REAL = RUNTIME === 'local' ? {} : { skip: 'runs builds: needs SANDBOXD_E2E_RUNTIME=local' };

/** Lines the test cuts the first log stream after (the page must resume from seq CUT). */
const CUT = 3;

const DOCKERFILE = `FROM ${IMAGE}
ARG GREETING=hello
COPY greet.txt /opt/greet.txt
COPY conf/ /opt/conf/
RUN for i in 1 2 3 4 5 6; do echo "tick $i"; sleep 1; done
RUN echo "$GREETING from the console" > /opt/made.txt
CMD ["cat", "/opt/made.txt"]
`;

/**
 * Wraps the page's fetch: records the URL of every build-log request, and when
 * `window.__cutLog` is a number N, the next log stream's body errors after its Nth line (as a
 * dropped connection does), once.
 */
async function instrumentLogStreams(page: Page): Promise<void> {
  // A string, not a function: tsx's compiled functions call helpers (`__name`) the page lacks.
  await page.addInitScript(`{
    const w = window;
    w.__logRequests = [];
    const native = window.fetch.bind(window);
    window.fetch = async (input, init) => {
      const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
      const res = await native(input, init);
      if (!/\\/api\\/v1\\/images\\/builds\\/[^/]+\\/logs\\?/.test(url)) return res;
      w.__logRequests.push(url);
      const cut = w.__cutLog;
      if (typeof cut !== 'number' || !res.body) return res;
      w.__cutLog = undefined;
      const reader = res.body.getReader();
      let lines = 0;
      let cutNow = false;
      const body = new ReadableStream({
        pull: async (c) => {
          // Erroring a stream drops what it still holds: the lines before the cut are read first.
          if (cutNow) {
            await reader.cancel();
            return c.error(new TypeError('test: network drop'));
          }
          const { value, done } = await reader.read();
          if (done) return c.close();
          for (let i = 0; i < value.length; i++) {
            if (value[i] !== 10 || ++lines < cut) continue;
            cutNow = true;
            return c.enqueue(value.subarray(0, i + 1));
          }
          c.enqueue(value);
        },
        cancel: (r) => reader.cancel(r),
      });
      return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
    };
  }`);
}

describe('browser console: image builds and templates', { timeout: 900_000 }, () => {
  let s: Server;
  let b: Browser;
  let key = '';
  let ctxDir = '';
  const sandboxes: string[] = [];
  const noConsoleErrors = (allowed: RegExp[] = []) => {
    for (const re of allowed) {
      const i = b.errors.findIndex((e) => re.test(e));
      assert.ok(i >= 0, `expected a console error matching ${re}; got ${JSON.stringify(b.errors)}`);
      b.errors.splice(i, 1);
    }
    assert.deepEqual(b.errors, [], 'browser console errors');
  };
  const api = (method: string, path: string, body?: unknown) => s.api(method, path, { key, body });
  const getBuild = async (id: string) => {
    const r = await api('GET', `/api/v1/images/builds/${id}`);
    assert.equal(r.status, 200, r.text);
    return r.body.build;
  };
  const templates = async () => (await api('GET', '/api/v1/templates')).body.templates as Array<Record<string, any>>;
  /** The server's whole log of a build (no follow), log lines only. */
  const serverLog = async (id: string) => {
    const r = await api('GET', `/api/v1/images/builds/${id}/logs`);
    assert.equal(r.status, 200, r.text);
    return r.text
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l))
      .filter((e) => e.type === 'log');
  };
  /** The build id of the page the browser is on. */
  const pageBuildId = async () => {
    await b.page.waitForURL(/\/builds\/bld_/);
    return new URL(b.page.url()).pathname.split('/').pop()!;
  };
  /** Fills the build form (already open) and starts the build; resolves with the new build's id. */
  const startBuild = async (o: { name: string; dockerfile: string; context?: string; args?: string }) => {
    const { page } = b;
    await page.getByLabel('Template name').fill(o.name);
    if (o.context) {
      await page.getByLabel('Context folder (optional)').setInputFiles(o.context);
      // The folder's Dockerfile is read into the text area first: then the test's text replaces it.
      await page.getByText(/\d+ files?, .*\./).waitFor();
    }
    await page.getByLabel('Dockerfile', { exact: true }).fill(o.dockerfile);
    if (o.args) await page.getByLabel('Build args').fill(o.args);
    await page.getByRole('button', { name: 'Start build' }).click();
    return pageBuildId();
  };
  /** Waits for the build page's log to end in `state`. */
  const logEnds = (state: string, timeout = 300_000) =>
    b.page.locator(`.log-status[data-end="${state}"]`).waitFor({ timeout });
  const pageSeqs = () =>
    b.page.$$eval('.build-log .log-line', (els) => els.map((e) => Number((e as HTMLElement).dataset.seq)));

  before(async () => {
    s = await startServer();
    const a = await s.api('POST', '/api/v1/admin/accounts', {
      body: { email: EMAIL, password: PASSWORD, tokens: 100_000 },
    });
    assert.equal(a.status, 201, a.text);
    const login = await s.api('POST', '/api/v1/auth/login', { key: null, body: { email: EMAIL, password: PASSWORD } });
    const cookie = String(login.headers.get('set-cookie')).split(';')[0];
    const k = await s.api('POST', '/api/v1/keys', {
      key: null,
      body: { name: 'builds-e2e' },
      headers: { cookie, origin: s.baseUrl },
    });
    assert.equal(k.status, 201, k.text);
    key = k.body.key;
    ctxDir = mkdtempSync(join(tmpdir(), 'console-builds-'));
    mkdirSync(join(ctxDir, 'app/conf'), { recursive: true });
    writeFileSync(join(ctxDir, 'app/greet.txt'), 'greetings from the context\n');
    writeFileSync(join(ctxDir, 'app/conf/app.ini'), '[app]\nport = 8080\n');
    writeFileSync(join(ctxDir, 'app/Dockerfile'), 'FROM scratch\n# replaced by what the form says\n');
    b = await launch();
    await instrumentLogStreams(b.page);
    await b.page.goto(`${s.baseUrl}/login`);
    await b.page.getByLabel('Email').fill(EMAIL);
    await b.page.getByLabel('Password').fill(PASSWORD);
    await b.page.getByRole('button', { name: 'Sign in' }).click();
    await b.page.getByText('Step 1 of 8').waitFor();
  });
  after(async () => {
    await b?.close();
    if (s && key) {
      for (const id of sandboxes) await api('DELETE', `/api/v1/sandboxes/${id}`);
      for (const t of (await api('GET', '/api/v1/templates')).body?.templates ?? [])
        await api('DELETE', `/api/v1/templates/${t.name}`);
      for (const x of (await api('GET', '/api/v1/images/builds')).body?.builds ?? [])
        await api('DELETE', `/api/v1/images/builds/${x.id}`);
    }
    if (s) {
      await s.cleanup().catch(() => {});
      await s.kill('SIGTERM');
      // The cache's layer images live in the image store the test servers share: removed
      // through a driver of the server's instance once it is stopped.
      if (RUNTIME === 'local') {
        const driver = new LocalDriver(localOptions(s.dataDir));
        for (const img of await driver.listSnapshots().catch(() => []))
          await driver.deleteImage(img.ref).catch(() => {});
        assert.deepEqual(await driver.listSnapshots(), [], 'no layer image of the test is left');
      }
      await s.stop();
    }
    if (ctxDir) rmSync(ctxDir, { recursive: true, force: true });
  });

  it('Templates in the navigation; empty lists; the form checks name, tag and build args before sending anything', async () => {
    const { page } = b;
    await page.getByRole('link', { name: 'Templates', exact: true }).click();
    await page.getByText('No templates yet.').waitFor();
    await page.getByText('No builds yet.').waitFor();
    await page.getByRole('link', { name: 'New build' }).click();
    await page.waitForURL(/\/builds\/new$/);
    await page.getByLabel('Template name').fill('Not Valid');
    await page.getByRole('button', { name: 'Start build' }).click();
    await page
      .locator('#name-error')
      .filter({ hasText: /lowercase letters/ })
      .waitFor();
    assert.equal(await page.getByLabel('Template name').getAttribute('aria-invalid'), 'true');
    await page.getByLabel('Template name').fill(NAME);
    await page.getByLabel('Tag').fill('-bad');
    await page.getByRole('button', { name: 'Start build' }).click();
    await page
      .locator('#tag-error')
      .filter({ hasText: /not starting with/ })
      .waitFor();
    await page.getByLabel('Tag').fill('latest');
    await page.getByLabel('Build args').fill('GREETING=hi\nnot an arg');
    await page.getByRole('button', { name: 'Start build' }).click();
    await page.locator('#buildArgs-error').filter({ hasText: 'Line 2' }).waitFor();
    assert.equal((await api('GET', '/api/v1/images/builds')).body.count, 0, 'nothing was sent');
    await page.getByLabel('Build args').fill('');
    noConsoleErrors();
  });

  it('a Dockerfile the server refuses: its message at the Dockerfile field, naming the line; no build made', async () => {
    const { page } = b;
    await page.getByLabel('Template name').fill(NAME);
    await page.getByLabel('Dockerfile', { exact: true }).fill(`FROM ${IMAGE}\nRUN echo ok\nHEALTHCHECK CMD true\n`);
    await page.getByRole('button', { name: 'Start build' }).click();
    const err = page.locator('#dockerfile-error:not([hidden])');
    await err.waitFor();
    assert.match((await err.textContent()) ?? '', /line 3/i);
    assert.equal(await page.getByLabel('Dockerfile', { exact: true }).getAttribute('aria-invalid'), 'true');
    assert.equal((await api('GET', '/api/v1/images/builds')).body.count, 0);
    noConsoleErrors([/status of 400/]);
  });

  let readyId = '';
  it(
    'a build from the page: a context folder and a build arg; log lines appear while it runs; a cut log stream resumes from the next line',
    REAL,
    async () => {
      const { page } = b;
      await page.evaluate((n) => ((window as unknown as { __cutLog: number }).__cutLog = n), CUT);
      await page.getByLabel('Context folder (optional)').setInputFiles(join(ctxDir, 'app'));
      // The folder's own Dockerfile is shown in the text area; the form's text is what is built.
      await page.getByText(/3 files, .*its Dockerfile is in the text area/).waitFor();
      assert.match(await page.getByLabel('Dockerfile', { exact: true }).inputValue(), /replaced by what the form says/);
      readyId = await startBuild({ name: NAME, dockerfile: DOCKERFILE, args: 'GREETING=bonjour' });
      await page
        .locator('h1')
        .filter({ hasText: `${NAME}:latest` })
        .waitFor();
      // A tick shows up while the build is still running (five more seconds of RUN follow it).
      await page.locator('.build-log .log-stdout', { hasText: /^tick 1$/ }).waitFor({ timeout: 300_000 });
      const during = await getBuild(readyId);
      assert.ok(['queued', 'building'].includes(during.state), `still running: ${during.state}`);
      await b.shoot('build-running');
      await logEnds('ready');
      await page.locator('h1 .badge.state-ready').waitFor();
      await page
        .locator('.page-status .notice.success')
        .filter({ hasText: `templates/${NAME}:latest` })
        .waitFor();

      // Every line of the server's log once, in order, though the first stream was cut after CUT lines.
      const server = await serverLog(readyId);
      const seqs = await pageSeqs();
      assert.deepEqual(
        seqs,
        server.map((l) => l.seq),
      );
      assert.deepEqual(
        seqs,
        seqs.map((_, i) => i),
      );
      assert.deepEqual(
        await page.$$eval('.build-log .log-line', (els) => els.map((e) => e.textContent)),
        server.map((l) => l.text.replace(/\n$/, '') || '\u200b'),
      );
      const requests = await page.evaluate(() => (window as unknown as { __logRequests: string[] }).__logRequests);
      assert.match(requests[0], /offset=0&follow=true/);
      assert.ok(
        requests.some((u) => u.includes(`offset=${CUT}&`)),
        `a request resumed at offset ${CUT}: ${requests.join(' ')}`,
      );
      assert.ok(server.some((l) => l.text.includes('tick 6')));

      const bd = await getBuild(readyId);
      assert.equal(bd.state, 'ready');
      assert.equal(bd.image, `templates/${NAME}:latest`);
      const props = (await page.locator('dl.props').textContent()) ?? '';
      assert.match(props, new RegExp(`${bd.steps.done} / ${bd.steps.total}`));
      await b.shoot('build-ready');
      noConsoleErrors();
    },
  );

  it(
    'the Templates page lists the template and the build; New sandbox creates a sandbox from it with its files',
    REAL,
    async () => {
      const { page } = b;
      await page.getByRole('link', { name: 'Templates', exact: true }).first().click();
      const row = page.locator(`tr[data-template="${NAME}:latest"]`);
      await row.waitFor();
      const text = (await row.textContent()) ?? '';
      assert.match(text, new RegExp(`templates/${NAME}:latest`));
      assert.match(text, new RegExp(readyId));
      const [t] = (await templates()).filter((x) => x.name === NAME);
      assert.equal(t.buildId, readyId);
      const buildRow = page.locator(`tr[data-build="${readyId}"]`);
      await buildRow.locator('.badge.state-ready').waitFor();
      await b.shoot('templates');

      await row.getByRole('link', { name: `New sandbox from templates/${NAME}:latest` }).click();
      await page.waitForURL(/\/sandboxes\/new\?image=/);
      assert.equal(await page.getByLabel('Image').inputValue(), `templates/${NAME}:latest`);
      await page.getByRole('button', { name: 'Create sandbox' }).click();
      await page.waitForURL(/\/sandboxes\/sbx_/, { timeout: 120_000 });
      const id = new URL(page.url()).pathname.split('/').pop()!;
      sandboxes.push(id);
      await page.locator('.page-head h1 .badge.state-started').waitFor();
      const sb = (await api('GET', `/api/v1/sandboxes/${id}`)).body.sandbox;
      assert.equal(sb.image, `templates/${NAME}:latest`);
      const ex = await api('POST', `/api/v1/sandboxes/${id}/exec`, {
        command: 'cat /opt/greet.txt /opt/conf/app.ini /opt/made.txt',
      });
      assert.equal(ex.status, 200, ex.text);
      assert.equal(ex.body.exitCode, 0, ex.text);
      assert.equal(ex.body.stdout, 'greetings from the context\n[app]\nport = 8080\nbonjour from the console\n');
      noConsoleErrors();
    },
  );

  it('the same build again: every step from the cache, shown in the Builds list', REAL, async () => {
    const { page } = b;
    await page.goto(`${s.baseUrl}/builds/new`);
    const id = await startBuild({
      name: NAME,
      dockerfile: DOCKERFILE,
      context: join(ctxDir, 'app'),
      args: 'GREETING=bonjour',
    });
    assert.notEqual(id, readyId);
    await logEnds('ready');
    const bd = await getBuild(id);
    assert.equal(bd.state, 'ready');
    assert.ok(bd.steps.cached > 0, JSON.stringify(bd.steps));
    assert.equal(bd.steps.cached, bd.steps.done, `every step cached: ${JSON.stringify(bd.steps)}`);
    await page.getByRole('link', { name: 'Templates', exact: true }).first().click();
    const row = page.locator(`tr[data-build="${id}"]`);
    await row.locator('.badge.state-ready').waitFor();
    assert.match((await row.textContent()) ?? '', new RegExp(`\\(${bd.steps.cached} cached\\)`));
    noConsoleErrors();
  });

  it(
    'a failing RUN: the page shows its step, line, instruction, exit code and output; no template is made',
    REAL,
    async () => {
      const { page } = b;
      await page.getByRole('link', { name: 'New build' }).click();
      const id = await startBuild({
        name: BAD,
        dockerfile: `FROM ${IMAGE}\nRUN echo preparing\nRUN echo "about to fail" && echo "boom: it broke" >&2 && exit 3\nRUN echo never\n`,
      });
      await logEnds('error');
      const card = page.locator('.card.failure');
      await card.waitFor();
      const bd = await getBuild(id);
      assert.equal(bd.state, 'error');
      const d = bd.error.details;
      assert.equal(d.exitCode, 3, JSON.stringify(bd.error));
      assert.equal(d.line, 3, JSON.stringify(bd.error));
      const text = (await card.textContent()) ?? '';
      assert.match(text, new RegExp(`Step ${d.step}`));
      assert.match(text, /Dockerfile line 3/);
      assert.match(text, /exit code 3/);
      assert.match(text, /echo "about to fail"/);
      assert.match(text, /boom: it broke/);
      await page.locator('h1 .badge.state-error').waitFor();
      assert.equal((await templates()).filter((t) => t.name === BAD).length, 0, 'a failed build makes no template');
      assert.ok(!(await page.locator('.build-log').textContent())?.includes('never'));
      await b.shoot('build-failed');
      noConsoleErrors();
    },
  );

  it('cancel a running build from its page; cancel another from the Builds list', REAL, async () => {
    const { page } = b;
    await page.goto(`${s.baseUrl}/builds/new`);
    const slow = `FROM ${IMAGE}\nRUN echo waiting && sleep 600\n`;
    const id = await startBuild({ name: SLOW, dockerfile: slow });
    await page.locator('.build-log .log-stdout', { hasText: /^waiting$/ }).waitFor({ timeout: 300_000 });
    await page.getByRole('button', { name: 'Cancel build' }).click();
    await page.locator('h1 .badge.state-cancelled').waitFor();
    await logEnds('cancelled');
    assert.equal((await getBuild(id)).state, 'cancelled');
    assert.equal(await page.getByRole('button', { name: 'Cancel build' }).count(), 0);

    await page.goto(`${s.baseUrl}/builds/new`);
    const id2 = await startBuild({ name: SLOW, dockerfile: slow.replace('waiting', 'waiting again') });
    await page.getByRole('link', { name: 'Templates', exact: true }).first().click();
    const row = page.locator(`tr[data-build="${id2}"]`);
    await row.waitFor();
    await row.getByRole('button', { name: `Cancel build ${id2}` }).click();
    await row.locator('.badge.state-cancelled').waitFor();
    assert.equal((await getBuild(id2)).state, 'cancelled');
    assert.equal((await templates()).filter((t) => t.name === SLOW).length, 0);
    noConsoleErrors();
  });

  it('delete a build and a template, each in two clicks', REAL, async () => {
    const { page } = b;
    const list = (await api('GET', '/api/v1/images/builds')).body.builds as Array<{ id: string; name: string }>;
    const victim = list.find((x) => x.name === SLOW)!;
    await page.goto(`${s.baseUrl}/templates`);
    const row = page.locator(`tr[data-build="${victim.id}"]`);
    await row.getByRole('button', { name: `Delete build ${victim.id}` }).click();
    await row.getByRole('button', { name: `Confirm: delete build ${victim.id}` }).click();
    await row.waitFor({ state: 'detached' });
    assert.equal((await api('GET', `/api/v1/images/builds/${victim.id}`)).status, 404);

    const t = page.locator(`tr[data-template="${NAME}:latest"]`);
    await t.getByRole('button', { name: `Delete template ${NAME}:latest` }).click();
    await t.getByRole('button', { name: `Confirm: delete template ${NAME}:latest` }).click();
    await page
      .locator('.page-status .notice.success')
      .filter({ hasText: `Template ${NAME}:latest deleted.` })
      .waitFor();
    await t.waitFor({ state: 'detached' });
    assert.equal((await templates()).filter((x) => x.name === NAME).length, 0);
    // The build that made it stays.
    assert.equal((await getBuild(readyId)).state, 'ready');
    noConsoleErrors();
  });

  it('a build deleted from its own page goes back to Templates', REAL, async () => {
    const { page } = b;
    await page.goto(`${s.baseUrl}/builds/${readyId}`);
    await logEnds('ready');
    await page.getByRole('button', { name: `Delete build ${readyId}` }).click();
    await page.getByRole('button', { name: `Confirm: delete build ${readyId}` }).click();
    await page.waitForURL(/\/templates$/);
    assert.equal((await api('GET', `/api/v1/images/builds/${readyId}`)).status, 404);
    await until('the list without it', async () =>
      (await page.locator(`tr[data-build="${readyId}"]`).count()) === 0 ? true : undefined,
    );
    noConsoleErrors();
  });
});
