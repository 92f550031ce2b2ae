/**
 * The build and template routes over an in-memory BuildsApi (test/fake-builds.ts): auth
 * (API key, session, any account), validation of the query and the body's type before the
 * service is called, the context streamed to the service, ownership (another account's
 * build is a 404), the wire shapes, and the NDJSON log stream (framing, offset, follow
 * ending with `end`, live lines over a real socket, the client's leaving ends the
 * service's iteration).
 */
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { after, before, beforeEach, describe, it } from 'node:test';
import { BuildListSchema, BuildLogEventSchema, BuildReplySchema, TemplateListSchema } from '@sandboxd/protocol';
import { Compile } from 'typebox/compile';
import { FakeBuilds } from '../../../test/fake-builds.js';
import { makeTestApp, type TestApp } from '../../../test/app.js';
import { parseAllowDomains, parseBuildArgs } from './builds.js';

const TAR = 'application/x-tar';
const checkReply = Compile(BuildReplySchema);
const checkList = Compile(BuildListSchema);
const checkTemplates = Compile(TemplateListSchema);
const checkEvent = Compile(BuildLogEventSchema);

describe('build routes', () => {
  let t: TestApp;
  let fake: FakeBuilds;
  let alice: { id: string; key: string };
  let bob: { id: string; key: string };
  before(async () => {
    t = await makeTestApp();
    alice = await t.newAccount();
    bob = await t.newAccount();
  });
  after(() => t.close());
  beforeEach(() => {
    fake = new FakeBuilds();
    t.app.services.builds = fake;
  });

  const create = (key: string | null, query: string, payload: Buffer | string = 'tar', type: string | null = TAR) =>
    t.req({
      method: 'POST',
      url: `/api/v1/images/builds${query}`,
      key,
      payload,
      headers: type === null ? {} : { 'content-type': type },
    });
  const started = async (key = alice.key, query = '?name=web') => {
    const r = await create(key, query);
    assert.equal(r.statusCode, 202, r.body);
    return r.json().build.id as string;
  };

  it('POST streams the context to the service and answers 202 {build} of the wire shape', async () => {
    const ctx = Buffer.alloc(3 << 20, 7);
    ctx.write('the context', 1000);
    const r = await create(
      alice.key,
      `?name=web&tag=v1.2&dockerfile=build%2FDockerfile&buildArgs=${encodeURIComponent('{"A":"1","B":"x=y"}')}&allowDomains=${encodeURIComponent(' pypi.org, *.npmjs.org ,,')}&noCache=true`,
      ctx,
      'application/gzip',
    );
    assert.equal(r.statusCode, 202, r.body);
    const build = r.json().build;
    assert.ok(checkReply.Check(r.json()), r.body);
    assert.equal(build.state, 'queued');
    assert.equal(build.image, 'templates/web:v1.2');
    assert.deepEqual(build.steps, { total: 3, done: 0, cached: 0 });
    const b = fake.build(build.id);
    assert.equal(b.rec.accountId, alice.id);
    assert.ok(b.context.equals(ctx), 'the context arrives byte for byte');
    assert.deepEqual(b.options, {
      name: 'web',
      tag: 'v1.2',
      dockerfile: 'build/Dockerfile',
      buildArgs: { A: '1', B: 'x=y' },
      allowDomains: ['pypi.org', '*.npmjs.org'],
      noCache: true,
    });
  });

  it('POST defaults: tag latest, no args, no domains, cache on; x-gzip and a charset are accepted', async () => {
    for (const type of ['application/x-gzip', 'application/x-tar; charset=binary']) {
      const r = await create(alice.key, '?name=web', 'x', type);
      assert.equal(r.statusCode, 202, r.body);
      const b = fake.build(r.json().build.id);
      assert.deepEqual(b.options, {
        name: 'web',
        tag: 'latest',
        dockerfile: undefined,
        buildArgs: undefined,
        allowDomains: undefined,
        noCache: false,
      });
      assert.equal(r.json().build.image, 'templates/web:latest');
    }
  });

  it('refuses a bad query or body type with a 400 naming it, before the service is called', async () => {
    const cases: [string, string | null, RegExp, string][] = [
      ['', TAR, /name/, 'no name'],
      ['?name=Web', TAR, /name/, 'upper case'],
      ['?name=-web', TAR, /name/, 'leading dash'],
      ['?name=web&tag=.x', TAR, /tag/, 'tag with a leading dot'],
      ['?name=web&buildArgs=nope', TAR, /buildArgs .*not valid JSON/, 'args not JSON'],
      ['?name=web&buildArgs=%5B%5D', TAR, /buildArgs must be a JSON object/, 'args an array'],
      ['?name=web&buildArgs=null', TAR, /buildArgs must be a JSON object/, 'args null'],
      ['?name=web&buildArgs=%7B%22A%22%3A1%7D', TAR, /buildArgs must map names to strings \("A" is number\)/, 'number'],
      ['?name=web&buildArgs=%7B%22%22%3A%22x%22%7D', TAR, /buildArgs has an invalid ARG name ""/, 'empty name'],
      ['?name=web&noCache=yes', TAR, /noCache/, 'noCache not a boolean'],
      ['?name=web&other=1', TAR, /other/, 'unknown parameter'],
      ['?name=web', 'application/json', /Content-Type must be application\/x-tar/, 'JSON body'],
      ['?name=web', null, /Content-Type must be/, 'no type'],
      ['?name=web', 'text/plain', /got text\/plain/, 'text'],
    ];
    for (const [query, type, message, what] of cases) {
      const r = await create(alice.key, query, type === 'application/json' ? '{}' : 'tar', type);
      assert.equal(r.statusCode, 400, `${what}: ${r.body}`);
      const body = r.json();
      assert.equal(body.kind, 'validation', what);
      assert.match(body.message + JSON.stringify(body.details ?? ''), message, what);
    }
    const arg = (await create(alice.key, '?name=web&buildArgs=%5B%5D')).json();
    assert.deepEqual(arg.details, [{ in: 'query', path: '/buildArgs', message: arg.details[0].message }]);
    assert.equal(fake.builds.size, 0, 'nothing reached the service');
  });

  it("the service's refusals keep their kind (a bad Dockerfile line is a 400 with its details)", async () => {
    fake.refuseWith = new (await import('@sandboxd/protocol')).SandboxdError(
      'validation',
      'Dockerfile line 3: ONBUILD is not supported',
      { line: 3, instruction: 'ONBUILD RUN x' },
    );
    const r = await create(alice.key, '?name=web');
    assert.equal(r.statusCode, 400);
    assert.deepEqual(r.json(), {
      code: 400,
      kind: 'validation',
      message: 'Dockerfile line 3: ONBUILD is not supported',
      details: { line: 3, instruction: 'ONBUILD RUN x' },
    });
  });

  it('needs credentials; any account may build (not admin-only); a browser session works too', async () => {
    assert.equal((await create(null, '?name=web')).statusCode, 401);
    assert.equal((await t.req({ method: 'GET', url: '/api/v1/images/builds', key: null })).statusCode, 401);
    assert.equal((await t.req({ method: 'GET', url: '/api/v1/templates', key: null })).statusCode, 401);
    assert.equal((await create(bob.key, '?name=web')).statusCode, 202);

    const s = await t.req({
      method: 'POST',
      url: '/api/v1/auth/signup',
      key: null,
      payload: { email: 'builder@example.com', password: 'hunter2hunter2' },
    });
    const cookie = String(s.headers['set-cookie']).split(';')[0];
    const host = { cookie, origin: 'http://localhost:80', host: 'localhost:80' };
    const viaCookie = await t.req({
      method: 'POST',
      url: '/api/v1/images/builds?name=web',
      key: null,
      payload: 'tar',
      headers: { ...host, 'content-type': TAR },
    });
    assert.equal(viaCookie.statusCode, 202, viaCookie.body);
    const crossSite = await t.req({
      method: 'POST',
      url: '/api/v1/images/builds?name=web',
      key: null,
      payload: 'tar',
      headers: { cookie, origin: 'http://evil.example', 'content-type': TAR },
    });
    assert.equal(crossSite.statusCode, 401, 'a cookie POST from another origin is refused');
    const list = await t.req({ method: 'GET', url: '/api/v1/images/builds', key: null, headers: { cookie } });
    assert.equal(list.json().count, 1);
  });

  it("GET one, list, cancel and delete: each account sees only its own; another's build is a 404", async () => {
    const a1 = await started(alice.key, '?name=web');
    const a2 = await started(alice.key, '?name=api&tag=v2');
    const b1 = await started(bob.key, '?name=web');

    const one = await t.req({ method: 'GET', url: `/api/v1/images/builds/${a1}`, key: alice.key });
    assert.equal(one.statusCode, 200);
    assert.ok(checkReply.Check(one.json()), one.body);
    assert.equal(one.json().build.id, a1);

    const list = await t.req({ method: 'GET', url: '/api/v1/images/builds', key: alice.key });
    assert.ok(checkList.Check(list.json()), list.body);
    assert.deepEqual(
      list.json().builds.map((b: { id: string }) => b.id),
      [a2, a1],
      'newest first, only her own',
    );
    assert.equal(list.json().count, 2);
    const named = await t.req({ method: 'GET', url: '/api/v1/images/builds?name=api&limit=5', key: alice.key });
    assert.deepEqual(
      named.json().builds.map((b: { id: string }) => b.id),
      [a2],
    );
    for (const q of ['?limit=0', '?limit=1001', '?name=A', '?x=1'])
      assert.equal(
        (await t.req({ method: 'GET', url: `/api/v1/images/builds${q}`, key: alice.key })).statusCode,
        400,
        q,
      );

    for (const [method, url] of [
      ['GET', `/api/v1/images/builds/${b1}`],
      ['GET', `/api/v1/images/builds/${b1}/logs`],
      ['GET', `/api/v1/images/builds/${b1}/logs?follow=true`],
      ['POST', `/api/v1/images/builds/${b1}/cancel`],
      ['DELETE', `/api/v1/images/builds/${b1}`],
      ['GET', '/api/v1/images/builds/bld_nothing'],
    ] as const) {
      const r = await t.req({ method, url, key: alice.key });
      assert.equal(r.statusCode, 404, `${method} ${url}: ${r.body}`);
      assert.equal(r.json().kind, 'not_found');
    }
    assert.equal(fake.build(b1).rec.state, 'queued', "bob's build is untouched");

    const c = await t.req({ method: 'POST', url: `/api/v1/images/builds/${a1}/cancel`, key: alice.key });
    assert.equal(c.statusCode, 200, c.body);
    assert.ok(checkReply.Check(c.json()), c.body);
    assert.equal(c.json().build.state, 'cancelled');
    assert.ok(c.json().build.finishedAt);
    const again = await t.req({ method: 'POST', url: `/api/v1/images/builds/${a1}/cancel`, key: alice.key });
    assert.equal(again.statusCode, 409);
    assert.equal(again.json().kind, 'conflict');

    const d = await t.req({ method: 'DELETE', url: `/api/v1/images/builds/${a1}`, key: alice.key });
    assert.equal(d.statusCode, 204);
    assert.equal(d.body, '');
    assert.equal((await t.req({ method: 'GET', url: `/api/v1/images/builds/${a1}`, key: alice.key })).statusCode, 404);
  });

  it('a failed build carries its failure; a ready one its digest and size', async () => {
    const id = await started();
    fake.log(id, 'Step 1/3 : RUN false');
    const failure = {
      code: 400,
      kind: 'validation' as const,
      message: 'Step 1/3 (line 2) RUN false: exit code 1',
      details: { step: 1, line: 2, instruction: 'RUN false', exitCode: 1, output: 'oops\n' },
    };
    fake.finish(id, 'error', failure);
    const b = (await t.req({ method: 'GET', url: `/api/v1/images/builds/${id}`, key: alice.key })).json().build;
    assert.equal(b.state, 'error');
    assert.deepEqual(b.error, failure);
    assert.ok(b.startedAt && b.finishedAt);

    const ok = await started();
    fake.finish(ok, 'ready');
    const r = (await t.req({ method: 'GET', url: `/api/v1/images/builds/${ok}`, key: alice.key })).json().build;
    assert.equal(r.digest, `sha256:${'a'.repeat(64)}`);
    assert.equal(r.sizeBytes, 4096);
    assert.deepEqual(r.steps, { total: 3, done: 3, cached: 0 });
  });

  it('logs: NDJSON, one event a line, from offset; without follow no end line; with follow a final build ends with one end', async () => {
    const id = await started();
    fake.log(id, 'one', 'two', 'three');
    const all = await t.req({ method: 'GET', url: `/api/v1/images/builds/${id}/logs`, key: alice.key });
    assert.equal(all.statusCode, 200);
    assert.equal(all.headers['content-type'], 'application/x-ndjson');
    assert.equal(all.headers['cache-control'], 'no-store');
    assert.ok(all.body.endsWith('\n'));
    const lines = all.body
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l));
    assert.deepEqual(
      lines.map((l) => [l.seq, l.text]),
      [
        [0, 'one'],
        [1, 'two'],
        [2, 'three'],
      ],
    );
    for (const l of lines) assert.ok(checkEvent.Check(l), JSON.stringify(l));

    const from = await t.req({ method: 'GET', url: `/api/v1/images/builds/${id}/logs?offset=2`, key: alice.key });
    assert.deepEqual(
      from.body
        .trimEnd()
        .split('\n')
        .map((l) => JSON.parse(l).text),
      ['three'],
    );
    const past = await t.req({ method: 'GET', url: `/api/v1/images/builds/${id}/logs?offset=9`, key: alice.key });
    assert.equal(past.statusCode, 200);
    assert.equal(past.body, '');
    for (const q of ['?offset=-1', '?offset=x', '?follow=1', '?since=0'])
      assert.equal(
        (await t.req({ method: 'GET', url: `/api/v1/images/builds/${id}/logs${q}`, key: alice.key })).statusCode,
        400,
        q,
      );

    fake.finish(id, 'error', { code: 400, kind: 'validation', message: 'failed', details: { step: 1 } });
    const followed = await t.req({
      method: 'GET',
      url: `/api/v1/images/builds/${id}/logs?follow=true&offset=1`,
      key: alice.key,
    });
    const ev = followed.body
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l));
    assert.deepEqual(
      ev.map((e) => e.type),
      ['log', 'log', 'end'],
    );
    assert.deepEqual(ev[2], {
      type: 'end',
      state: 'error',
      error: { code: 400, kind: 'validation', message: 'failed', details: { step: 1 } },
    });
    assert.equal(fake.openFollows, 0);
  });

  it('follow over a real socket: the head comes at once, lines as they are logged, then end; leaving stops the iteration', async () => {
    const base = await t.app.http.listen({ host: '127.0.0.1', port: 0 });
    const id = await started();
    const follow = (build: string, offset = 0) => {
      const lines: Record<string, unknown>[] = [];
      let buf = '';
      let notify: () => void = () => {};
      let ended = false;
      const more = () =>
        new Promise<void>((r) => {
          notify = r;
          if (ended) r();
        });
      const req = request(`${base}/api/v1/images/builds/${build}/logs?follow=true&offset=${offset}`, {
        headers: { authorization: `Bearer ${alice.key}` },
      });
      const head = new Promise<import('node:http').IncomingMessage>((resolve, reject) => {
        req.on('response', (res) => {
          res.setEncoding('utf8');
          res.on('data', (s: string) => {
            buf += s;
            for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
              lines.push(JSON.parse(buf.slice(0, nl)));
              buf = buf.slice(nl + 1);
            }
            notify();
          });
          res.on('end', () => {
            ended = true;
            notify();
          });
          resolve(res);
        });
        req.on('error', reject);
      });
      req.end();
      const until = async (n: number) => {
        for (let i = 0; i < 1000 && lines.length < n; i++) await more();
        assert.ok(lines.length >= n, `${n} lines`);
      };
      return { req, head, lines, until };
    };

    // No line logged yet: the status and headers still arrive.
    const f = follow(id);
    const res = await f.head;
    assert.equal(res.statusCode, 200);
    assert.equal(res.headers['content-type'], 'application/x-ndjson');
    fake.log(id, 'first');
    await f.until(1);
    fake.log(id, 'second', 'third');
    await f.until(3);
    fake.finish(id, 'ready');
    await f.until(4);
    assert.deepEqual(
      f.lines.map((l) => l.text ?? l.type),
      ['first', 'second', 'third', 'end'],
    );
    assert.deepEqual(f.lines[3], { type: 'end', state: 'ready' });

    // A follower that leaves mid-build: the service's iteration ends through the signal.
    const id2 = await started();
    const g = follow(id2);
    await g.head;
    fake.log(id2, 'a');
    await g.until(1);
    const left = fake.abortedFollows;
    const open = fake.openFollows;
    assert.equal(open, 1);
    g.req.destroy();
    for (let i = 0; i < 1000 && fake.openFollows > 0; i++) await new Promise((r) => setTimeout(r, 5));
    assert.equal(fake.openFollows, 0, 'the iteration ended');
    assert.equal(fake.abortedFollows, left + 1, 'through its signal');
  });

  it('templates: listed in the wire shape, each account its own; DELETE one tag or every tag; 404 and 400', async () => {
    for (const [q, key] of [
      ['?name=web&tag=v1', alice.key],
      ['?name=web&tag=v2', alice.key],
      ['?name=api', alice.key],
      ['?name=web&tag=v1', bob.key],
    ] as const)
      fake.finish(await started(key, q), 'ready');
    const list = await t.req({ method: 'GET', url: '/api/v1/templates', key: alice.key });
    assert.equal(list.statusCode, 200);
    assert.ok(checkTemplates.Check(list.json()), list.body);
    assert.equal(list.json().count, 3);
    assert.deepEqual(
      list
        .json()
        .templates.map((x: { image: string }) => x.image)
        .sort(),
      ['templates/api:latest', 'templates/web:v1', 'templates/web:v2'],
    );
    const web = await t.req({ method: 'GET', url: '/api/v1/templates?name=web', key: alice.key });
    assert.equal(web.json().count, 2);

    assert.equal(
      (await t.req({ method: 'DELETE', url: '/api/v1/templates/web?tag=v1', key: alice.key })).statusCode,
      204,
    );
    assert.equal(
      (await t.req({ method: 'DELETE', url: '/api/v1/templates/web?tag=v1', key: alice.key })).statusCode,
      404,
    );
    assert.equal((await t.req({ method: 'DELETE', url: '/api/v1/templates/web', key: alice.key })).statusCode, 204);
    assert.equal((await t.req({ method: 'DELETE', url: '/api/v1/templates/nothing', key: alice.key })).statusCode, 404);
    for (const url of ['/api/v1/templates/Web', '/api/v1/templates/web?tag=.x', '/api/v1/templates/web?x=1'])
      assert.equal((await t.req({ method: 'DELETE', url, key: alice.key })).statusCode, 400, url);
    assert.deepEqual(
      (await t.req({ method: 'GET', url: '/api/v1/templates', key: alice.key }))
        .json()
        .templates.map((x: { image: string }) => x.image),
      ['templates/api:latest'],
    );
    assert.equal(
      (await t.req({ method: 'GET', url: '/api/v1/templates', key: bob.key })).json().count,
      1,
      "bob's template stays",
    );
  });
});

