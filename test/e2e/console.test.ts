/**
 * The browser console in headless Chromium against the real server (and, under `npm test`,
 * the real crun runtime): login link, sign-in, the whole onboarding (stored events checked
 * through the API), API keys, sandbox creation with server validation at the field, a web
 * terminal (echo, resize, tabs), delete. Any browser console error fails the test.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { IMAGE, startServer, type Server } from './harness.js';
import {
  dropSockets,
  launch,
  PHONE,
  screenLines,
  socketCount,
  typeCommand,
  waitForLine,
  type Browser,
} from './console-support.js';

const EMAIL = `console-${Date.now()}@example.com`;
const PASSWORD = 'console-password-1';
const STEPS = [
  'welcome',
  'setup_workspace',
  'verify_nodejs',
  'create_token',
  'export_token',
  'install_sdk',
  'create_script',
  'run_script',
].map((s, i) => `onboarding.step_${i + 1}_${s}`);

describe('browser console', { timeout: 600_000 }, () => {
  let s: Server;
  let b: Browser;
  let key = ''; // the key made during onboarding: the test reads the API as the account with it
  const url = (path: string) => `${s.baseUrl}${path}`;
  /** Fails on any console error so far except the ones `allowed` names (each must have happened). */
  const noConsoleErrors = (allowed: RegExp[] = []) => {
    for (const re of allowed) {
      const i = b.errors.findIndex((e) => re.test(e));
      assert.ok(i >= 0, `expected a console error matching ${re}; got ${JSON.stringify(b.errors)}`);
      b.errors.splice(i, 1);
    }
    assert.deepEqual(b.errors, [], 'browser console errors');
  };

  before(async () => {
    s = await startServer();
    const a = await s.api('POST', '/api/v1/admin/accounts', {
      body: { email: EMAIL, password: PASSWORD, tokens: 10_000 },
    });
    assert.equal(a.status, 201, a.text);
    b = await launch();
  });
  after(async () => {
    await b?.close();
    if (s && key) {
      const list = await s.api('GET', '/api/v1/sandboxes?state=started', { key });
      for (const sb of list.body?.sandboxes ?? []) await s.api('DELETE', `/api/v1/sandboxes/${sb.id}`, { key });
    }
    await s?.stop();
  });

  it('serves the console with its content types and a strict CSP, never shadowing the API', async () => {
    const page = await fetch(url('/sandboxes/sbx_abc'));
    assert.equal(page.status, 200);
    assert.match(page.headers.get('content-type')!, /^text\/html/);
    const csp = page.headers.get('content-security-policy')!;
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'self'(;|$)/);
    const html = await page.text();
    const js = /src="(\/assets\/app-[^"]+\.js)"/.exec(html)![1];
    const css = /href="(\/assets\/app-[^"]+\.css)"/.exec(html)![1];
    const script = await fetch(url(js), { headers: { 'accept-encoding': 'gzip' } });
    assert.match(script.headers.get('content-type')!, /^text\/javascript/);
    assert.equal(script.headers.get('content-encoding'), 'gzip');
    assert.match(await script.text(), /xterm/); // fetch decompresses
    assert.match((await fetch(url(css))).headers.get('content-type')!, /^text\/css/);
    const api = await fetch(url('/api/v1/nope'));
    assert.equal(api.status, 404);
    assert.match(api.headers.get('content-type')!, /json/);
    assert.equal((await fetch(url('/healthz'))).status, 200);
    assert.equal((await fetch(url('/metrics'))).status, 200);
  });

  it('the first-start login link lands signed in; sign-out returns to the sign-in page', async () => {
    const link = /One-time login link \(24 h\): (\S+)/.exec(s.stdout())?.[1];
    assert.ok(link, 'the server printed a login link');
    await b.page.goto(link!.replace(/^http:\/\/[^/]+/, s.baseUrl));
    await b.page.getByRole('heading', { name: 'Get started' }).waitFor();
    assert.equal(new URL(b.page.url()).pathname, '/onboarding');
    await b.page.getByText('admin@localhost').waitFor();
    await b.page.getByRole('button', { name: 'Sign out' }).click();
    await b.page.getByRole('heading', { name: 'Sign in to your console' }).waitFor();
    await b.shoot('login');
    noConsoleErrors();
  });

  it('signs in with email and password (keyboard only) and walks the whole onboarding, resuming after a reload', async () => {
    const { page } = b;
    // Keyboard only: the email field has focus; Tab to the password; Enter submits.
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'email');
    await page.keyboard.type(EMAIL);
    await page.keyboard.press('Tab');
    await page.keyboard.type(PASSWORD);
    await page.keyboard.press('Enter');
    await page.getByText('Step 1 of 8').waitFor();
    await b.shoot('onboarding-1-welcome');
    const next = () => page.getByRole('button', { name: 'Continue' }).click();
    for (const n of [2, 3]) {
      await next();
      await page.getByText(`Step ${n} of 8`).waitFor();
    }
    await page.getByText('node --version').waitFor();
    await page.getByText('Node.js 20 or newer').waitFor();
    await next();
    await page.getByRole('button', { name: 'Create API key' }).click();
    key = (await page.locator('.code.secret pre').textContent())!.trim();
    assert.match(key, /^sk_[A-Za-z0-9]{40}$/);
    await page.getByRole('button', { name: 'Copy API key' }).waitFor();
    await b.shoot('onboarding-4-token', { dark: true });
    await next();
    await page.getByText(`export SANDBOX_API_KEY=${key}`).waitFor();
    await next();
    await page.getByText('Step 6 of 8').waitFor();
    await next();
    await page.getByText('Sandbox.create(').waitFor();
    await b.shoot('onboarding-7-script');
    await next();
    await page.getByText('Step 8 of 8').waitFor();

    // Everything up to step 8 is stored; a reload resumes there.
    const events = async () =>
      (await s.api('GET', '/api/v1/events', { key })).body.events.map((e: { event: string }) => e.event) as string[];
    for (let i = 0; i < 100 && (await events()).length < 9; i++) await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(await events(), ['onboarding.started', ...STEPS]);
    await page.reload();
    await page.getByText('Step 8 of 8').waitFor();
    await page.getByRole('button', { name: 'Finish' }).click();
    await page.getByRole('heading', { name: 'Sandboxes', exact: true }).waitFor();
    assert.deepEqual(await events(), ['onboarding.started', ...STEPS, 'onboarding.completed']);
    noConsoleErrors();
  });

  it('API keys: create one (shown once), see it listed, revoke it', async () => {
    const { page } = b;
    await page.getByRole('link', { name: 'API keys' }).click();
    await page.getByLabel('Name').fill('laptop');
    await page.getByRole('button', { name: 'Create key' }).click();
    const shown = (await page.locator('.code.secret pre').textContent())!.trim();
    assert.match(shown, /^sk_/);
    const row = page.locator('tr', { hasText: 'laptop' });
    await row.waitFor();
    assert.match((await row.textContent())!, new RegExp(shown.slice(0, 8)));
    assert.equal((await s.api('GET', '/api/v1/account', { key: shown })).status, 200);
    await b.shoot('keys');
    await row.getByRole('button', { name: 'Revoke key laptop' }).click();
    await row.getByRole('button', { name: 'Confirm: revoke key laptop' }).click();
    await row.waitFor({ state: 'detached' });
    assert.equal((await s.api('GET', '/api/v1/account', { key: shown })).status, 401);
    noConsoleErrors();
  });

  it('creates a sandbox (server validation shown at the field), uses its web terminal, deletes it', async () => {
    const { page } = b;
    await page.getByRole('link', { name: 'Sandboxes' }).click();
    await page.getByRole('link', { name: 'New sandbox' }).click();
    await page.getByLabel('Image').fill(IMAGE);
    await page.getByLabel('Environment variables').fill('GREETING=hello from env');
    await page.getByLabel('Volumes').fill('/data=Not-A-Valid-Name');
    await page.getByLabel('Lifetime (minutes)').fill('10');
    await page.getByRole('button', { name: 'Create sandbox' }).click();
    const volErr = page.locator('#volumes-error');
    await volErr.waitFor();
    assert.match((await volErr.textContent())!, /\S/);
    assert.equal(await page.getByLabel('Volumes').getAttribute('aria-invalid'), 'true');
    await b.shoot('sandbox-create-invalid');
    noConsoleErrors([/status of 400/]); // the browser logs the refused request itself

    await page.getByLabel('Volumes').fill('');
    await page.getByRole('button', { name: 'Create sandbox' }).click();
    await page.waitForURL(/\/sandboxes\/sbx_/, { timeout: 120_000 });
    const id = new URL(page.url()).pathname.split('/').pop()!;
    assert.equal((await s.api('GET', `/api/v1/sandboxes/${id}`, { key })).body.sandbox.state, 'started');
    await page.locator('.term-panel[data-state="connected"]').waitFor({ timeout: 60_000 });

    // Lifetime: longer, shorter, and the server's limit shown at the field.
    const stopAt = async () => Date.parse((await s.api('GET', `/api/v1/sandboxes/${id}`, { key })).body.sandbox.stopAt);
    const before = await stopAt();
    await page.getByRole('button', { name: '+10 min' }).click();
    await page.getByText('Lifetime updated').waitFor();
    const longer = await stopAt();
    assert.ok(longer > before, 'extended');
    await page.getByLabel('Stop in (minutes from now)').fill('120');
    await page.getByRole('button', { name: 'Set lifetime' }).click();
    await page
      .locator('#lifetime-error')
      .getByText(/timeoutMs must be at most/)
      .waitFor();
    noConsoleErrors([/status of 400/]);
    await page.getByRole('button', { name: '−5 min' }).click();
    await page.waitForFunction(() => !document.querySelector('#lifetime-error:not([hidden])'));
    assert.ok((await stopAt()) < longer, 'shortened');
    const portUrl = await page.locator('.port-link a').getAttribute('href');
    assert.equal(portUrl, `http://8000-${id}.sandbox.localhost:${s.port}`);
    await page.getByText('1 / 5').waitFor(); // running sandboxes of the plan's limit

    await typeCommand(page, 'echo hi');
    await waitForLine(page, 'hi');
    await typeCommand(page, 'echo "$GREETING"');
    await waitForLine(page, 'hello from env');
    await page.keyboard.press('F6'); // leaves the terminal for its tab
    assert.equal(await page.evaluate(() => document.activeElement?.getAttribute('role')), 'tab');

    // Resize: the PTY follows the window.
    const panel = page.locator('.term-panel:not([hidden])');
    const cols = Number(await panel.getAttribute('data-cols'));
    await page.setViewportSize(PHONE);
    await page.waitForFunction(
      (c) => Number(document.querySelector('.term-panel:not([hidden])')?.getAttribute('data-cols')) < c,
      cols,
    );
    const [rows2, cols2] = [await panel.getAttribute('data-rows'), await panel.getAttribute('data-cols')];
    await typeCommand(page, 'stty size');
    await waitForLine(page, `${rows2} ${cols2}`);
    await page.setViewportSize({ width: 1280, height: 800 });
    await page.waitForFunction(
      (c) => Number(document.querySelector('.term-panel:not([hidden])')?.getAttribute('data-cols')) > c,
      Number(cols2),
    );

    // A second tab is a second shell.
    await page.getByRole('button', { name: '+ New terminal' }).click();
    await page.getByRole('tab', { name: 'Shell 2' }).waitFor();
    await page.locator('.term-panel:not([hidden])[data-state="connected"]').waitFor({ timeout: 60_000 });
    await typeCommand(page, 'echo second-$((20+22))');
    await waitForLine(page, 'second-42');
    assert.ok(!(await screenLines(page)).includes('hi'), 'the new tab is a fresh shell');
    const terms = (await s.api('GET', `/api/v1/sandboxes/${id}/terminals`, { key })).body.terminals;
    assert.equal(terms.length, 2);
    await page.getByRole('tab', { name: 'Shell 1' }).click();
    await waitForLine(page, 'hi');
    await typeCommand(page, 'id');
    await page.waitForFunction(() =>
      [...document.querySelectorAll('.term-panel:not([hidden]) .xterm-rows > div')].some((r) =>
        r.textContent?.startsWith('uid=0'),
      ),
    );
    await b.shoot('sandbox-detail', { dark: true });

    // A dropped connection: both tabs reconnect, and the screen is redrawn from the replay.
    const opened = await dropSockets(page);
    await page.waitForFunction(
      (n) => {
        const all = (window as unknown as { __sockets: WebSocket[] }).__sockets;
        return all.length >= n + 2 && all.slice(n).filter((w) => w.readyState === WebSocket.OPEN).length === 2;
      },
      opened,
      { timeout: 60_000 },
    );
    await page.locator('.term-panel:not([hidden])[data-state="connected"]').waitFor();
    await waitForLine(page, 'hi');
    await typeCommand(page, 'echo back-$((1+1))');
    await waitForLine(page, 'back-2');
    assert.equal((await socketCount(page)).open, 2);

    // The shell of tab 2 ends: its exit code is shown, and it leaves the terminal list.
    await page.getByRole('tab', { name: 'Shell 2' }).click();
    await page.locator('.term-panel:not([hidden])[data-state="connected"]').waitFor();
    await typeCommand(page, 'exit 3');
    await page.locator('.term-panel:not([hidden])[data-state="exited"]').waitFor();
    assert.equal(
      await page.locator('.term-panel:not([hidden]) .term-status').textContent(),
      'Shell exited with code 3.',
    );
    assert.deepEqual(
      (await s.api('GET', `/api/v1/sandboxes/${id}/terminals`, { key })).body.terminals.map((t: { id: string }) => t.id)
        .length,
      1,
    );

    await page.getByRole('link', { name: 'Sandboxes', exact: true }).first().click();
    await page.locator(`tr[data-sandbox-id="${id}"] time.countdown`).waitFor();
    await b.shoot('sandboxes');
    await page.locator(`tr[data-sandbox-id="${id}"] a`).click();
    await page.locator('.term-panel:not([hidden])[data-state="connected"]').waitFor({ timeout: 60_000 });
    await waitForLine(page, 'back-2'); // replayed
    assert.equal(await page.getByRole('tab').count(), 1, 'returning re-attaches the running shell');

    await page.getByRole('button', { name: 'Delete sandbox' }).click();
    await page.getByRole('button', { name: 'Confirm delete' }).click();
    await page.getByText('Sandbox deleted').waitFor();
    await page.locator('.term-panel:not([hidden])[data-state="exited"]').waitFor();
    assert.match(
      (await page.locator('.term-panel:not([hidden]) .term-status').textContent())!,
      /Shell exited with code \d+/,
    );
    assert.equal((await s.api('GET', `/api/v1/sandboxes/${id}`, { key })).status, 404);
    await b.shoot('sandbox-deleted');
    noConsoleErrors();
  });
  it('signs up; skipping onboarding is stored, and / then opens the sandboxes', async () => {
    const { page } = b;
    const email = `skip-${Date.now()}@example.com`;
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('link', { name: 'Create one' }).click();
    await page.getByRole('heading', { name: 'Create your account' }).waitFor();
    await b.shoot('signup');
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Create account' }).click();
    await page.getByText('Step 1 of 8').waitFor();
    await page.getByText(email).waitFor();
    await page.getByRole('button', { name: 'Skip onboarding' }).click();
    await page.getByRole('heading', { name: 'Sandboxes', exact: true }).waitFor();
    const login = await s.api('POST', '/api/v1/auth/login', { key: null, body: { email, password: PASSWORD } });
    const cookie = String(login.headers.get('set-cookie')).split(';')[0];
    const events = (await s.api('GET', '/api/v1/events', { key: null, headers: { cookie } })).body.events.map(
      (e: { event: string }) => e.event,
    );
    assert.deepEqual(events, ['onboarding.started', STEPS[0], 'onboarding.skipped']);
    await page.goto(url('/'));
    await page.getByRole('heading', { name: 'Sandboxes', exact: true }).waitFor();
    assert.equal(new URL(page.url()).pathname, '/sandboxes');
    noConsoleErrors();
  });
});
