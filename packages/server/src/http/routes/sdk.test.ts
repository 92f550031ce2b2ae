import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { createSdkPackage, loadSdkPackage } from '../../sdk-package.js';
import { makeTestApp, type TestApp } from '../../../test/app.js';
import { SDK_TARBALL_PATH } from './sdk.js';

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
