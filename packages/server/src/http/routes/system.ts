import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { HealthSchema, ProbeSchema, SandboxdError } from '@sandboxd/protocol';
import { Type } from 'typebox';
import { optionalPrincipal } from '../auth.js';
import type { HttpDeps } from '../deps.js';

/** Health, the kubelet's probes, metrics, the OpenAPI document and (only with SANDBOXD_TEST_CLOCK=1) the test clock. */
export const systemRoutes: FastifyPluginAsyncTypebox<HttpDeps> = async (app, d) => {
  // The probes: no credentials, never rate limited, a fixed body that reveals nothing (the
  // figures are /healthz's). docs/kubernetes.md#probes.
  app.get(
    '/livez',
    {
      schema: {
        operationId: 'live',
        summary: 'Liveness probe: 200 while the process answers HTTP',
        description:
          'No credentials. Always `{"status":"ok"}` while the process serves HTTP (starting and shutting down included): restart the process only when this goes unanswered. Reveals nothing else.',
        tags: ['system'],
        response: { 200: ProbeSchema },
      },
      config: { auth: 'none', rateLimit: false },
    },
    async () => ({ status: 'ok' as const }),
  );
  app.get(
    '/readyz',
    {
      schema: {
        operationId: 'ready',
        summary: 'Readiness probe: 200 while the server can serve, else 503',
        description:
          'No credentials. `{"status":"ok"}` once start-up is done, while the database answers and (role `api`) at least one runner answers; 503 `unavailable` otherwise (starting, shutting down, database or every runner unreachable). Reveals nothing else: what is left and why is in `/healthz`.',
        tags: ['system'],
        response: { 200: ProbeSchema },
      },
      config: { auth: 'none', rateLimit: false, errors: [503] },
    },
    async (_req, reply) => {
      if (await d.readiness()) return { status: 'ok' as const };
      reply.header('cache-control', 'no-store');
      throw new SandboxdError('unavailable', 'Not ready');
    },
  );
  app.get(
    '/healthz',
    {
      schema: {
        operationId: 'health',
        summary: '200 once the server can create sandboxes, with what the host has left for them',
        description:
          "Answers 200 while the server runs, whether or not the host has room: `capacity` says what is left (`full` names what a create would be refused for with 503 `capacity`). 503 only while starting or shutting down. `capacity` is absent when it could not be measured (role `api`: no runner answers). `isolations` lists the isolation tiers a create may ask for here, each with its OCI runtime (and gVisor's platform). Role `api` adds `runners`, each runner's address, state and what it last reported, for an admin's credentials only (no credentials, or an account's: no `runners`).",
        tags: ['system'],
        response: { 200: HealthSchema },
      },
      config: { auth: 'none', rateLimit: false, errors: [503] },
    },
    async (req) => {
      if (!d.isReady()) throw new SandboxdError('unavailable', 'Starting');
      // Runners' addresses, node names and failure reasons are for admins: anyone may ask this.
      const admin = d.runners ? (await optionalPrincipal(req, d.services.auth))?.account.admin === true : false;
      const runners = d.runners && admin ? { runners: d.runners() } : {};
      const isolations = d.services.sandboxes.isolations();
      try {
        return { status: 'ok' as const, capacity: await d.services.capacity.report(), isolations, ...runners };
      } catch (err) {
        req.log.warn({ err }, 'capacity could not be measured');
        return { status: 'ok' as const, isolations, ...runners };
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
