import { Readable } from 'node:stream';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import {
  BUILD_CONTEXT_MEDIA_TYPES,
  BuildCreateQuerySchema,
  BuildListSchema,
  BuildLogEventSchema,
  BuildLogsQuerySchema,
  BuildReplySchema,
  DEFAULT_TEMPLATE_TAG,
  LIMITS,
  NDJSON_MEDIA_TYPE,
  SandboxdError,
  TEMPLATE_NAME_PATTERN,
  TEMPLATE_TAG_PATTERN,
  TemplateListSchema,
  type BuildLogEvent,
} from '@sandboxd/protocol';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import { toWireBuild, toWireTemplate } from '../../builds/wire.js';
import { principalOf, type HttpDeps } from '../deps.js';
import { acceptRawBodies } from './raw-body.js';

const tags = ['builds'];

/** `{buildId}` of the build routes. */
const BuildParamsSchema = Type.Object(
  { buildId: Type.String({ minLength: 1, maxLength: 64, description: '`bld_...`' }) },
  { additionalProperties: false },
);
/** Query of `GET /api/v1/images/builds`. */
const BuildListQuerySchema = Type.Object(
  {
    name: Type.Optional(Type.String({ pattern: TEMPLATE_NAME_PATTERN, description: 'Only builds of this template.' })),
    limit: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: LIMITS.maxPageSize,
        description: `The newest this many; default ${LIMITS.defaultPageSize}.`,
      }),
    ),
  },
  { additionalProperties: false },
);
const TemplateParamsSchema = Type.Object(
  { name: Type.String({ pattern: TEMPLATE_NAME_PATTERN }) },
  { additionalProperties: false },
);
const TemplateListQuerySchema = Type.Object(
  { name: Type.Optional(Type.String({ pattern: TEMPLATE_NAME_PATTERN, description: 'Only the tags of this name.' })) },
  { additionalProperties: false },
);
const TemplateDeleteQuerySchema = Type.Object(
  {
    tag: Type.Optional(Type.String({ pattern: TEMPLATE_TAG_PATTERN, description: 'Default: every tag of the name.' })),
  },
  { additionalProperties: false },
);
const NoContent = { 204: Type.Null() };

/** A validation error about one query parameter, in the shape of schema validation's. */
function badQuery(param: string, message: string): SandboxdError {
  return new SandboxdError('validation', `${param} ${message}`, [{ in: 'query', path: `/${param}`, message }]);
}

/** `buildArgs`: a JSON object of strings (ARG values). Throws a validation error naming it. */
export function parseBuildArgs(text: string | undefined): Record<string, string> | undefined {
  if (text === undefined) return undefined;
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw badQuery('buildArgs', 'must be a JSON object of strings, e.g. {"VERSION":"1.2"} (it is not valid JSON)');
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v))
    throw badQuery('buildArgs', 'must be a JSON object of strings, e.g. {"VERSION":"1.2"}');
  const entries = Object.entries(v);
  for (const [k, x] of entries) {
    if (k === '' || /[\s=]/.test(k)) throw badQuery('buildArgs', `has an invalid ARG name ${JSON.stringify(k)}`);
    if (typeof x !== 'string')
      throw badQuery(
        'buildArgs',
        `must map names to strings (${JSON.stringify(k)} is ${x === null ? 'null' : typeof x})`,
      );
  }
  // fromEntries defines each key as its own property (`__proto__` too, never the prototype).
  return Object.fromEntries(entries) as Record<string, string>;
}

