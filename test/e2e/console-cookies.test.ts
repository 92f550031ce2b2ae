/**
 * Cookie tossing from a sandbox's port page, in headless Chromium against the real server
 * on TLS (and the real runtime under `npm test`). The API is at `https://sandbox.localhost`,
 * a port URL at `https://8000-<id>.sandbox.localhost`: the same site, so a page there can
 * set cookies for the parent domain, and the browser sends them to the API. An attacker's
 * sandbox serves a page that plants the attacker's own session as `sandboxd_session` (by
 * `Set-Cookie` and by script, for `/` and for `/api`, which the browser sends first), then
 * tries to sign the victim out. None of it may authenticate, shadow the victim's session,
 * or end it. The test's self-signed certificate is trusted in this process and ignored by
 * the browser.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { getCACertificates, setDefaultCACertificates } from 'node:tls';
import { after, before, describe, it } from 'node:test';
import { selfSignedCert } from '../../packages/server/test/tls.js';
import { launch, type Browser } from './console-support.js';
import { freePort, newAccount, type Server, startServer } from './harness.js';

/** The attacker's app: a page that plants a session cookie for the parent domain. */
const APP = `
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
token, api = sys.argv[2], sys.argv[3]
plant = ('<!doctype html><title>x</title><script>'
  'document.cookie = "sandboxd_session=' + token + '; domain=sandbox.localhost; path=/api; secure";'
  'document.cookie = "__Host-sandboxd_session=' + token + '; domain=sandbox.localhost; path=/; secure";')
logout = 'fetch("' + api + '/api/v1/auth/logout", {method: "POST", credentials: "include", mode: "no-cors"})'
done = '.then(() => { document.title = "planted"; }, () => { document.title = "planted"; });</script>'
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        page = (plant + (logout if 'logout' in self.path else 'Promise.resolve()') + done).encode()
        self.send_response(200)
        self.send_header('Content-Type', 'text/html')
        self.send_header('Content-Length', str(len(page)))
        self.send_header('Set-Cookie', 'sandboxd_session=' + token + '; Domain=sandbox.localhost; Path=/; Secure')
        self.send_header('Set-Cookie', 'tossed=1; Domain=sandbox.localhost; Path=/; Secure')
        self.send_header('Set-Cookie', 'own=1; Path=/; Secure')
        self.end_headers()
        self.wfile.write(page)
ThreadingHTTPServer(('0.0.0.0', int(sys.argv[1])), H).serve_forever()
`;

