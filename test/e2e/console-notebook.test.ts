/**
 * The console's notebook panel in headless Chromium against the real server and a sandbox of
 * `local/code-interpreter`: cells run with Shift+Enter keep their state (`x = 21`, then
 * `x * 2` shows 42 and `[2]`); a matplotlib plot is an image, a DataFrame a table of its
 * cells, an error its traceback without ANSI escapes; HTML output runs in a sandboxed frame
 * whose script can touch neither the console's DOM, its cookies nor its location; Interrupt
 * ends `time.sleep(60)` and the next cell runs; the notebook survives a reload; and a
 * sandbox of `local/debian` says it has no code interpreter, naming the image. Any browser
 * console error fails the test, except the ones each step expects.
 */
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Page } from 'playwright-core';
import { startServer, type Server } from './harness.js';
import { launch, SHOTS, type Browser } from './console-support.js';

const CI_IMAGE = 'local/code-interpreter';
const PLAIN_IMAGE = 'local/debian:bookworm';
const EMAIL = `notebook-${Date.now()}@example.com`;
const PASSWORD = 'console-notebook-password-1';

/** The textarea, count, output and state of cell `n` (1-based). */
const cell = (page: Page, n: number) => page.locator(`section.notebook .nb-cell[data-cell="${n}"]`);
const countOf = (page: Page, n: number) => cell(page, n).locator('.nb-count').textContent();

/** Waits (bounded) until cell `n` is no longer queued or running. */
async function settled(page: Page, n: number, timeout = 120_000): Promise<void> {
  await page.waitForFunction(
    (sel) => document.querySelector(sel)?.getAttribute('data-state') === 'idle',
    `section.notebook .nb-cell[data-cell="${n}"]`,
    { timeout },
  );
}

/** Puts `code` in cell `n` (added when missing), runs it with its Run button and waits for the end. */
async function run(page: Page, n: number, code: string): Promise<void> {
  if ((await cell(page, n).count()) === 0) await page.getByRole('button', { name: '+ Add cell' }).click();
  await page.getByLabel(`Code of cell ${n}`, { exact: true }).fill(code);
  await page.getByRole('button', { name: `Run cell ${n}`, exact: true }).click();
  await settled(page, n);
}

