import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { RouteOptions } from 'fastify';
import pino from 'pino';
import { buildApp, type Sandboxd } from '../app.js';
import { loadConfig } from '../config.js';
import { SqliteStore } from '../store/sqlite/store.js';

type Operation = { operationId?: string; security?: unknown[]; responses: Record<string, Record<string, unknown>> };
type Doc = {
  security: unknown[];
  servers: unknown[];
  tags: Array<{ name: string; description?: string }>;
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, unknown>; securitySchemes: Record<string, unknown> };
};

describe('OpenAPI document (@fastify/swagger)', () => {
  let app: Sandboxd;
  const routes: RouteOptions[] = [];
  let doc: Doc;
  let text: string;
  before(async () => {
    const config = loadConfig({}, { runtime: 'fake', dbPath: ':memory:', testClock: false });
    app = await buildApp({ config, store: new SqliteStore(':memory:'), logger: pino({ level: 'silent' }) });
    // Before ready: the route plugins load at ready, so this sees every route.
    app.http.addHook('onRoute', (r) => void routes.push(r));
    await app.http.ready();
    const res = await app.http.inject({ method: 'GET', url: '/api/v1/openapi.json' });
    assert.equal(res.statusCode, 200);
    text = res.body;
    doc = res.json();
  });
  after(async () => {
    await app.http.close();
    await app.store.close();
  });

  /** The documented routes: every method but HEAD of every route without `schema.hide`. */
  const documented = () =>
    routes.flatMap((r) =>
      r.schema?.hide
        ? []
        : [r.method]
            .flat()
            .filter((m) => m !== 'HEAD')
            .map((m) => ({ route: r, method: m.toLowerCase(), path: r.url.replace(/:(\w+)/g, '{$1}') })),
    );

  it('declares the three security schemes, any one of them required by default, and a server', () => {
    assert.deepEqual(Object.keys(doc.components.securitySchemes).sort(), ['apiKey', 'bearer', 'session']);
    assert.deepEqual(doc.components.securitySchemes.bearer, {
      type: 'http',
      scheme: 'bearer',
      description: 'Authorization: Bearer <API key> (sk_...)',
    });
    assert.partialDeepStrictEqual(doc.components.securitySchemes.apiKey, {
      type: 'apiKey',
      in: 'header',
      name: 'X-API-Key',
    });
    assert.partialDeepStrictEqual(doc.components.securitySchemes.session, {
      type: 'apiKey',
      in: 'cookie',
      name: 'sandboxd_session',
    });
    assert.deepEqual(doc.security, [{ bearer: [] }, { apiKey: [] }, { session: [] }]);
    assert.ok(doc.servers.length > 0);
  });

  it("documents every route once; an operation is public (security: []) exactly when its route has auth: 'none'", async () => {
    const ops = documented();
    assert.ok(ops.length >= 30, `only ${ops.length} documented routes`);
    const inDoc = Object.entries(doc.paths).flatMap(([p, item]) => Object.keys(item).map((m) => `${m} ${p}`));
    assert.deepEqual(inDoc.sort(), ops.map((o) => `${o.method} ${o.path}`).sort());
    const tags = new Set(doc.tags.map((t) => t.name));
    for (const { route, method, path } of ops) {
      const op = doc.paths[path][method];
      const name = `${method} ${path}`;
      assert.ok(op.operationId, `${name} has no operationId`);
      for (const t of (op as { tags?: string[] }).tags ?? []) assert.ok(tags.has(t), `${name}: tag ${t} not declared`);
      if (route.config?.auth === 'none') assert.deepEqual(op.security, [], `${name} is public but not marked so`);
      else {
        assert.equal(op.security, undefined, `${name} needs credentials but does not inherit the default security`);
        // ... and it really answers 401 without them (before validation, so any path and body will do).
        const url = path.replace(/\{\w+\}/g, 'x');
        const res = await app.http.inject({ method: method.toUpperCase() as 'GET', url });
        assert.equal(res.statusCode, 401, `${name} without credentials: ${res.statusCode}`);
      }
    }
  });

  it('names titled schemas as components and documents each error answer with the Error schema', () => {
    const body = doc.paths['/api/v1/sandboxes'].post as Operation & {
      requestBody: { content: Record<string, unknown> };
    };
    assert.deepEqual(body.requestBody.content['application/json'], {
      schema: { $ref: '#/components/schemas/SandboxCreate' },
    });
    assert.deepEqual(Object.keys(doc.components.schemas), Object.keys(doc.components.schemas).sort());
    // Exactly as TypeBox wrote it: the key patterns stay (no patternProperties -> additionalProperties).
    assert.ok((doc.components.schemas.VolumeMap as { patternProperties?: unknown }).patternProperties);
    const error = { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } };
    for (const { route, method, path } of documented()) {
      const responses = doc.paths[path][method].responses;
      const expected = [...(route.config?.errors ?? []), ...(route.config?.rateLimit === false ? [] : [429])];
      for (const code of expected) assert.deepEqual(responses[code]?.content, error, `${method} ${path} ${code}`);
      for (const [code, r] of Object.entries(responses)) assert.ok(r.description, `${method} ${path} ${code}`);
    }
    assert.ok(doc.paths['/healthz'].get.responses['503']);
    assert.equal(doc.paths['/healthz'].get.responses['429'], undefined);
  });

  it('is deterministic: the same routes give byte-identical JSON', async () => {
    const config = loadConfig({}, { runtime: 'fake', dbPath: ':memory:', testClock: false });
    const other = await buildApp({ config, store: new SqliteStore(':memory:'), logger: pino({ level: 'silent' }) });
    await other.http.ready();
    const again = await other.http.inject({ method: 'GET', url: '/api/v1/openapi.json' });
    await other.http.close();
    await other.store.close();
    assert.equal(again.body, text);
  });
});