describe('build log streams when the server closes', () => {
  it('a followed log ends (without an end line) so that closing does not wait for the build', async () => {
    const t = await makeTestApp();
    const fake = new FakeBuilds();
    t.app.services.builds = fake;
    const a = await t.newAccount();
    const base = await t.app.http.listen({ host: '127.0.0.1', port: 0 });
    const r = await t.req({
      method: 'POST',
      url: '/api/v1/images/builds?name=web',
      key: a.key,
      payload: 'x',
      headers: { 'content-type': TAR },
    });
    const id = r.json().build.id as string;
    fake.log(id, 'running');
    const res = await fetch(`${base}/api/v1/images/builds/${id}/logs?follow=true`, {
      headers: { authorization: `Bearer ${a.key}` },
    });
    assert.equal(res.status, 200);
    const body = res.text();
    await t.close();
    const lines = (await body)
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l));
    assert.deepEqual(
      lines.map((l) => l.type),
      ['log'],
      'cut cleanly, no end line: the client resumes with offset',
    );
    assert.equal(fake.openFollows, 0);
    assert.equal(fake.build(id).rec.state, 'building', "the build itself is not the route's to end");
  });
});

describe('build query parsing', () => {
  it('buildArgs: a JSON object of strings; allowDomains: comma-split, trimmed', () => {
    assert.equal(parseBuildArgs(undefined), undefined);
    assert.deepEqual(parseBuildArgs('{}'), {});
    assert.deepEqual(parseBuildArgs('{"A":"","BC":"x"}'), { A: '', BC: 'x' });
    assert.deepEqual(
      Object.keys(parseBuildArgs('{"__proto__":"x"}') ?? {}),
      ['__proto__'],
      'an own key, not the prototype',
    );
    assert.throws(() => parseBuildArgs('{"A B":"x"}'), /invalid ARG name/);
    assert.throws(() => parseBuildArgs('{"A=B":"x"}'), /invalid ARG name/);
    assert.throws(() => parseBuildArgs('"s"'), /JSON object/);
    assert.throws(() => parseBuildArgs('{"A":{"b":"c"}}'), /"A" is object/);
    assert.equal(parseAllowDomains(undefined), undefined);
    assert.deepEqual(parseAllowDomains(''), []);
    assert.deepEqual(parseAllowDomains('a.com,*.b.org , c.net'), ['a.com', '*.b.org', 'c.net']);
  });
});
