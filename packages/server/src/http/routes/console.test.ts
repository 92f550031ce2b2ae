import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { makeTestApp, type TestApp } from '../../../test/app.js';
import { CONSOLE_PAGES } from './console.js';

describe('console routes', () => {
  let t: TestApp;
  before(async () => {
    t = await makeTestApp();
  });
  after(() => t.close());

  const get = (url: string, headers: Record<string, string> = {}) => t.req({ method: 'GET', url, key: null, headers });

  it('answers index.html for every console page, with a fresh nonce in a strict CSP each time', async () => {
    const nonces = new Set<string>();
    const urls = [
      ...CONSOLE_PAGES.filter((p) => !p.includes(':')),
      '/sandboxes/sbx_x',
      '/builds/bld_x',
      '/keys/',
      '/onboarding?x=1',
    ];
    for (const url of urls) {
      const r = await get(url);
      assert.equal(r.statusCode, 200, url);
      assert.match(String(r.headers['content-type']), /^text\/html; charset=utf-8/);
      assert.equal(r.headers['x-content-type-options'], 'nosniff');
      assert.equal(r.headers['cache-control'], 'no-store');
      const csp = String(r.headers['content-security-policy']);
      const nonce = /'nonce-([^']+)'/.exec(csp)![1];
      assert.ok(r.body.includes(`content="${nonce}"`), 'the page carries the nonce of its policy');
      assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
      // The notebook's images are data: URLs; its HTML frames are srcdoc, so no frame source is allowed.
      assert.match(csp, /img-src 'self' data:(;|$)/);
      assert.doesNotMatch(csp, /frame-src|child-src/);
      nonces.add(nonce);
    }
    assert.equal(nonces.size, urls.length);
  });

  it('never shadows the API, health or metrics, and 404s unknown paths', async () => {
    for (const url of ['/api/v1/nope', '/api/v1/sandboxes/sbx_x/nope', '/nope', '/assets/nope.js']) {
      const r = await get(url);
      assert.equal(r.statusCode, 404, url);
      assert.match(String(r.headers['content-type']), /json/);
    }
    assert.equal((await get('/healthz')).json().status, 'ok');
    assert.match(String((await get('/metrics')).headers['content-type']), /^text\/plain/);
    assert.equal((await get('/api/v1/account')).statusCode, 401);
  });

  it('serves the hashed bundle with its content types, gzip when accepted', async () => {
    const html = (await get('/')).body;
    for (const [re, type] of [
      [/src="(\/assets\/app-[^"]+\.js)"/, 'text/javascript'],
      [/href="(\/assets\/app-[^"]+\.css)"/, 'text/css'],
    ] as const) {
      const url = re.exec(html)![1];
      const plain = await get(url);
      assert.match(String(plain.headers['content-type']), new RegExp(`^${type}`));
      assert.match(String(plain.headers['cache-control']), /immutable/);
      assert.equal(plain.headers['content-encoding'], undefined);
      const gz = await get(url, { 'accept-encoding': 'gzip, br' });
      assert.equal(gz.headers['content-encoding'], 'gzip');
      assert.ok(gz.rawPayload.length < plain.rawPayload.length);
    }
    assert.equal((await get('/assets/favicon.svg')).headers['content-type'], 'image/svg+xml');
  });

  it('tells the page whether its session cookie is valid', async () => {
    const boot = async (cookie?: string) =>
      /name="sandboxd-boot" content="([^"]+)"/.exec((await get('/', cookie ? { cookie } : {})).body)![1];
    assert.equal(await boot(), 'signed-out');
    assert.equal(await boot('sandboxd_session=bogus'), 'signed-out');
    const { id } = await t.newAccount();
    const token = await t.app.services.auth.newSession(id);
    assert.equal(await boot(`sandboxd_session=${token}`), 'signed-in');
  });

  it('leaves the console out of the OpenAPI document', async () => {
    const paths = Object.keys((await get('/api/v1/openapi.json')).json().paths);
    assert.ok(
      paths.every((p) => p.startsWith('/api/') || ['/healthz', '/livez', '/readyz'].includes(p)),
      paths.join(', '),
    );
  });
});
