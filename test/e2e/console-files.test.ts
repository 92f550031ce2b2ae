/**
 * The console's file browser in headless Chromium against the real server: a started
 * sandbox's page lists `/`, enters a folder made through the API, shows listing errors
 * without losing the page, uploads by a synthetic drag and drop (and by the file picker),
 * downloads through the browser, deletes in two clicks and makes a folder; every byte is
 * checked through the API. Any browser console error fails the test, except the browser's
 * own log lines for the listings refused on purpose.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { IMAGE, startServer, type Server } from './harness.js';
import { launch, type Browser } from './console-support.js';

const EMAIL = `files-${Date.now()}@example.com`;
const PASSWORD = 'console-files-password-1';
const DIR = '/e2e-files';

describe('browser console: files', { timeout: 300_000 }, () => {
  let s: Server;
  let b: Browser;
  let key = '';
  let id = '';
  const noConsoleErrors = (allowed: RegExp[] = []) => {
    for (const re of allowed) {
      const i = b.errors.findIndex((e) => re.test(e));
      assert.ok(i >= 0, `expected a console error matching ${re}; got ${JSON.stringify(b.errors)}`);
      b.errors.splice(i, 1);
    }
    assert.deepEqual(b.errors, [], 'browser console errors');
  };
  const filesUrl = (rest: string, path: string) =>
    `/api/v1/sandboxes/${id}/files${rest}?path=${encodeURIComponent(path)}`;
  /** The bytes of a file of the sandbox, through the API (status and body). */
  const content = async (path: string) => {
    const res = await fetch(`${s.baseUrl}${filesUrl('/content', path)}`, {
      headers: { authorization: `Bearer ${key}` },
      signal: AbortSignal.timeout(60_000),
    });
    return { status: res.status, bytes: Buffer.from(await res.arrayBuffer()) };
  };
  const row = (path: string) => b.page.locator(`section.files tr[data-path="${path}"]`);
  const pathShown = () => b.page.getByLabel('Path', { exact: true }).inputValue();
  const waitForPath = (path: string) =>
    b.page.waitForFunction((p) => document.querySelector<HTMLInputElement>('#files-path')?.value === p, path);

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
      body: { name: 'files-e2e' },
      headers: { cookie, origin: s.baseUrl },
    });
    assert.equal(k.status, 201, k.text);
    key = k.body.key;
    const c = await s.api('POST', '/api/v1/sandboxes', { key, body: { image: IMAGE, timeoutMs: 600_000 } });
    assert.equal(c.status, 201, c.text);
    id = c.body.sandbox.id;
    // What the page is to find: a folder with a folder and a file in it.
    const mk = await s.api('POST', `/api/v1/sandboxes/${id}/files/mkdir`, { key, body: { path: `${DIR}/inner` } });
    assert.equal(mk.status, 201, mk.text);
    const put = await s.api('PUT', filesUrl('/content', `${DIR}/hello.txt`), {
      key,
      raw: 'hello\n',
      headers: { 'content-type': 'application/octet-stream' },
    });
    assert.equal(put.status, 200, put.text);
    b = await launch();
  });
  after(async () => {
    await b?.close();
    if (s && key && id) await s.api('DELETE', `/api/v1/sandboxes/${id}`, { key });
    await s?.stop();
  });

  it('signs in and opens the sandbox page: the Files panel lists /', async () => {
    const { page } = b;
    await page.goto(`${s.baseUrl}/login`);
    await page.getByLabel('Email').fill(EMAIL);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByText('Step 1 of 8').waitFor();
    await page.goto(`${s.baseUrl}/sandboxes/${id}`);
    await page.getByRole('heading', { name: 'Files', exact: true }).waitFor();
    await row(DIR).waitFor();
    assert.equal(await pathShown(), '/');
    assert.equal(await row(DIR).getAttribute('data-type'), 'dir');
    assert.equal(await page.locator('section.files tr.up').count(), 0, 'no parent row at /');
    // Folders first, then the rest.
    const types = await page
      .locator('section.files tbody tr[data-type]')
      .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-type')));
    assert.ok(types.length > 0);
    assert.deepEqual(
      types,
      [...types].sort((x, y) => Number(x !== 'dir') - Number(y !== 'dir')),
      'folders come first',
    );
    noConsoleErrors();
  });

  it('enters a folder, goes up with .. and the breadcrumbs, and shows listing errors in the panel', async () => {
    const { page } = b;
    await page.getByRole('button', { name: 'Folder e2e-files', exact: true }).click();
    await waitForPath(DIR);
    await row(`${DIR}/hello.txt`).waitFor();
    assert.equal(await row(`${DIR}/inner`).getAttribute('data-type'), 'dir');
    assert.equal((await row(`${DIR}/hello.txt`).locator('td.size').textContent())?.trim(), '6 B');
    const names = await page
      .locator('section.files tbody tr[data-path]')
      .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-path')));
    assert.deepEqual(names, [`${DIR}/inner`, `${DIR}/hello.txt`]);

    await page.getByRole('button', { name: 'Folder inner', exact: true }).click();
    await waitForPath(`${DIR}/inner`);
    await page.locator('section.files').getByText('This folder is empty.').waitFor();
    await page.locator('.files-crumbs').getByRole('button', { name: 'e2e-files', exact: true }).click();
    await waitForPath(DIR);
    await page.getByRole('button', { name: 'Parent folder' }).click();
    await waitForPath('/');
    await row(DIR).waitFor();

    // The path bar: relative to the folder shown, like cd.
    await page.getByLabel('Path', { exact: true }).fill('e2e-files/inner/..');
    await page.getByLabel('Path', { exact: true }).press('Enter');
    await waitForPath(DIR);
    await row(`${DIR}/hello.txt`).waitFor();

    // A missing path (404) and a file (400): the message is shown, the listing stays.
    const errors = page.locator('section.files .files-status .notice.error');
    await page.getByLabel('Path', { exact: true }).fill(`${DIR}/missing`);
    await page.getByRole('button', { name: 'Go', exact: true }).click();
    await errors.getByText(`Cannot open ${DIR}/missing:`).waitFor();
    await row(`${DIR}/hello.txt`).waitFor();
    noConsoleErrors([/status of 404/]);
    await page.getByLabel('Path', { exact: true }).fill(`${DIR}/hello.txt`);
    await page.getByRole('button', { name: 'Go', exact: true }).click();
    await errors.getByText(`Cannot open ${DIR}/hello.txt:`).waitFor();
    noConsoleErrors([/status of 400/]);
    assert.equal(await errors.count(), 1, 'a new listing clears the last error');
    await page.getByRole('button', { name: 'Refresh' }).click();
    await waitForPath(DIR);
    await row(`${DIR}/hello.txt`).waitFor();
    assert.equal(await page.locator('section.files .files-status .notice').count(), 0, 'Refresh clears the messages');
  });

  it('uploads by drag and drop (bytes checked through the API), downloads, deletes', async () => {
    const { page } = b;
    const panel = page.locator('section.files');
    const bytes = randomBytes(300_000);
    const notes = Buffer.from('notes from the browser\n');
    // No named functions in here: tsx would wrap them in a helper the page does not have.
    const dt = await page.evaluateHandle(
      (files) => {
        const d = new DataTransfer();
        for (const f of files)
          d.items.add(new File([Uint8Array.from(atob(f.base64), (c) => c.charCodeAt(0))], f.name, { type: f.type }));
        return d;
      },
      [
        { name: 'upload.bin', type: 'application/octet-stream', base64: bytes.toString('base64') },
        { name: 'notes.txt', type: 'text/plain', base64: notes.toString('base64') },
      ],
    );
    await panel.dispatchEvent('dragenter', { dataTransfer: dt });
    await panel.dispatchEvent('dragover', { dataTransfer: dt });
    assert.ok(await panel.evaluate((el) => el.classList.contains('dragging')), 'the panel shows it takes the drop');
    await panel.dispatchEvent('drop', { dataTransfer: dt });
    assert.ok(!(await panel.evaluate((el) => el.classList.contains('dragging'))));
    await panel.getByText(`Uploaded 2 files: ${DIR}/upload.bin, ${DIR}/notes.txt.`).waitFor({ timeout: 60_000 });
    await row(`${DIR}/upload.bin`).waitFor();
    await row(`${DIR}/notes.txt`).waitFor();
    assert.equal((await row(`${DIR}/upload.bin`).locator('td.size').textContent())?.trim(), '293 KiB');
    const got = await content(`${DIR}/upload.bin`);
    assert.equal(got.status, 200);
    assert.ok(got.bytes.equals(bytes), 'the uploaded bytes arrived');
    assert.ok((await content(`${DIR}/notes.txt`)).bytes.equals(notes));

    // The plain file input does the same.
    await panel.locator('input[type="file"]').setInputFiles({
      name: 'picked.txt',
      mimeType: 'text/plain',
      buffer: Buffer.from('picked\n'),
    });
    await row(`${DIR}/picked.txt`).waitFor({ timeout: 60_000 });
    assert.equal((await content(`${DIR}/picked.txt`)).bytes.toString(), 'picked\n');

    // Download: the browser's own download of the content URL, under the file's name.
    const [download] = await Promise.all([
      page.waitForEvent('download'),
      row(`${DIR}/upload.bin`).getByRole('link', { name: 'Download upload.bin' }).click(),
    ]);
    assert.equal(download.suggestedFilename(), 'upload.bin');
    assert.equal(await download.failure(), null);
    assert.ok(readFileSync(await download.path()).equals(bytes), 'the downloaded bytes are the uploaded ones');
    await b.shoot('sandbox-files');

    // Delete, in two clicks.
    const target = row(`${DIR}/upload.bin`);
    await target.getByRole('button', { name: 'Delete upload.bin' }).click();
    await target.getByRole('button', { name: 'Confirm: delete upload.bin' }).click();
    await target.waitFor({ state: 'detached' });
    await panel.getByText(`Deleted ${DIR}/upload.bin.`).waitFor();
    assert.equal((await content(`${DIR}/upload.bin`)).status, 404);
    await row(`${DIR}/notes.txt`).waitFor(); // the others stay
    noConsoleErrors();
  });

  it('makes a new folder in the folder shown', async () => {
    const { page } = b;
    await page.getByRole('button', { name: 'New folder' }).click();
    await page.getByLabel('Folder name').fill('made-here');
    await page.getByRole('button', { name: 'Create folder' }).click();
    await row(`${DIR}/made-here`).waitFor();
    assert.equal(await row(`${DIR}/made-here`).getAttribute('data-type'), 'dir');
    const stat = await s.api('GET', filesUrl('/stat', `${DIR}/made-here`), { key });
    assert.equal(stat.status, 200, stat.text);
    assert.equal(stat.body.entry.type, 'dir');
    assert.ok(await page.locator('#files-new-folder').isHidden());
    noConsoleErrors();
  });
});
