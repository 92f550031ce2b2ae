import type { FastifyInstance, RouteOptions } from 'fastify';
import { ErrorBodySchema } from '@sandboxd/protocol';

interface CollectedRoute {
  method: string;
  url: string;
  schema: Record<string, unknown>;
  config: RouteOptions['config'] & Record<string, unknown>;
}

const REASONS: Record<number, string> = {
  400: 'Bad request or validation error',
  401: 'Missing or invalid credentials',
  402: 'Insufficient tokens',
  403: 'Concurrency limit reached',
  404: 'Not found',
  409: 'Wrong state or conflict',
  413: 'Body over 1 MiB',
  429: 'Rate limited; Retry-After (seconds) and details.retryAfterMs say when to retry',
  500: 'Internal error',
  507: 'The server is out of storage (works again once space is freed)',
};

/** Records every route registered after this call, for {@link buildOpenApi}. */
export function collectRoutes(app: FastifyInstance): CollectedRoute[] {
  const routes: CollectedRoute[] = [];
  app.addHook('onRoute', (r) => {
    const config = (r.config ?? {}) as CollectedRoute['config'];
    if (config.hide || r.method === 'HEAD') return;
    for (const m of [r.method].flat())
      routes.push({ method: m.toLowerCase(), url: r.url, schema: (r.schema ?? {}) as Record<string, unknown>, config });
  });
  return routes;
}

/**
 * An OpenAPI 3.1 document from the routes' TypeBox schemas. Schemas with a `title` become
 * components. Deterministic: the same routes give byte-identical JSON.
 */
export function buildOpenApi(routes: CollectedRoute[], opts: { version: string }): Record<string, unknown> {
  const components: Record<string, unknown> = {};
  const hoist = (s: unknown): unknown => {
    if (Array.isArray(s)) return s.map(hoist);
    if (!s || typeof s !== 'object') return s;
    const o = Object.fromEntries(Object.entries(s as Record<string, unknown>).map(([k, v]) => [k, hoist(v)]));
    const title = o.title;
    if (typeof title === 'string' && /^[A-Za-z0-9]+$/.test(title)) {
      components[title] = o;
      return { $ref: `#/components/schemas/${title}` };
    }
    return o;
  };
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of [...routes].sort((a, b) => a.url.localeCompare(b.url) || a.method.localeCompare(b.method))) {
    const path = r.url.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
    const params: unknown[] = [];
    for (const [where, key] of [
      ['path', 'params'],
      ['query', 'querystring'],
    ] as const) {
      const props = (r.schema[key] as { properties?: Record<string, unknown>; required?: string[] } | undefined) ?? {};
      for (const [name, schema] of Object.entries(props.properties ?? {})) {
        params.push({
          name,
          in: where,
          required: where === 'path' || (props.required ?? []).includes(name),
          schema: hoist(schema),
        });
      }
    }
    const responses: Record<string, unknown> = {};
    for (const [code, schema] of Object.entries((r.schema.response as Record<string, unknown>) ?? {})) {
      const isEmpty = (schema as { type?: string }).type === 'null';
      responses[code] = isEmpty
        ? { description: 'No content' }
        : { description: 'Success', content: { 'application/json': { schema: hoist(schema) } } };
    }
    // Every operation but health may answer 429 (rate limits, see docs/api.md).
    for (const code of new Set([...(r.config.errors ?? []), ...(r.config.rateLimit === false ? [] : [429])])) {
      responses[String(code)] = {
        description: REASONS[code] ?? 'Error',
        content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
      };
    }
    const op: Record<string, unknown> = {
      operationId: r.config.operationId,
      summary: r.config.summary,
      tags: r.config.tags,
    };
    if (params.length) op.parameters = params;
    if (r.schema.body)
      op.requestBody = { required: true, content: { 'application/json': { schema: hoist(r.schema.body) } } };
    op.responses = responses;
    paths[path] ??= {};
    paths[path][r.method] = op;
  }
  hoist(ErrorBodySchema);
  return {
    openapi: '3.1.0',
    info: {
      title: 'Sandbox API',
      version: opts.version,
      description:
        'sandboxd. Authenticate with "Authorization: Bearer <API key>" or "X-API-Key: <API key>", or a session cookie from /api/v1/auth/login (state-changing cookie requests need a same-origin Origin). Every error is {code, message, details?}.',
    },
    paths,
    components: {
      schemas: Object.fromEntries(Object.entries(components).sort(([a], [b]) => a.localeCompare(b))),
      securitySchemes: {
        bearer: { type: 'http', scheme: 'bearer' },
        apiKey: { type: 'apiKey', in: 'header', name: 'X-API-Key' },
        session: { type: 'apiKey', in: 'cookie', name: 'sandboxd_session' },
      },
    },
  };
}
