import { STATUS_CODES } from 'node:http';
import swagger, { type SwaggerTransform } from '@fastify/swagger';
import { ErrorBodySchema } from '@sandboxd/protocol';
import type { FastifyInstance, FastifySchema } from 'fastify';

/** What the error statuses an operation documents (`config.errors`) mean. */
const REASONS: Record<number, string> = {
  400: 'Bad request or validation error',
  401: 'Missing or invalid credentials',
  402: 'Insufficient tokens',
  403: 'Concurrency limit reached (sandboxes), a plan quota (kind quota: details.quota names it), or permission denied inside the sandbox (files)',
  404: 'Not found',
  409: 'Wrong state or conflict; for the code routes also kind no_code_interpreter: the sandbox serves no code interpreter (details.image names the image to use)',
  413: "Body over the limit: 1 MiB for JSON bodies; a build's context over the plan's buildContextBytes",
  416: 'The range is outside the file; Content-Range gives its size',
  429: 'Rate limited; Retry-After (seconds) and details.retryAfterMs say when to retry',
  500: 'Internal error',
  502: "The sandbox's code interpreter gave no valid answer",
  503: 'Not ready yet (starting) or shutting down; for a create also kind capacity: the host has no room for more sandboxes (details.resource names what is full; Retry-After and details.retryAfterMs say when to retry)',
  504: "The sandbox's code interpreter did not answer in time",
  507: "The server is out of storage (works again once space is freed), or the sandbox's disk or volume is full",
};

/** The tags operations use (`schema.tags`), in the order documentation tools list them. */
const TAGS = [
  { name: 'sandboxes', description: 'Create, list, inspect, time out, exec in and delete sandboxes; port links' },
  {
    name: 'lifecycle',
    description: 'Pause, resume, stop and start sandboxes; snapshots of their filesystem as private images',
  },
  { name: 'files', description: "Files of a sandbox, moved and managed inside it by its agent, as the sandbox's user" },
  {
    name: 'processes',
    description: 'Processes started through the API: their output (replayed and live), stdin and signals',
  },
  {
    name: 'code',
    description:
      'The code interpreter of a sandbox made from local/code-interpreter: run code in stateful kernels (Python, JavaScript, TypeScript, bash, R), contexts',
  },
  { name: 'terminals', description: 'Interactive shells on a PTY in a sandbox, attached over a WebSocket' },
  { name: 'volumes', description: "The account's named volumes, mounted by sandboxes" },
  {
    name: 'secrets',
    description:
      "The account's secrets (values write-only, encrypted at rest) that sandboxes' egress proxy injects into requests to the domains their rules name; the injections' audit trail",
  },
  { name: 'keys', description: 'API keys (sk_...): created, listed and revoked by their account' },
  { name: 'account', description: 'Plan, token balance, limits, usage and the token ledger of the caller' },
  { name: 'events', description: 'Onboarding events the console tracks for the account' },
  { name: 'auth', description: 'Browser sessions: log in, log out, sign up, one-time login links' },
  { name: 'admin', description: 'Admin only (others get 404): accounts, plans and token grants' },
  {
    name: 'builds',
    description:
      "Image builds: a Dockerfile and its context built in the account's sandboxes into a template (templates/<name>:<tag>, private to the account); the account's templates",
  },
  { name: 'images', description: 'Admin only (others get 404): the image cache (pull, build, import)' },
  { name: 'system', description: 'Health of the server' },
];

type Schema = Record<string, unknown>;

/**
 * Registers @fastify/swagger, which documents every route registered after this call from
 * its TypeBox schemas and `schema.operationId/summary/tags/hide`; `app.swagger()` returns
 * the OpenAPI 3.1 document once the app is ready. On top of what the library does, the
 * transform below (see {@link documentRoute}) names the titled schemas as components, adds
 * the error answers of `config.errors` (and 429 unless `config.rateLimit` is false) and
 * marks `config.auth: 'none'` routes public. Deterministic: the same routes give
 * byte-identical JSON.
 */
