/**
 * The console's isolation tiers in headless Chromium against the real server: the create
 * form offers the tiers the plan allows (one this host does not offer shown disabled), the
 * sandbox page shows the tier, and a gVisor sandbox has "Pause to disk" (a container's has
 * not), after which the page says where its memory is and Resume brings it back. Every state
 * is checked through the API. Any browser console error fails the test. The gVisor steps
 * skip, naming why, when `/healthz` does not list gvisor (the fake runtime offers it).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { launch, type Browser } from './console-support.js';
import { IMAGE, RUNTIME, startServer, type Server } from './harness.js';

const EMAIL = `isolation-${Date.now()}@example.com`;
const PASSWORD = 'console-isolation-password-1';

describe('browser console: isolation tiers', { timeout: 300_000 }, () => {
  let s: Server;
  let b: Browser;
  let key = '';
  let offered: string[] = [];
  const made: string[] = [];
  const api = (method: string, path: string, body?: unknown) => s.api(method, path, { key, body });
  /**
   * No browser console error. On the fake runtime (which does not simulate listing files) the
   * sandbox page's file browser gets a 500 for `/files?path=/`: that one alone is let through there.
   */
  const noConsoleErrors = () =>
    assert.deepEqual(
      b.errors.filter((e) => !(RUNTIME === 'fake' && /status of 500 .*\/files\?path=%2F/.test(e))),
      [],
      'browser console errors',
    );

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
      body: { name: 'isolation-e2e' },
      headers: { cookie, origin: s.baseUrl },
    });
    assert.equal(k.status, 201, k.text);
    key = k.body.key;
    offered = ((await s.api('GET', '/healthz', { key: null })).body.isolations ?? []).map(
      (t: { isolation: string }) => t.isolation,
    );
    b = await launch();
    await b.page.goto(`${s.baseUrl}/login`);
    await b.page.getByLabel('Email').fill(EMAIL);
    await b.page.getByLabel('Password').fill(PASSWORD);
    await b.page.getByRole('button', { name: 'Sign in' }).click();
    await b.page.getByText('Step 1 of 8').waitFor();
  });
  after(async () => {
    await b?.close();
    for (const id of made) await api('DELETE', `/api/v1/sandboxes/${id}`).catch(() => undefined);
    await s?.stop();
  });

  /** Fills the create form with `tier` and submits; the new sandbox's id. */
  const createWith = async (tier: 'container' | 'gvisor') => {
    const { page } = b;
    await page.goto(`${s.baseUrl}/sandboxes/new`);
    await page.getByLabel('Image').fill(IMAGE);
    await page.getByLabel('Isolation').selectOption(tier);
    await page.getByRole('button', { name: 'Create sandbox' }).click();
    await page.waitForURL(/\/sandboxes\/sbx_/, { timeout: 120_000 });
    const id = new URL(page.url()).pathname.split('/').pop()!;
    made.push(id);
    return id;
  };

  it("the create form offers the plan's tiers (container by default); a container sandbox shows its tier and has no Pause to disk", async () => {
    const { page } = b;
    await page.goto(`${s.baseUrl}/sandboxes/new`);
    const select = page.getByLabel('Isolation');
    assert.equal(await select.inputValue(), 'container', "the plan's default");
    const options = await select
      .locator('option')
      .evaluateAll((os) => os.map((o) => [(o as HTMLOptionElement).value, (o as HTMLOptionElement).disabled]));
    assert.deepEqual(options, [
      ['container', false],
      ['gvisor', !offered.includes('gvisor')],
    ]);
    const id = await createWith('container');
    assert.equal((await api('GET', `/api/v1/sandboxes/${id}`)).body.sandbox.isolation, 'container');
    await page.locator('.isolation[data-isolation="container"]').waitFor();
    assert.equal(await page.getByRole('button', { name: 'Pause to disk' }).count(), 0);
    await page.goto(`${s.baseUrl}/sandboxes`);
    await page.locator(`tr[data-sandbox-id="${id}"] td[data-label="Isolation"]`).getByText('container').waitFor();
    noConsoleErrors();
  });

  it('a gVisor sandbox: its page says so; Pause to disk, then Resume', async (t) => {
    if (!offered.includes('gvisor')) return t.skip(`this host offers no gvisor (/healthz: ${offered.join(', ')})`);
    const { page } = b;
    const id = await createWith('gvisor');
    assert.equal((await api('GET', `/api/v1/sandboxes/${id}`)).body.sandbox.isolation, 'gvisor');
    await page.locator('.isolation[data-isolation="gvisor"]').getByText('gVisor').waitFor();
    // The page is whole (its terminal connected, its files listed) before the pause: the save
    // ends the terminal's shell (a PTY of the host cannot be saved).
    await page.locator('.term-panel[data-state="connected"]').waitFor({ timeout: 60_000 });
    await page.locator('section.files tr[data-path="/bin"]').waitFor({ timeout: 60_000 });
    await page.getByRole('button', { name: 'Pause to disk' }).click();
    await page.getByText('Sandbox paused to disk').waitFor({ timeout: 120_000 });
    assert.deepEqual((await api('GET', `/api/v1/sandboxes/${id}/terminals`)).body.terminals, [], 'the shell ended');
    const paused = (await api('GET', `/api/v1/sandboxes/${id}`)).body.sandbox;
    assert.deepEqual([paused.state, paused.pausedMemory], ['paused', 'disk']);
    await page.locator('.isolation').getByText('paused, memory on disk').waitFor();
    // The page as docs/console.md shows it (docs/screenshots/isolation-desktop.png).
    await b.shoot('isolation');
    assert.ok(await page.getByRole('button', { name: 'Pause to disk' }).isDisabled(), 'not while paused');
    await page.getByRole('button', { name: 'Resume' }).click();
    await page.getByText('Sandbox resumed where it was').waitFor({ timeout: 120_000 });
    const back = (await api('GET', `/api/v1/sandboxes/${id}`)).body.sandbox;
    assert.deepEqual([back.state, back.pausedMemory], ['started', undefined]);
    // The restored sandbox serves the page: its files, and a new terminal that runs a command.
    await page.reload();
    await page.locator('section.files tr[data-path="/bin"]').waitFor({ timeout: 60_000 });
    await page.locator('.term-panel:not([hidden])[data-state="connected"]').waitFor({ timeout: 60_000 });
    noConsoleErrors();
  });
});
