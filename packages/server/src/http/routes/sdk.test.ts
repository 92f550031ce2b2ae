import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { loadPythonWheel } from '../../python-wheel.js';
import { createSdkPackage, loadSdkPackage } from '../../sdk-package.js';
import { makeTestApp, type TestApp } from '../../../test/app.js';
import { PYTHON_WHEEL_LATEST_PATH, pythonWheelPath, SDK_TARBALL_PATH } from './sdk.js';

/** What GNU tar reads from the tarball: `-tz` lists, `-xzO <name>` prints one file. */
const tarRead = (tgz: Buffer, args: string[]) => execFileSync('tar', args, { input: tgz }).toString();

describe('SDK tarball route', () => {
  let t: TestApp;
  before(async () => {
    t = await makeTestApp();
  });
  after(() => t.close());

  it('serves an npm package of the built SDK without credentials, with type, length, ETag and revalidation', async () => {
    const r = await t.req({ method: 'GET', url: SDK_TARBALL_PATH, key: null });
    assert.equal(r.statusCode, 200);
    assert.equal(r.headers['content-type'], 'application/gzip');
    assert.equal(r.headers['content-encoding'], undefined, 'the gzip is the file itself, not a transfer coding');
    assert.equal(Number(r.headers['content-length']), r.rawPayload.length);
    assert.equal(r.headers['cache-control'], 'public, no-cache');
    assert.equal(r.headers['x-content-type-options'], 'nosniff');
    assert.match(String(r.headers['content-disposition']), /^attachment; filename="sandboxd-sdk-\d+\.\d+\.\d+\.tgz"$/);
    const etag = String(r.headers.etag);
    assert.match(etag, /^"[\w-]{27}"$/);

    const files = tarRead(r.rawPayload, ['-tz']).trim().split('\n');
    for (const f of ['package/package.json', 'package/index.js', 'package/index.d.ts', 'package/README.md'])
      assert.ok(files.includes(f), `${f} in ${files.join(', ')}`);
    assert.ok(
      files.every((f) => f.startsWith('package/') && !f.includes('/.')),
      'only package files',
    );
    const manifest = JSON.parse(tarRead(r.rawPayload, ['-xzO', 'package/package.json']));
    assert.equal(manifest.name, '@sandboxd/sdk');
    assert.equal(manifest.dependencies, undefined, 'installable with no registry');
    assert.deepEqual(manifest.peerDependenciesMeta, { ws: { optional: true } });
    assert.match(tarRead(r.rawPayload, ['-xzO', 'package/index.js']), /SandboxdClient = class/);

    for (const inm of [etag, `W/${etag}`, `"other", ${etag}`, '*']) {
      const again = await t.req({ method: 'GET', url: SDK_TARBALL_PATH, key: null, headers: { 'if-none-match': inm } });
      assert.equal(again.statusCode, 304, inm);
      assert.equal(again.rawPayload.length, 0);
      assert.equal(again.headers.etag, etag);
    }
    const changed = await t.req({
      method: 'GET',
      url: SDK_TARBALL_PATH,
      key: null,
      headers: { 'if-none-match': '"x"' },
    });
    assert.equal(changed.statusCode, 200);
    const head = await t.req({ method: 'HEAD', url: SDK_TARBALL_PATH, key: null });
    assert.equal(head.statusCode, 200);
    assert.equal(Number(head.headers['content-length']), r.rawPayload.length);
  });

  it('packs the same bytes from the same build (so the ETag only changes with the SDK)', async () => {
    const a = await loadSdkPackage();
    const b = await createSdkPackage();
    assert.ok(a.tarball.equals(b.tarball));
    assert.equal(a.etag, b.etag);
    assert.match(a.integrity, /^sha512-[A-Za-z0-9+/]{86}==$/);
  });
});

describe('Python wheel routes', () => {
  let t: TestApp;
  before(async () => {
    t = await makeTestApp();
  });
  after(() => t.close());

  it('serves the wheel without credentials at its PEP 427 name, with type, length, ETag and revalidation', async () => {
    const w = await loadPythonWheel();
    const path = pythonWheelPath(w);
    assert.match(path, /^\/sdk\/sandboxd-\d+\.\d+\.\d+-py3-none-any\.whl$/);
    const r = await t.req({ method: 'GET', url: path, key: null });
    assert.equal(r.statusCode, 200);
    assert.equal(r.headers['content-type'], 'application/zip');
    assert.equal(r.headers['content-encoding'], undefined);
    assert.equal(Number(r.headers['content-length']), r.rawPayload.length);
    assert.equal(r.headers['cache-control'], 'public, no-cache');
    assert.equal(r.headers['x-content-type-options'], 'nosniff');
    assert.equal(r.headers['content-disposition'], `attachment; filename="${w.fileName}"`);
    assert.equal(r.headers.etag, w.etag);
    assert.ok(r.rawPayload.equals(w.wheel), 'the bytes built at start-up');
    assert.equal(r.rawPayload.subarray(0, 4).toString('hex'), '504b0304', 'a zip');

    for (const inm of [w.etag, `W/${w.etag}`, `"other", ${w.etag}`, '*']) {
      const again = await t.req({ method: 'GET', url: path, key: null, headers: { 'if-none-match': inm } });
      assert.equal(again.statusCode, 304, inm);
      assert.equal(again.rawPayload.length, 0);
      assert.equal(again.headers.etag, w.etag);
    }
    const changed = await t.req({ method: 'GET', url: path, key: null, headers: { 'if-none-match': '"x"' } });
    assert.equal(changed.statusCode, 200);
    const head = await t.req({ method: 'HEAD', url: path, key: null });
    assert.equal(head.statusCode, 200);
    assert.equal(Number(head.headers['content-length']), w.wheel.length);
  });

  it('/sdk/python redirects (302) to the current wheel, so a stable URL ends at the file name pip needs', async () => {
    const w = await loadPythonWheel();
    for (const method of ['GET', 'HEAD'] as const) {
      const r = await t.req({ method, url: PYTHON_WHEEL_LATEST_PATH, key: null });
      assert.equal(r.statusCode, 302, method);
      assert.equal(r.headers.location, `/sdk/${w.fileName}`);
      assert.equal(r.headers['cache-control'], 'no-cache');
    }
  });

  it('any other name under /sdk/ is the usual 404 (other versions, other tags, other spellings)', async () => {
    const w = await loadPythonWheel();
    for (const url of [
      '/sdk/sandboxd-0.0.1-py3-none-any.whl',
      `/sdk/${w.fileName.replace('py3-none-any', 'cp311-cp311-linux_x86_64')}`,
      `/sdk/${w.fileName}.asc`,
      `/sdk/${w.fileName.toUpperCase()}`,
      '/sdk/sandboxd.whl',
      '/sdk/Python',
      '/sdk/python/latest',
      '/sdk/',
      '/sdk',
    ]) {
      const r = await t.req({ method: 'GET', url, key: null });
      assert.equal(r.statusCode, 404, url);
      const body = r.json();
      assert.equal(body.kind, 'not_found', url);
      assert.equal(body.code, 404, url);
      assert.equal(typeof body.message, 'string', url);
    }
  });
});