describe('browser console: notebook', { timeout: 600_000 }, () => {
  let s: Server;
  let b: Browser;
  let key = '';
  let ciId = '';
  let plainId = '';
  const noConsoleErrors = (allowed: RegExp[] = []) => {
    for (const re of allowed) {
      const before = b.errors.length;
      b.errors.splice(0, b.errors.length, ...b.errors.filter((e) => !re.test(e)));
      assert.ok(b.errors.length < before, `expected a console error matching ${re}; got ${JSON.stringify(b.errors)}`);
    }
    assert.deepEqual(b.errors, [], 'browser console errors');
  };

  before(async () => {
    // A loaded machine may take longer than the default 60 s to start the image's kernel.
    s = await startServer({ env: { SANDBOXD_SERVICE_START_TIMEOUT_MS: '180000' } });
    const a = await s.api('POST', '/api/v1/admin/accounts', {
      body: { email: EMAIL, password: PASSWORD, tokens: 10_000 },
    });
    assert.equal(a.status, 201, a.text);
    const login = await s.api('POST', '/api/v1/auth/login', { key: null, body: { email: EMAIL, password: PASSWORD } });
    const cookie = String(login.headers.get('set-cookie')).split(';')[0];
    const k = await s.api('POST', '/api/v1/keys', {
      key: null,
      body: { name: 'notebook-e2e' },
      headers: { cookie, origin: s.baseUrl },
    });
    assert.equal(k.status, 201, k.text);
    key = k.body.key;
    const ci = await s.api('POST', '/api/v1/sandboxes', { key, body: { image: CI_IMAGE, timeoutMs: 900_000 } });
    assert.equal(ci.status, 201, ci.text);
    ciId = ci.body.sandbox.id;
    const plain = await s.api('POST', '/api/v1/sandboxes', { key, body: { image: PLAIN_IMAGE, timeoutMs: 900_000 } });
    assert.equal(plain.status, 201, plain.text);
    plainId = plain.body.sandbox.id;
    b = await launch();
    const { page } = b;
    await page.goto(`${s.baseUrl}/login`);
    await page.getByLabel('Email').fill(EMAIL);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByText('Step 1 of 8').waitFor();
  });
  after(async () => {
    await b?.close();
    for (const id of [ciId, plainId]) if (s && key && id) await s.api('DELETE', `/api/v1/sandboxes/${id}`, { key });
    await s?.stop();
  });

  it('keeps state between cells run with Shift+Enter: x = 21, then x * 2 shows 42 and [2]', async () => {
    const { page } = b;
    await page.goto(`${s.baseUrl}/sandboxes/${ciId}`);
    await page.getByRole('heading', { name: 'Notebook', exact: true }).waitFor();
    assert.equal(await page.getByLabel('Language').inputValue(), 'python');
    assert.equal(await countOf(page, 1), '[ ]');
    const first = page.getByLabel('Code of cell 1', { exact: true });
    await first.click();
    await page.keyboard.type('x = 21');
    await page.keyboard.press('Shift+Enter');
    // Shift+Enter runs the cell and moves to a new one, as in Jupyter.
    await cell(page, 2).waitFor();
    assert.equal(
      await page.evaluate(() => document.activeElement?.id),
      await page.getByLabel('Code of cell 2', { exact: true }).getAttribute('id'),
    );
    await settled(page, 1);
    assert.equal(await countOf(page, 1), '[1]');
    assert.equal(await cell(page, 1).locator('.nb-out > *').count(), 0, 'an assignment shows nothing');
    await page.keyboard.type('x * 2');
    await page.keyboard.press('Shift+Enter');
    await settled(page, 2);
    assert.equal(await countOf(page, 2), '[2]');
    assert.equal((await cell(page, 2).locator('.nb-result.main .nb-text').textContent())?.trim(), '42');
    noConsoleErrors();
  });

  it('shows a matplotlib plot as an image, a DataFrame as a table, and print output as text', async () => {
    const { page } = b;
    await run(
      page,
      3,
      [
        'import matplotlib.pyplot as plt',
        'fig, ax = plt.subplots(figsize=(5, 3))',
        "ax.plot([1, 2, 3, 4], [1, 4, 9, 16], marker='o')",
        "ax.set_title('squares')",
        "print('plotting')",
        'plt.show()',
      ].join('\n'),
    );
    assert.equal((await cell(page, 3).locator('.nb-stream.stdout').textContent())?.trim(), 'plotting');
    const img = cell(page, 3).locator('img.nb-image');
    await img.waitFor();
    assert.match(String(await img.getAttribute('src')), /^data:image\/png;base64,/);
    // Decoded: the page's policy allows data: images.
    await page.waitForFunction((el) => (el as HTMLImageElement).complete, await img.elementHandle());
    assert.ok((await img.evaluate((el) => (el as HTMLImageElement).naturalWidth)) > 100, 'the plot is drawn');

    await run(page, 4, "import pandas as pd\npd.DataFrame({'name': ['ada', 'bob'], 'score': [3, 5]})");
    const table = cell(page, 4).locator('table.nb-table');
    await table.waitFor();
    const rows = await table
      .locator('tr')
      .evaluateAll((trs) => trs.map((tr) => [...tr.children].map((c) => (c.textContent ?? '').trim())));
    assert.ok(
      rows.some((r) => r.includes('name') && r.includes('score')),
      `a header row: ${JSON.stringify(rows)}`,
    );
    assert.ok(
      rows.some((r) => r.includes('ada') && r.includes('3')),
      `ada's row: ${JSON.stringify(rows)}`,
    );
    assert.ok(
      rows.some((r) => r.includes('bob') && r.includes('5')),
      `bob's row: ${JSON.stringify(rows)}`,
    );
    assert.equal(await cell(page, 4).locator('iframe, style, script').count(), 0, 'cells copied as text only');
    noConsoleErrors();
  });

  it('shows an error with its name, value and traceback, without ANSI escapes', async () => {
    const { page } = b;
    await run(page, 5, 'def divide(a):\n    return a / 0\n\ndivide(x)');
    const err = cell(page, 5).locator('.nb-error');
    await err.waitFor();
    assert.equal(await err.locator('.nb-error-name').textContent(), 'ZeroDivisionError');
    assert.match(String(await err.locator('.nb-error-head').textContent()), /division by zero/);
    const tb = String(await err.locator('.nb-traceback').textContent());
    assert.match(tb, /divide/);
    assert.match(tb, /ZeroDivisionError/);
    // biome-ignore lint/suspicious/noControlCharactersInRegex: looking for escapes left in
    assert.doesNotMatch(tb, /\x1b|\[0;3\dm/);
    assert.equal(await countOf(page, 5), '[5]');
    noConsoleErrors();
  });

  it('isolates HTML output: its script cannot read cookies, change the console or navigate it', async () => {
    const { page } = b;
    const url = page.url();
    // A cookie the page's scripts can read (the session cookie is HttpOnly).
    await b.context.addCookies([{ name: 'probe', value: 'console', url: s.baseUrl }]);
    const title = await page.title();
    const attack = [
      '<p id="inside">isolated html</p>',
      '<script>',
      'document.body.setAttribute("data-ran", "yes");',
      'try { parent.document.body.setAttribute("data-pwned", parent.document.cookie); } catch (e) {}',
      'try { parent.document.title = "pwned"; } catch (e) {}',
      'try { parent.document.cookie = "pwned=1"; } catch (e) {}',
      'try { top.location = "/keys#pwned"; } catch (e) {}',
      '</script>',
    ].join('\n');
    await run(page, 6, `from IPython.display import HTML, display\ndisplay(HTML(${JSON.stringify(attack)}))`);
    const frame = cell(page, 6).locator('iframe.nb-html');
    await frame.waitFor();
    assert.equal(await frame.getAttribute('sandbox'), '', 'no allow-scripts, no allow-same-origin');
    const inner = page.frameLocator(`section.notebook .nb-cell[data-cell="6"] iframe.nb-html`);
    assert.equal(await inner.locator('#inside').textContent(), 'isolated html');
    assert.equal(await inner.locator('body').getAttribute('data-ran'), null, 'the script did not run');
    assert.equal(page.url(), url, 'no navigation');
    assert.equal(await page.title(), title);
    assert.equal(await page.evaluate(() => document.body.getAttribute('data-pwned')), null);
    assert.equal(await page.evaluate(() => document.cookie), 'probe=console');
    // The session is intact: the page still works.
    await run(page, 7, 'x + 1');
    assert.equal((await cell(page, 7).locator('.nb-result.main .nb-text').textContent())?.trim(), '22');
    noConsoleErrors([/Blocked script execution in 'about:srcdoc'|Refused to execute inline script/]);
  });

  it('interrupts a long run; the next cell runs in the same kernel', async () => {
    const { page } = b;
    await page.getByRole('button', { name: '+ Add cell' }).click();
    await page
      .getByLabel('Code of cell 8', { exact: true })
      .fill("import time\nprint('sleeping', flush=True)\ntime.sleep(60)\nprint('woke')");
    await page.getByRole('button', { name: 'Run cell 8', exact: true }).click();
    await cell(page, 8).locator('.nb-stream.stdout', { hasText: 'sleeping' }).waitFor({ timeout: 60_000 });
    assert.equal(await cell(page, 8).getAttribute('data-state'), 'running');
    assert.equal(await countOf(page, 8), '[*]');
    await page.getByRole('button', { name: 'Interrupt cell 8', exact: true }).click();
    await settled(page, 8, 30_000);
    await cell(page, 8).locator('.nb-note', { hasText: 'Interrupted.' }).waitFor();
    await run(page, 9, "print('after', x)");
    assert.equal((await cell(page, 9).locator('.nb-stream.stdout').textContent())?.trim(), 'after 21');
    assert.doesNotMatch(String(await cell(page, 8).textContent()), /woke/);
    noConsoleErrors();
  });

  it('keeps the notebook across a reload, and saves screenshots', async () => {
    const { page } = b;
    await page.reload();
    await cell(page, 9).waitFor();
    assert.equal(await page.getByLabel('Code of cell 2', { exact: true }).inputValue(), 'x * 2');
    assert.equal(await countOf(page, 2), '[2]');
    assert.equal((await cell(page, 2).locator('.nb-result.main .nb-text').textContent())?.trim(), '42');
    assert.equal(await cell(page, 4).locator('table.nb-table').count(), 1);
    // The picture: the panel down to the fifth cell (state, the plot, the table, the error).
    mkdirSync(SHOTS, { recursive: true });
    const shot = join(SHOTS, 'sandbox-notebook-desktop.png');
    const panel = await page.locator('section.notebook').boundingBox();
    const fifth = await cell(page, 5).boundingBox();
    const scrollY = await page.evaluate(() => window.scrollY);
    assert.ok(panel && fifth);
    await page.screenshot({
      path: shot,
      fullPage: true,
      clip: { x: panel.x, y: panel.y + scrollY, width: panel.width, height: fifth.y + fifth.height - panel.y + 12 },
    });
    await b.shoot('sandbox-notebook-page', { dark: true });
    // The HTML output is drawn again: its script is refused again.
    noConsoleErrors([/Blocked script execution in 'about:srcdoc'/]);
  });

  it('runs JavaScript and bash in contexts of their own, and restarts the Python kernel', async () => {
    const { page } = b;
    const language = page.getByLabel('Language');
    await language.selectOption('javascript');
    await run(page, 10, 'const doubled = [1, 2, 3].map((n) => n * 2);\ndoubled.reduce((a, b) => a + b)');
    assert.equal((await cell(page, 10).locator('.nb-result.main .nb-text').textContent())?.trim(), '12');
    await language.selectOption('bash');
    await run(page, 11, 'cd /tmp && echo "$((6 * 7)) in $PWD"');
    assert.equal((await cell(page, 11).locator('.nb-stream.stdout').textContent())?.trim(), '42 in /tmp');
    // Back to Python: its kernel kept its state while the others ran.
    await language.selectOption('python');
    await run(page, 12, 'x');
    assert.equal((await cell(page, 12).locator('.nb-result.main .nb-text').textContent())?.trim(), '21');
    await page.getByRole('button', { name: 'Restart kernel' }).click();
    await page.locator('section.notebook .nb-status').getByText('Python kernel restarted.').waitFor();
    await run(page, 13, "print('x' in globals())");
    assert.equal((await cell(page, 13).locator('.nb-stream.stdout').textContent())?.trim(), 'False');
    noConsoleErrors();
  });

  it('says a sandbox without a code interpreter has none, naming the image to use', async () => {
    const { page } = b;
    await page.goto(`${s.baseUrl}/sandboxes/${plainId}`);
    await page.getByRole('heading', { name: 'Notebook', exact: true }).waitFor();
    await page.getByLabel('Code of cell 1', { exact: true }).fill('1 + 1');
    await page.getByRole('button', { name: 'Run cell 1', exact: true }).click();
    const msg = page.locator('section.notebook .nb-unavailable');
    await msg.waitFor();
    assert.match(String(await msg.textContent()), /no code interpreter/i);
    const link = msg.getByRole('link', { name: 'New sandbox' });
    assert.equal(await link.getAttribute('href'), `/sandboxes/new?image=${encodeURIComponent(CI_IMAGE)}`);
    await settled(page, 1);
    assert.equal(await countOf(page, 1), '[ ]');
    noConsoleErrors([/status of 409/]);
  });

  it('signing out forgets the notebooks kept in the tab (their outputs may hold secrets)', async () => {
    const { page } = b;
    await page.goto(`${s.baseUrl}/sandboxes/${ciId}`);
    await page.getByRole('heading', { name: 'Notebook', exact: true }).waitFor();
    const kept = () =>
      page.evaluate(() => Object.keys(sessionStorage).filter((k) => k.startsWith('sandboxd.notebook.')).length);
    assert.ok((await kept()) > 0, 'the notebooks run above are kept');
    await page.getByRole('button', { name: 'Sign out', exact: true }).click();
    await page.waitForURL(/\/login$/);
    assert.equal(await kept(), 0);
  });
});
