import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { HealthSchema, SandboxdError } from '@sandboxd/protocol';
import { Type } from 'typebox';
import type { HttpDeps } from '../deps.js';

/** Health, metrics, the OpenAPI document and (only with SANDBOXD_TEST_CLOCK=1) the test clock. */
export const systemRoutes: FastifyPluginAsyncTypebox<HttpDeps> = async (app, d) => {
  app.get(
    '/healthz',
    {
      schema: {
        operationId: 'health',
        summary: '200 once the server can create sandboxes, with what the host has left for them',
        description:
          "Answers 200 while the server runs, whether or not the host has room: `capacity` says what is left (`full` names what a create would be refused for with 503 `capacity`). 503 only while starting or shutting down. `capacity` is absent when it could not be measured (role `api`: no runner answers). Role `api` adds `runners`, each runner's state and what it last reported.",
        tags: ['system'],
        response: { 200: HealthSchema },
      },
      config: { auth: 'none', rateLimit: false, errors: [503] },
    },
    async (req) => {
      if (!d.isReady()) throw new SandboxdError('unavailable', 'Starting');
      const runners = d.runners ? { runners: d.runners() } : {};
      try {
        return { status: 'ok' as const, capacity: await d.services.capacity.report(), ...runners };
      } catch (err) {
        req.log.warn({ err }, 'capacity could not be measured');
        return { status: 'ok' as const, ...runners };
      }
    },
  );

  app.get('/metrics', { schema: { hide: true }, config: { auth: 'none', rateLimit: false } }, async (_req, reply) => {
    reply.header('content-type', d.metrics.registry.contentType);
    return d.metrics.registry.metrics();
  });

  app.get('/api/v1/openapi.json', { schema: { hide: true }, config: { auth: 'none' } }, async () => d.openapi());

  if (d.testClock) {
    const clock = d.testClock;
    app.post(
      '/api/v1/_test/clock',
      {
        schema: {
          hide: true,
          body: Type.Object(
            { advanceMs: Type.Integer({ minimum: 0, maximum: 10 * 365 * 86_400_000 }) },
            { additionalProperties: false },
          ),
        },
        config: { auth: 'none' },
      },
      async (req) => {
        clock.advance(req.body.advanceMs);
        const stopped = await d.reaper.tick();
        return { now: new Date(clock.now()).toISOString(), stopped };
      },
    );
  }
};
