/**
 * The console's Secrets page in headless Chromium against the real server: reached from the
 * navigation; a secret added with the value in a password field (cleared on submit, never in
 * the page, its storage or the URL), updated (version 2), a bad value refused at the field
 * with nothing sent, deleted in two clicks; the audit table of injections filtered by sandbox
 * and by secret, and paged. Every state is checked through the API. The injections are
 * written into the server's database by the test (the egress proxy makes them in real use:
 * its own suites). Any browser console error fails the test. Any runtime (no sandbox runs).
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SqliteStore } from '../../packages/server/src/store/sqlite/store.js';
import { launch, type Browser } from './console-support.js';
import { startServer, type Server } from './harness.js';

const EMAIL = `secrets-${Date.now()}@example.com`;
const PASSWORD = 'console-secrets-password-1';
const VALUE = `sk-console-VALUE-${process.pid}-abcdef`;
const VALUE2 = `sk-console-VALUE2-${process.pid}-123456`;
const SBX_A = 'sbx_aaaaaaaaaaaaaaaaaaaa';
const SBX_B = 'sbx_bbbbbbbbbbbbbbbbbbbb';
const SBX_C = 'sbx_cccccccccccccccccccc';

describe('browser console: secrets', { timeout: 300_000 }, () => {
  let s: Server;
  let b: Browser;
  let key = '';
  let accountId = '';
  const api = (method: string, path: string, body?: unknown) => s.api(method, path, { key, body });
  const noConsoleErrors = () => assert.deepEqual(b.errors, [], 'browser console errors');
  /** Neither value anywhere in the page: its DOM (inputs' values included), storage and URL. */
  const nowhere = async () => {
    const page = b.page;
    const seen = [
      await page.content(),
      await page.evaluate(() =>
        JSON.stringify([
          [...document.querySelectorAll('input')].map((i) => i.value),
          Object.entries(localStorage),
          Object.entries(sessionStorage),
          location.href,
        ]),
      ),
    ].join('\n');
    assert.ok(!seen.includes(VALUE) && !seen.includes(VALUE2), 'a secret value is in the page');
  };

  before(async () => {
    s = await startServer();
    const a = await s.api('POST', '/api/v1/admin/accounts', {
      body: { email: EMAIL, password: PASSWORD, tokens: 1000 },
    });
    assert.equal(a.status, 201, a.text);
    const login = await s.api('POST', '/api/v1/auth/login', { key: null, body: { email: EMAIL, password: PASSWORD } });
    const cookie = String(login.headers.get('set-cookie')).split(';')[0];
    const k = await s.api('POST', '/api/v1/keys', {
      key: null,
      body: { name: 'secrets-e2e' },
      headers: { cookie, origin: s.baseUrl },
    });
    assert.equal(k.status, 201, k.text);
    key = k.body.key;
    accountId = (await api('GET', '/api/v1/account')).body.id;
    b = await launch();
    await b.page.goto(`${s.baseUrl}/login`);
    await b.page.getByLabel('Email').fill(EMAIL);
    await b.page.getByLabel('Password').fill(PASSWORD);
    await b.page.getByRole('button', { name: 'Sign in' }).click();
    await b.page.getByText('Step 1 of 8').waitFor();
  });
  after(async () => {
    await b?.close();
    await s?.stop();
  });

  it('adds a secret from a password field that is cleared on submit; the value is never in the page', async () => {
    const { page } = b;
    await page.getByRole('link', { name: 'Secrets' }).click();
    await page.getByRole('heading', { name: 'Secrets', level: 1 }).waitFor();
    await page.getByText('No secrets yet.').waitFor();
    const value = page.getByLabel('Value');
    assert.equal(await value.getAttribute('type'), 'password');
    await page.getByLabel('Name').fill('OPENAI');
    await value.fill(VALUE);
    await page.getByLabel('Description').fill('prod key');
    await page.getByRole('button', { name: 'Save secret' }).click();
    await page.getByText('Secret "OPENAI" created.').waitFor();
    const row = page.locator('tr[data-secret="OPENAI"]');
    await row.waitFor();
    assert.deepEqual(await row.locator('td').evaluateAll((tds) => tds.slice(0, 3).map((t) => t.textContent)), [
      'OPENAI',
      'prod key',
      '1',
    ]);
    assert.equal(await value.inputValue(), '');
    const got = await api('GET', '/api/v1/secrets/OPENAI');
    assert.equal(got.status, 200, got.text);
    assert.equal(got.body.secret.description, 'prod key');
    await nowhere();
    await b.shoot('secrets');
    noConsoleErrors();
  });

  it('updates it (version 2) from its row; a bad value or name is refused at the field and nothing is sent', async () => {
    const { page } = b;
    await page.getByRole('button', { name: 'Update secret OPENAI' }).click();
    assert.equal(await page.getByLabel('Name').inputValue(), 'OPENAI');
    await page.getByLabel('Value').fill(VALUE2);
    await page.getByRole('button', { name: 'Save secret' }).click();
    await page.getByText('Secret "OPENAI" updated to version 2.').waitFor();
    await page.locator('tr[data-secret="OPENAI"] td[data-label="Version"]', { hasText: '2' }).waitFor();
    assert.equal((await api('GET', '/api/v1/secrets/OPENAI')).body.secret.version, 2);

    await page.getByLabel('Name').fill('OPENAI');
    await page.getByLabel('Value').fill('caf\u00e9 au lait');
    await page.getByRole('button', { name: 'Save secret' }).click();
    await page.locator('#secret-value-error', { hasText: 'printable ASCII only' }).waitFor();
    assert.equal(await page.getByLabel('Value').inputValue(), '', 'cleared even when refused');
    await page.getByLabel('Name').fill('1bad name');
    await page.getByLabel('Value').fill(VALUE);
    await page.getByRole('button', { name: 'Save secret' }).click();
    await page.locator('#secret-name-error', { hasText: 'A letter or _' }).waitFor();
    assert.equal((await api('GET', '/api/v1/secrets/OPENAI')).body.secret.version, 2, 'nothing sent');
    assert.equal((await api('GET', '/api/v1/secrets')).body.secrets.length, 1);
    await nowhere();
    noConsoleErrors();
  });

  it('shows the injections, newest first, filtered by sandbox and by secret, and pages to older ones', async () => {
    const { page } = b;
    // The page afresh: the form as a user finds it.
    await page.getByRole('link', { name: 'Sandboxes' }).click();
    await page.getByRole('link', { name: 'Secrets' }).click();
    await page.getByRole('heading', { name: 'Secrets', level: 1 }).waitFor();
    const t0 = Date.parse('2026-06-01T12:00:00Z');
    const row = (i: number, sandboxId: string, secret: string, status: number | null) => ({
      id: `inj_test_${String(i).padStart(4, '0')}`,
      accountId,
      sandboxId,
      secret,
      destination: 'api.openai.com:443',
      method: i % 2 ? 'GET' : 'POST',
      status,
      error: status === null ? 'upstream refused the connection' : null,
      at: t0 + i * 1000,
    });
    const db = new SqliteStore(join(s.dataDir, 'sandboxd.db'));
    try {
      await db.addInjections([
        row(1, SBX_A, 'OPENAI', 200),
        row(2, SBX_A, 'GH', 401),
        row(3, SBX_B, 'OPENAI', null),
        ...Array.from({ length: 55 }, (_, i) => row(100 + i, SBX_C, 'OPENAI', 200)),
      ]);
    } finally {
      await db.close();
    }
    await page.getByRole('button', { name: 'Filter' }).click();
    const rows = page.locator('table[aria-label="Injections"] tbody tr');
    await page.locator('tr[data-injection="inj_test_0154"]').waitFor();
    assert.equal(await rows.count(), 50, 'one page');
    assert.equal(await rows.first().getAttribute('data-injection'), 'inj_test_0154', 'newest first');
    await page.getByRole('button', { name: 'Older injections' }).click();
    await page.locator('tr[data-injection="inj_test_0001"]').waitFor();
    assert.equal(await rows.count(), 58);
    await page.getByRole('button', { name: 'Older injections' }).waitFor({ state: 'hidden' });

    await page.getByLabel('Sandbox', { exact: true }).fill(SBX_A);
    await page.getByRole('button', { name: 'Filter' }).click();
    // The unfiltered table had these rows too: wait for it to be replaced.
    await page.locator('tr[data-injection="inj_test_0154"]').waitFor({ state: 'detached' });
    assert.deepEqual(await rows.evaluateAll((trs) => trs.map((t) => t.getAttribute('data-injection'))), [
      'inj_test_0002',
      'inj_test_0001',
    ]);
    assert.match((await rows.first().textContent())!, /GH.*POST api\.openai\.com:443.*401/);
    // The page as docs/console.md shows it (docs/screenshots/secrets-desktop.png).
    await b.shoot('secrets-audit-filtered');
    await page.getByLabel('Sandbox', { exact: true }).fill('');
    await page.getByLabel('Secret', { exact: true }).selectOption('OPENAI');
    await page.getByLabel('Sandbox', { exact: true }).fill(SBX_B);
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.locator('tr[data-injection="inj_test_0003"]').waitFor();
    assert.equal(await rows.count(), 1);
    assert.match((await rows.first().textContent())!, /no answer: upstream refused the connection/);
    await page.getByLabel('Sandbox', { exact: true }).fill('sbx_nothing');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.getByText('No injections match.').waitFor();
    await b.shoot('secrets-audit');
    noConsoleErrors();
  });

  it('deletes a secret in two clicks', async () => {
    const { page } = b;
    const row = page.locator('tr[data-secret="OPENAI"]');
    await row.getByRole('button', { name: 'Delete secret OPENAI' }).click();
    assert.equal((await api('GET', '/api/v1/secrets/OPENAI')).status, 200, 'one click deletes nothing');
    await row.getByRole('button', { name: 'Confirm: delete secret OPENAI' }).click();
    await row.waitFor({ state: 'detached' });
    await page.getByText('No secrets yet.').waitFor();
    assert.equal((await api('GET', '/api/v1/secrets/OPENAI')).status, 404);
    assert.ok(!s.stdout().includes(VALUE) && !s.stdout().includes(VALUE2), 'a value is in the server log');
    noConsoleErrors();
  });
});