describe('session cookie vs a sandbox port page (Chromium, TLS)', { timeout: 300_000 }, () => {
  let s: Server;
  let b: Browser;
  let dir: string;
  let api: string;
  let portPage: string;
  const victim = { email: '', key: '' };
  let setCookie = '';

  /** Runs `fetch` in the page at the API's origin; answers status and JSON body. */
  const call = (method: string, path: string, body?: unknown) =>
    b.page.evaluate(
      async ([m, p, bd]) => {
        const r = await fetch(p as string, {
          method: m as string,
          headers: bd === undefined ? {} : { 'content-type': 'application/json' },
          body: bd === undefined ? undefined : JSON.stringify(bd),
        });
        const text = await r.text();
        return { status: r.status, body: text ? JSON.parse(text) : null };
      },
      [method, path, body] as const,
    );
  const cookies = async () =>
    (await b.context.cookies()).map((c) => `${c.name}@${c.domain}${c.path}`).sort((x, y) => x.localeCompare(y));

  /** Opens the attacker's page and waits until its script has planted (and posted a logout). */
  const visitAttackerPage = async (o: { logout?: boolean } = {}) => {
    await b.page.goto(o.logout ? `${portPage}?logout` : portPage);
    await b.page.waitForFunction(() => document.title === 'planted', undefined, { timeout: 30_000 });
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sandboxd-cookie-tls-'));
    selfSignedCert(dir, {
      cn: 'sandbox.localhost',
      san: ['DNS:sandbox.localhost', 'DNS:*.sandbox.localhost', 'IP:127.0.0.1'],
    });
    setDefaultCACertificates([...getCACertificates('default'), readFileSync(join(dir, 'cert.pem'), 'utf8')]);
    const port = await freePort();
    s = await startServer({
      port,
      https: true,
      env: { SANDBOXD_TLS_CERT: join(dir, 'cert.pem'), SANDBOXD_TLS_KEY: join(dir, 'key.pem') },
    });
    api = `https://sandbox.localhost:${port}`;
    const v = await newAccount(s);
    victim.key = v.key;
    victim.email = (await s.api('GET', '/api/v1/account', { key: v.key })).body.email;
    // The attacker: an account of its own, its session token, and a sandbox serving the page.
    const a = await newAccount(s, { tokens: 10_000 });
    const aEmail = (await s.api('GET', '/api/v1/account', { key: a.key })).body.email;
    const login = await s.api('POST', '/api/v1/auth/login', {
      key: null,
      body: { email: aEmail, password: 'password123' },
    });
    assert.equal(login.status, 200, login.text);
    setCookie = String(login.headers.get('set-cookie'));
    const token = /^(?:__Host-)?sandboxd_session=([^;]+)/.exec(setCookie)?.[1];
    assert.ok(token, setCookie);
    const c = await s.api('POST', '/api/v1/sandboxes', {
      key: a.key,
      body: { image: 'local/debian:bookworm', timeoutMs: 600_000 },
    });
    assert.equal(c.status, 201, c.text);
    const id = c.body.sandbox.id as string;
    const w = await s.api('POST', `/api/v1/sandboxes/${id}/exec`, {
      key: a.key,
      body: { command: `cat > /tmp/app.py <<'PYEOF'\n${APP}\nPYEOF` },
    });
    assert.equal(w.body?.exitCode, 0, w.text);
    const r = await s.api('POST', `/api/v1/sandboxes/${id}/exec`, {
      key: a.key,
      body: { command: `python3 /tmp/app.py 8000 ${token} ${api} >/tmp/app.log 2>&1`, options: { background: true } },
    });
    assert.equal(r.status, 200, r.text);
    portPage = `https://8000-${id}.sandbox.localhost:${port}/`;
    b = await launch({ ignoreHTTPSErrors: true });
    for (let i = 0; i < 150; i++) {
      const res = await b.page.goto(portPage).catch(() => null);
      if (res?.status() === 200) break;
      await new Promise((res) => setTimeout(res, 100));
    }
  });
  after(async () => {
    await b?.close();
    await s?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('over TLS the session cookie is __Host-sandboxd_session: Secure, Path=/, no Domain', () => {
    assert.match(setCookie, /^__Host-sandboxd_session=[A-Za-z0-9_-]{20,}; /);
    assert.deepEqual(setCookie.split('; ').slice(1).sort(), [
      'HttpOnly',
      'Max-Age=604800',
      'Path=/',
      'SameSite=Lax',
      'Secure',
    ]);
  });

  it("a cookie planted by a port page does not sign a visitor in as the page's owner", async () => {
    await b.context.clearCookies();
    await visitAttackerPage();
    const planted = await cookies();
    assert.ok(
      planted.includes('sandboxd_session@.sandbox.localhost/api'),
      `the browser took the script's cookie for the parent domain (the attack is real): ${planted}`,
    );
    assert.ok(!planted.some((c) => c.startsWith('__Host-')), `no __Host- cookie from the page: ${planted}`);
    assert.ok(!planted.some((c) => c.startsWith('tossed@')), `the proxy dropped the Domain Set-Cookie: ${planted}`);
    assert.ok(
      !planted.includes('sandboxd_session@.sandbox.localhost/'),
      `the proxy dropped the session-named Set-Cookie: ${planted}`,
    );
    assert.ok(planted.includes('own@8000-'.concat(portPage.split('8000-')[1].split(':')[0], '/')), `${planted}`);
    await b.page.goto(`${api}/`);
    const me = await call('GET', '/api/v1/account');
    assert.equal(me.status, 401, `the planted session must not authenticate: ${JSON.stringify(me.body)}`);
  });

  it("nor shadow the victim's own session, nor sign the victim out", async () => {
    await b.context.clearCookies();
    await b.page.goto(`${api}/`);
    const login = await call('POST', '/api/v1/auth/login', { email: victim.email, password: 'password123' });
    assert.equal(login.status, 200, JSON.stringify(login.body));
    assert.deepEqual(await cookies(), ['__Host-sandboxd_session@sandbox.localhost/']);
    await visitAttackerPage({ logout: true });
    assert.ok((await cookies()).includes('sandboxd_session@.sandbox.localhost/api'), 'planted beside the real one');
    await b.page.goto(`${api}/`);
    const me = await call('GET', '/api/v1/account');
    assert.equal(me.status, 200, JSON.stringify(me.body));
    assert.equal(me.body.email, victim.email, "still the victim's account, not the attacker's");
    const key = await call('POST', '/api/v1/keys', { name: 'made-by-victim' });
    assert.equal(key.status, 201, 'state changes from the console still work');
    assert.ok((await cookies()).includes('__Host-sandboxd_session@sandbox.localhost/'), 'the cross-site logout failed');
    const out = await call('POST', '/api/v1/auth/logout');
    assert.equal(out.status, 204);
    assert.equal((await call('GET', '/api/v1/account')).status, 401);
  });
});
