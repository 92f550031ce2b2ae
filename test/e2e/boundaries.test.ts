/** Black-box: the boundary list of the spec, over real HTTP. */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { IMAGE, newAccount, startServer, type Server } from './harness.js';

describe('boundaries', { timeout: 180_000 }, () => {
  let s: Server;
  let key: string;
  const create = (body: unknown, raw?: string) =>
    s.api('POST', '/api/v1/sandboxes', { key, body: raw === undefined ? body : undefined, raw });
  const cleanup = async (r: { status: number; body: any }) => {
    if (r.status === 201) await s.api('DELETE', `/api/v1/sandboxes/${r.body.sandbox.id}`, { key });
  };
  before(async () => {
    s = await startServer();
    key = (await newAccount(s, { tokens: 100_000 })).key;
  });
  after(() => s?.stop());

  it('volume names: 30 chars ok, 31 chars 400; pattern enforced', async () => {
    const ok = await create({ image: IMAGE, volumes: { '/v': 'a'.repeat(30) } });
    assert.equal(ok.status, 201, ok.text);
    await cleanup(ok);
    for (const name of ['a'.repeat(31), 'Upper', 'has-dash', '']) {
      const r = await create({ image: IMAGE, volumes: { '/v': name } });
      assert.equal(r.status, 400, name);
      assert.equal(r.body.code, 400);
      assert.ok(Array.isArray(r.body.details) && r.body.details.length > 0);
      assert.match(r.body.details[0].path, /^\/volumes\/~1v/);
    }
    const obj = await create({ image: IMAGE, volumes: { '/v': { name: 'b'.repeat(31) } } });
    assert.equal(obj.status, 400);
  });

  it('sizeGb: 0 -> 400, 1 -> 201, 100 -> 201, 101 -> 400, 1.5 -> 400', async () => {
    const cases: Array<[number, number]> = [
      [0, 400],
      [1, 201],
      [100, 201],
      [101, 400],
      [1.5, 400],
    ];
    for (const [sizeGb, status] of cases) {
      const r = await create({
        image: IMAGE,
        timeoutMs: 60_000,
        volumes: { '/v': { name: `size_${String(sizeGb).replace('.', '_')}`, sizeGb } },
      });
      assert.equal(r.status, status, `sizeGb ${sizeGb}: ${r.text}`);
      if (status === 400) assert.equal(r.body.details[0].path, '/volumes/~1v/sizeGb');
      await cleanup(r);
    }
  });

  it('timeoutMs on FREE: -1 -> 400, 0 -> 201, 3600000 -> 201, 3600001 -> 400 naming the max', async () => {
    const neg = await create({ image: IMAGE, timeoutMs: -1 });
    assert.equal(neg.status, 400);
    assert.deepEqual(
      neg.body.details.map((d: { path: string }) => d.path),
      ['/timeoutMs'],
    );
    const zero = await create({ image: IMAGE, timeoutMs: 0 });
    assert.equal(zero.status, 201);
    assert.equal(zero.body.sandbox.stopAt, zero.body.sandbox.createdAt);
    await cleanup(zero);
    const max = await create({ image: IMAGE, timeoutMs: 3_600_000 });
    assert.equal(max.status, 201);
    await cleanup(max);
    const over = await create({ image: IMAGE, timeoutMs: 3_600_001 });
    assert.equal(over.status, 400);
    assert.match(over.body.message, /3600000/);
    assert.equal((await create({ image: IMAGE, timeoutMs: 1.5 })).status, 400);
    assert.equal((await create({ image: IMAGE, timeoutMs: '600000' })).status, 400);
  });

  it('env with a non-string value, unknown fields, missing image', async () => {
    const env = await create({ image: IMAGE, env: { A: 1, B: 'ok', C: null } });
    assert.equal(env.status, 400);
    assert.deepEqual(env.body.details.map((d: { path: string }) => d.path).sort(), ['/env/A', '/env/C']);
    const unk = await create({ image: IMAGE, colour: 'blue' });
    assert.equal(unk.status, 400);
    assert.deepEqual(unk.body.details, [{ in: 'body', path: '/colour', message: 'is not an allowed field' }]);
    const nested = await create({ image: IMAGE, volumes: { '/v': { name: 'x', sizeGb: 1, mode: 'ro' } } });
    assert.equal(nested.status, 400);
    const missing = await create({});
    assert.equal(missing.status, 400);
    assert.deepEqual(missing.body.details, [{ in: 'body', path: '/image', message: 'is required' }]);
    const exec = await s.api('POST', '/api/v1/sandboxes/sbx_aaaaaaaaaaaaaaaaaaaa/exec', {
      key,
      body: { command: 'true', options: { background: true, shell: 'zsh' } },
    });
    assert.equal(exec.status, 400);
    const patch = await s.api('PATCH', '/api/v1/sandboxes/sbx_aaaaaaaaaaaaaaaaaaaa/timeout', {
      key,
      body: { timeoutMs: 1, extra: true },
    });
    assert.equal(patch.status, 400);
  });

  it('body over 1 MiB -> 413; exactly under is parsed', async () => {
    const big = await create(undefined, JSON.stringify({ image: IMAGE, env: { X: 'x'.repeat(1_048_577) } }));
    assert.equal(big.status, 413);
    assert.deepEqual(Object.keys(big.body).sort(), ['code', 'kind', 'message']);
    assert.equal(big.body.code, 413);
    // Each NAME=value stays under 128 KiB (MAX_ARG_STRLEN); together just under 1 MiB.
    const env = Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`X${i}`, 'x'.repeat(130_000)]));
    const under = await create(undefined, JSON.stringify({ image: 'no/such:img', env }));
    assert.equal(under.status, 404);
  });

  it('malformed JSON -> 400; wrong content type -> 400; create with an empty JSON body -> 400 (body is required)', async () => {
    for (const raw of ['{"image":', '{image: 1}', 'null', '[]', '"str"']) {
      const r = await create(undefined, raw);
      assert.equal(r.status, 400, raw);
      assert.equal(r.body.code, 400);
    }
    const txt = await s.api('POST', '/api/v1/sandboxes', {
      key,
      raw: 'image=x',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    assert.equal(txt.status, 400);
    assert.equal(txt.body.code, 400);
    const empty = await s.api('POST', '/api/v1/sandboxes', {
      key,
      raw: '',
      headers: { 'content-type': 'application/json' },
    });
    assert.equal(empty.status, 400);
    assert.deepEqual(empty.body.details, [{ in: 'body', path: '', message: 'is required' }]);
  });

  it('a bodiless request sent with Content-Type: application/json and no body is accepted', async () => {
    const id = (await create({ image: IMAGE })).body.sandbox.id;
    const json = { 'content-type': 'application/json' };
    const logout = await s.api('POST', '/api/v1/auth/logout', { key, raw: '', headers: json });
    assert.equal(logout.status, 204, logout.text);
    const del = await s.api('DELETE', `/api/v1/sandboxes/${id}`, { key, raw: '', headers: json });
    assert.equal(del.status, 204, del.text);
    assert.equal((await s.api('GET', `/api/v1/sandboxes/${id}`, { key })).status, 404);
  });

  it('PATCH timeoutMs: -1 -> 400; beyond the lifetime -> 400 naming the largest allowed', async () => {
    const c = await create({ image: IMAGE, timeoutMs: 60_000 });
    const id = c.body.sandbox.id;
    assert.equal(
      (await s.api('PATCH', `/api/v1/sandboxes/${id}/timeout`, { key, body: { timeoutMs: -1 } })).status,
      400,
    );
    const over = await s.api('PATCH', `/api/v1/sandboxes/${id}/timeout`, { key, body: { timeoutMs: 3_600_000 } });
    assert.equal(over.status, 400);
    const allowed = Number(/at most (\d+)/.exec(over.body.message)?.[1]);
    assert.ok(allowed > 3_590_000 && allowed < 3_600_000, over.body.message);
    const ok = await s.api('PATCH', `/api/v1/sandboxes/${id}/timeout`, { key, body: { timeoutMs: allowed - 5_000 } });
    assert.equal(ok.status, 200, ok.text);
    await cleanup(c);
  });
});