export function registerOpenApi(app: FastifyInstance, opts: { version: string }): void {
  app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Sandbox API',
        version: opts.version,
        description:
          'sandboxd. Authenticate with "Authorization: Bearer <API key>" or "X-API-Key: <API key>", or a session cookie from /api/v1/auth/login (state-changing cookie requests need a same-origin Origin). Every error answer has the Error body.',
        license: { name: 'MIT', identifier: 'MIT' },
      },
      servers: [
        // Relative: the host that served this document (`npm start`: http://localhost:8080).
        { url: '/', description: 'The server that serves this document' },
      ],
      tags: TAGS,
      // Any one of the three; public operations say `security: []`.
      security: [{ bearer: [] }, { apiKey: [] }, { session: [] }],
      components: {
        securitySchemes: {
          bearer: { type: 'http', scheme: 'bearer', description: 'Authorization: Bearer <API key> (sk_...)' },
          apiKey: { type: 'apiKey', in: 'header', name: 'X-API-Key', description: 'The API key (sk_...)' },
          session: {
            type: 'apiKey',
            in: 'cookie',
            name: 'sandboxd_session',
            description:
              'Browser session from /api/v1/auth/login (named __Host-sandboxd_session over HTTPS); sent twice: 401; state-changing requests and WebSockets need a same-origin Origin',
          },
        },
      },
    },
    stripBasePath: false,
    // OpenAPI 3.1 schemas are JSON Schema: `const` stays as TypeBox wrote it.
    convertConstToEnum: false,
    transform: documentRoute,
    // Components by name, whichever route hoisted them first.
    transformObject: (d) => {
      const doc = 'openapiObject' in d ? d.openapiObject : d.swaggerObject;
      const components = (doc as { components: { schemas: Schema } }).components;
      components.schemas = Object.fromEntries(
        Object.entries(components.schemas).sort(([a], [b]) => a.localeCompare(b)),
      );
      return doc;
    },
  });
}

/**
 * Rewrites a route's schema for the document only (the route keeps its own for validation
 * and serialization). Titled schemas are hoisted into `components.schemas` here, as they
 * are, before @fastify/swagger converts the rest: the library makes components only of
 * schemas with an `$id` (named `def-N` unless a refResolver names them), leaves request and
 * response roots inline even then, and its conversion turns `patternProperties` into
 * `additionalProperties`, which drops the key patterns (and `additionalProperties: false`)
 * of EnvMap and VolumeMap.
 */
const documentRoute: SwaggerTransform = ({ schema, url, route, ...doc }) => {
  if (!schema || schema.hide) return { schema, url };
  const components = (doc as { openapiObject: { components: { schemas: Schema } } }).openapiObject.components.schemas;
  const hoist = (s: unknown): unknown => {
    if (Array.isArray(s)) return s.map(hoist);
    if (!s || typeof s !== 'object') return s;
    const o = Object.fromEntries(Object.entries(s).map(([k, v]) => [k, hoist(v)]));
    if (typeof o.title !== 'string' || !/^[A-Za-z0-9]+$/.test(o.title)) return o;
    components[o.title] = o;
    return { $ref: `#/components/schemas/${o.title}` };
  };
  const hoistProps = (s: unknown) => {
    const o = s as { properties?: Schema } | undefined;
    return o?.properties ? { ...o, properties: hoist(o.properties) } : o;
  };
  // A response's description: an inline schema's own `description`, else `text`. A `$ref`
  // response takes it from `description`, an inline one from `x-response-description`, which
  // the library removes (a `description` would stay in the schema).
  const describe = (s: unknown, text: string) => {
    const o = hoist(s) as Schema;
    if ('$ref' in o) return { ...o, description: text };
    return typeof o.description === 'string' ? o : { ...o, 'x-response-description': text };
  };
  const config = route.config ?? {};
  const response: Schema = {};
  for (const [code, s] of Object.entries((schema.response as Schema | undefined) ?? {}))
    response[code] = describe(s, STATUS_CODES[code] ?? 'Success');
  const errors = new Set([...(config.errors ?? []), ...(config.rateLimit === false ? [] : [429])]);
  for (const code of errors) response[code] = describe(ErrorBodySchema, REASONS[code] ?? 'Error');
  const out: FastifySchema = { ...schema, response };
  if (schema.body) out.body = hoist(schema.body);
  for (const part of ['params', 'querystring', 'headers'] as const)
    if (schema[part]) out[part] = hoistProps(schema[part]);
  if (config.auth === 'none') out.security = [];
  return { schema: out, url };
};