/** `allowDomains`: comma-separated, blanks trimmed, empty items dropped (checked by the service). */
export function parseAllowDomains(text: string | undefined): string[] | undefined {
  if (text === undefined) return undefined;
  return text
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

/** The media type of a request, lowercased, without parameters. */
function mediaType(req: FastifyRequest): string {
  return (req.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase();
}

/**
 * A build's log events as an NDJSON body, one line each, written as they come (each line
 * goes out in its own write). Pulled: the next event is asked for only when the client has
 * read the last, so a slow client slows only its own stream. When the client goes, `stop`
 * is called (the service's iteration ends through its signal). `onStart` runs at the first
 * read, once the response has its status and headers: it sends them, so a client waiting on
 * a build with no new line yet has its answer's head at once.
 */
function ndjsonBody(events: AsyncIterable<BuildLogEvent>, stop: () => void, onStart: () => void): Readable {
  const it = events[Symbol.asyncIterator]();
  let started = false;
  return new Readable({
    highWaterMark: 64 * 1024,
    read() {
      if (!started) {
        started = true;
        onStart();
      }
      it.next().then(
        (r) => {
          if (r.done) this.push(null);
          else this.push(`${JSON.stringify(r.value)}\n`);
        },
        (err: unknown) => this.destroy(err instanceof Error ? err : new Error(String(err))),
      );
    },
    destroy(err, cb) {
      stop();
      // A pending next() settles once the signal ends the iteration; return() after it.
      Promise.resolve(it.return?.()).catch(() => {});
      cb(err);
    },
  });
}

/**
 * Image builds (templates) of the account: a Dockerfile and its context built in the
 * account's sandboxes into `templates/<name>:<tag>` (docs/templates.md). Thin: every call
 * goes to `services.builds` (BuildsApi), read at each request.
 */
export const buildRoutes: FastifyPluginAsyncTypebox<HttpDeps> = async (app, d) => {
  const builds = () => d.services.builds;
  // Followed logs end when the server closes (their clients resume elsewhere with `offset`):
  // closing waits for requests in flight, and a build may run for half an hour.
  const following = new Set<AbortController>();
  app.addHook('preClose', (done) => {
    for (const c of following) c.abort();
    done();
  });

  app.addHook('preHandler', async (req, reply) => {
    const id = (req.params as { buildId?: string } | undefined)?.buildId;
    if (id) req.log = reply.log = req.log.child({ buildId: id });
  });

  // The context is the raw body, streamed to the service unread.
  const createRoute: FastifyPluginAsyncTypebox = async (raw) => {
    acceptRawBodies(raw);
    raw.post(
      '/api/v1/images/builds',
      {
        schema: {
          operationId: 'createBuild',
          summary:
            'Build a template from a Dockerfile; the body is the context as a tar (Content-Type: application/x-tar, or gzip)',
          description:
            'The Dockerfile is `dockerfile` in the context (default `Dockerfile`); `.dockerignore` applies. Everything is checked (the Dockerfile, the images it names, build args, allowDomains against the plan) before the answer: a 400 names the line. The build then runs in the background (202): follow `/logs?follow=true`; it ends `ready` with the image `templates/<name>:<tag>`, or `error` naming the failing step.',
          tags,
          querystring: BuildCreateQuerySchema,
          response: { 202: BuildReplySchema },
        },
        config: { errors: [400, 401, 403, 404, 409, 413, 507] },
        // A refusal answered before the whole context was read (a context over the plan's size,
        // a bad tar) closes the connection: the rest of the body is never read, so the
        // connection could carry no other request (the client's next one on it would hang
        // until the idle timeout, then fail).
        onSend: async (req, reply, payload) => {
          if (!req.raw.complete) reply.header('connection', 'close');
          return payload;
        },
        onRequest: async (req) => {
          const type = mediaType(req);
          if (!(BUILD_CONTEXT_MEDIA_TYPES as readonly string[]).includes(type)) {
            throw new SandboxdError(
              'validation',
              `Content-Type must be ${BUILD_CONTEXT_MEDIA_TYPES.join(' or ')}: send the build context as a tar (gzip or not) as the body${type ? ` (got ${type})` : ''}`,
              [
                {
                  in: 'header',
                  path: '/content-type',
                  message: `must be one of ${BUILD_CONTEXT_MEDIA_TYPES.join(', ')}`,
                },
              ],
            );
          }
        },
      },
      async (req, reply) => {
        const q = req.query;
        const o = {
          name: q.name,
          tag: q.tag ?? DEFAULT_TEMPLATE_TAG,
          dockerfile: q.dockerfile,
          buildArgs: parseBuildArgs(q.buildArgs),
          allowDomains: parseAllowDomains(q.allowDomains),
          noCache: q.noCache === true,
        };
        const r = await builds().createFromDockerfile(principalOf(req).account, o, req.raw);
        return reply.code(202).send({ build: toWireBuild(r) });
      },
    );
  };
  await app.register(createRoute);

  app.get(
    '/api/v1/images/builds',
    {
      schema: {
        operationId: 'listBuilds',
        summary: "The account's builds, newest first",
        tags,
        querystring: BuildListQuerySchema,
        response: { 200: BuildListSchema },
      },
      config: { errors: [400, 401] },
    },
    async (req) => {
      const list = await builds().list(principalOf(req).account.id, {
        name: req.query.name,
        limit: req.query.limit ?? LIMITS.defaultPageSize,
      });
      return { count: list.length, builds: list.map(toWireBuild) };
    },
  );

  app.get(
    '/api/v1/images/builds/:buildId',
    {
      schema: {
        operationId: 'getBuild',
        summary: 'Get a build: its state, steps done and cached, and its failure',
        tags,
        params: BuildParamsSchema,
        response: { 200: BuildReplySchema },
      },
      config: { errors: [401, 404] },
    },
    async (req) => ({ build: toWireBuild(await builds().get(principalOf(req).account.id, req.params.buildId)) }),
  );

  app.get(
    '/api/v1/images/builds/:buildId/logs',
    {
      schema: {
        operationId: 'buildLogs',
        summary:
          "A build's log as NDJSON from `offset`; with follow=true, live lines and one `end` line when it is final",
        description:
          'Each `log` line has a `seq` (from 0, no gaps): after a dropped connection, ask again with `offset` = the last seq + 1. A followed stream ends with exactly one `end` line (at once for a final build).',
        tags,
        params: BuildParamsSchema,
        querystring: BuildLogsQuerySchema,
        response: {
          200: {
            description: 'One BuildLogEvent per line.',
            content: { [NDJSON_MEDIA_TYPE]: { schema: BuildLogEventSchema } },
          },
        },
      },
      config: { errors: [400, 401, 404] },
    },
    async (req, reply) => {
      const accountId = principalOf(req).account.id;
      const { buildId } = req.params;
      // A missing build (or another account's) is a 404 before the stream starts.
      await builds().get(accountId, buildId);
      return streamLogs(req, reply, following, (signal) =>
        builds().logs(accountId, buildId, { offset: req.query.offset, follow: req.query.follow === true, signal }),
      );
    },
  );

  app.post(
    '/api/v1/images/builds/:buildId/cancel',
    {
      schema: {
        operationId: 'cancelBuild',
        summary: 'Cancel a queued or running build: it ends `cancelled`, its sandboxes deleted (409 once final)',
        tags,
        params: BuildParamsSchema,
        response: { 200: BuildReplySchema },
      },
      config: { errors: [401, 404, 409] },
    },
    async (req) => ({
      build: toWireBuild(await builds().cancel(principalOf(req).account.id, req.params.buildId)),
    }),
  );

  app.delete(
    '/api/v1/images/builds/:buildId',
    {
      schema: {
        operationId: 'deleteBuild',
        summary: 'Forget a build and its log (a running one is cancelled first); the template it made stays',
        tags,
        params: BuildParamsSchema,
        response: NoContent,
      },
      config: { errors: [401, 404, 409] },
    },
    async (req, reply) => {
      await builds().delete(principalOf(req).account.id, req.params.buildId);
      return reply.code(204).send(null);
    },
  );

  app.get(
    '/api/v1/templates',
    {
      schema: {
        operationId: 'listTemplates',
        summary: "The account's templates (images templates/<name>:<tag> made by builds)",
        tags,
        querystring: TemplateListQuerySchema,
        response: { 200: TemplateListSchema },
      },
      config: { errors: [400, 401] },
    },
    async (req) => {
      const list = await builds().listTemplates(principalOf(req).account.id, { name: req.query.name });
      return { count: list.length, templates: list.map(toWireTemplate) };
    },
  );

  app.delete(
    '/api/v1/templates/:name',
    {
      schema: {
        operationId: 'deleteTemplate',
        summary: 'Delete a template: one tag, or every tag without `tag` (sandboxes made from it keep their files)',
        tags,
        params: TemplateParamsSchema,
        querystring: TemplateDeleteQuerySchema,
        response: NoContent,
      },
      config: { errors: [400, 401, 404] },
    },
    async (req, reply) => {
      await builds().deleteTemplate(principalOf(req).account.id, req.params.name, req.query.tag);
      return reply.code(204).send(null);
    },
  );
};

/**
 * Answers 200 NDJSON of `open(signal)`'s events; the signal aborts when the response closes
 * (the client went) or the server closes (`following`'s controllers), which ends the
 * service's iteration and so the answer.
 */
function streamLogs(
  req: FastifyRequest,
  reply: FastifyReply,
  following: Set<AbortController>,
  open: (signal: AbortSignal) => AsyncIterable<BuildLogEvent>,
): FastifyReply {
  const gone = new AbortController();
  following.add(gone);
  const stop = () => {
    following.delete(gone);
    gone.abort();
  };
  reply.raw.once('close', stop);
  const body = ndjsonBody(open(gone.signal), stop, () => {
    if (!reply.raw.headersSent) reply.raw.flushHeaders();
  });
  body.once('error', (err) => req.log.warn({ err }, 'build log stream cut'));
  return reply.code(200).type(NDJSON_MEDIA_TYPE).header('cache-control', 'no-store').send(body);
}
