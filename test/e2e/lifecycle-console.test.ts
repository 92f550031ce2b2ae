/**
 * The sandbox lifecycle in the browser console (headless Chromium) against the real server
 * (fake runtime by default; SANDBOXD_E2E_RUNTIME=local for crun): the sandbox page's Pause,
 * Resume, Stop, Start and Snapshot buttons, each enabled in its states and used once; the
 * paused badge on the list; a 409 (the state changed behind the page) shown with the
 * server's message; the Snapshots page with delete. Every state is checked through the API.
 * Any browser console error fails the test, except the browser's log line of the 409 itself
 * (and, on the fake runtime, which has no file API, the 500s of the Files panel's listings).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { launch, type Browser } from './console-support.js';
import { IMAGE, RUNTIME, startServer, type Server } from './harness.js';

const EMAIL = `lifecycle-${Date.now()}@example.com`;
const PASSWORD = 'console-lifecycle-password-1';
const ACTIONS = ['pause', 'resume', 'stop', 'start', 'snapshot'] as const;

describe('browser console: sandbox lifecycle and snapshots', { timeout: 300_000 }, () => {
  let s: Server;
  let b: Browser;
  let key = '';
  let id = '';
  const snapshot = `console-${randomBytes(3).toString('hex')}`;
  const noConsoleErrors = (allowed: RegExp[] = []) => {
    if (RUNTIME === 'fake')
      for (let i = b.errors.length - 1; i >= 0; i--)
        if (/status of 500 .*\/files\?path=/.test(b.errors[i])) b.errors.splice(i, 1);
    for (const re of allowed) {
      const i = b.errors.findIndex((e) => re.test(e));
      assert.ok(i >= 0, `expected a console error matching ${re}; got ${JSON.stringify(b.errors)}`);
      b.errors.splice(i, 1);
    }
    assert.deepEqual(b.errors, [], 'browser console errors');
  };
  const stateOf = async () => (await s.api('GET', `/api/v1/sandboxes/${id}`, { key })).body.sandbox.state as string;
  /** The badge in the page's heading shows `state`. */
  const badge = (state: string) => b.page.locator(`.page-head h1 .badge.state-${state}`).waitFor();
  /** The lifecycle buttons the page has enabled, by action. */
  const enabled = async () => {
    const out: string[] = [];
    for (const a of ACTIONS) if (await b.page.locator(`.lifecycle button[data-action="${a}"]`).isEnabled()) out.push(a);
    return out;
  };
  /** Clicks a lifecycle button and waits for the page drawn for the new state, with its notice. */
  const act = async (label: string, state: string, notice: RegExp) => {
    await b.page.getByRole('group', { name: 'Lifecycle' }).getByRole('button', { name: label, exact: true }).click();
    await badge(state);
    await b.page.locator('.page-status .notice.success').filter({ hasText: notice }).waitFor();
    assert.equal(await stateOf(), state);
  };

  before(async () => {
    s = await startServer();
    const a = await s.api('POST', '/api/v1/admin/accounts', {
      body: { email: EMAIL, password: PASSWORD, tokens: 10_000 },
    });
    assert.equal(a.status, 201, a.text);
    const login = await s.api('POST', '/api/v1/auth/login', { key: null, body: { email: EMAIL, password: PASSWORD } });
    const cookie = String(login.headers.get('set-cookie')).split(';')[0];
    const k = await s.api('POST', '/api/v1/keys', {
      key: null,
      body: { name: 'lifecycle-e2e' },
      headers: { cookie, origin: s.baseUrl },
    });
    assert.equal(k.status, 201, k.text);
    key = k.body.key;
    const c = await s.api('POST', '/api/v1/sandboxes', {
      key,
      body: { image: IMAGE, timeoutMs: 600_000, metadata: { suite: 'console' } },
    });
    assert.equal(c.status, 201, c.text);
    id = c.body.sandbox.id;
    b = await launch();
  });
  after(async () => {
    await b?.close();
    if (s && key) {
      if (id) await s.api('DELETE', `/api/v1/sandboxes/${id}`, { key });
      await s.api('DELETE', `/api/v1/snapshots/${snapshot}`, { key });
    }
    await s?.stop();
  });

  it('a started sandbox: badge, metadata, and Pause, Stop, Snapshot enabled', async () => {
    const { page } = b;
    await page.goto(`${s.baseUrl}/login`);
    await page.getByLabel('Email').fill(EMAIL);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByText('Step 1 of 8').waitFor();
    await page.goto(`${s.baseUrl}/sandboxes/${id}`);
    await badge('started');
    await page.getByText('suite=console').waitFor();
    assert.deepEqual(await enabled(), ['pause', 'stop', 'snapshot']);
    noConsoleErrors();
  });

  it('Pause: the paused badge here and on the list; Resume, Stop, Snapshot enabled', async () => {
    const { page } = b;
    await act('Pause', 'paused', /paused/);
    assert.deepEqual(await enabled(), ['resume', 'stop', 'snapshot']);
    await page.getByText(/paused; terminals need a started sandbox/).waitFor();
    await b.shoot('sandbox-paused');
    await page.getByRole('link', { name: 'Sandboxes', exact: true }).first().click();
    await page.locator(`tr[data-sandbox-id="${id}"] .badge.state-paused`).waitFor();
    await page.locator(`tr[data-sandbox-id="${id}"] a`).first().click();
    await badge('paused');
    noConsoleErrors();
  });

  it('a state changed behind the page: Resume answers 409, the page shows the server message and the new state', async () => {
    const { page } = b;
    const resumed = await s.api('POST', `/api/v1/sandboxes/${id}/resume`, { key, body: {} });
    assert.equal(resumed.status, 200, resumed.text);
    // What the server says to a second resume: the page must show that message.
    const again = await s.api('POST', `/api/v1/sandboxes/${id}/resume`, { key, body: {} });
    assert.equal(again.status, 409, again.text);
    assert.equal(again.body.kind, 'conflict');
    assert.equal(again.body.details?.state, 'started');
    assert.deepEqual(await enabled(), ['resume', 'stop', 'snapshot'], 'the page still shows it paused');
    await page.getByRole('group', { name: 'Lifecycle' }).getByRole('button', { name: 'Resume', exact: true }).click();
    const alert = page.locator('.page-status .notice.error');
    await alert.waitFor();
    assert.equal((await alert.textContent())?.trim(), again.body.message);
    await badge('started');
    assert.deepEqual(await enabled(), ['pause', 'stop', 'snapshot']);
    noConsoleErrors([/status of 409/]);
  });

  it('Stop, then Start: each badge, buttons and API state follow', async () => {
    await act('Stop', 'stopped', /stopped/);
    assert.deepEqual(await enabled(), ['start', 'snapshot']);
    await act('Start', 'started', /started/);
    assert.deepEqual(await enabled(), ['pause', 'stop', 'snapshot']);
    noConsoleErrors();
  });

  it('Snapshot asks for a name and saves it; the Snapshots page lists it and deletes it in two clicks', async () => {
    const { page } = b;
    await page.getByRole('button', { name: 'Snapshot…' }).click();
    await page.getByLabel('Snapshot name').fill(snapshot);
    await page.getByRole('button', { name: 'Take snapshot' }).click();
    await page
      .locator('.page-status .notice.success')
      .filter({ hasText: `snapshots/${snapshot}` })
      .waitFor();
    const got = await s.api('GET', `/api/v1/snapshots/${snapshot}`, { key });
    assert.equal(got.status, 200, got.text);
    assert.equal(got.body.snapshot.sandboxId, id);
    assert.equal(await stateOf(), 'started', 'a snapshot leaves the sandbox started');

    await page.getByRole('link', { name: 'Snapshots', exact: true }).first().click();
    const row = page.locator(`tr[data-snapshot="${snapshot}"]`);
    await row.waitFor();
    assert.match((await row.textContent()) ?? '', new RegExp(`snapshots/${snapshot}`));
    await b.shoot('snapshots');
    await row.getByRole('button', { name: `Delete snapshot ${snapshot}` }).click();
    await row.getByRole('button', { name: `Confirm: delete snapshot ${snapshot}` }).click();
    await page
      .locator('.page-status .notice.success')
      .filter({ hasText: `Snapshot ${snapshot} deleted.` })
      .waitFor();
    await row.waitFor({ state: 'detached' });
    assert.equal((await s.api('GET', `/api/v1/snapshots/${snapshot}`, { key })).status, 404);
    noConsoleErrors();
  });
});
