import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import {
  ExecRequestSchema,
  ExecResultSchema,
  ForkReplySchema,
  ForkRequestSchema,
  PortLinkParamsSchema,
  PortLinkReplySchema,
  PortLinkRequestSchema,
  SandboxCreateSchema,
  SandboxListQuerySchema,
  SandboxListSchema,
  SandboxNetworkReplySchema,
  SandboxNetworkSchema,
  SandboxParamsSchema,
  SandboxReplySchema,
  TimeoutReplySchema,
  TimeoutRequestSchema,
} from '@sandboxd/protocol';
import { Type } from 'typebox';
import { toWireSandbox } from '../../domain/sandbox.js';
import { principalOf, type HttpDeps } from '../deps.js';
import { followProcess } from '../ndjson.js';

const tags = ['sandboxes'];

/** Sandbox routes: thin wrappers over SandboxService, TimeoutService and ExecService. */
export const sandboxRoutes: FastifyPluginAsyncTypebox<HttpDeps> = async (app, d) => {
  const { sandboxes, timeout, exec } = d.services;
  const wire = (r: Parameters<typeof toWireSandbox>[0]) =>
    toWireSandbox(r, { publicHost: d.config.publicHost, stoppedRetentionMs: d.config.stoppedRetentionMs });

  app.addHook('preHandler', async (req, reply) => {
    const id = (req.params as { id?: string } | undefined)?.id;
    if (id) req.log = reply.log = req.log.child({ sandboxId: id });
  });

  app.post(
    '/api/v1/sandboxes',
    {
      schema: {
        operationId: 'createSandbox',
        summary: 'Create a sandbox',
        tags,
        body: SandboxCreateSchema,
        response: { 201: SandboxReplySchema },
      },
      config: { errors: [400, 401, 402, 403, 404, 409, 503, 507] },
    },
    async (req, reply) => {
      const end = d.metrics.createSeconds.startTimer();
      try {
        const r = await sandboxes.create(principalOf(req).account, req.body);
        end({ outcome: 'ok' });
        return reply.code(201).send({ sandbox: wire(r) });
      } catch (e) {
        end({ outcome: 'error' });
        throw e;
      }
    },
  );

  app.post(
    '/api/v1/sandboxes/:id/fork',
    {
      schema: {
        operationId: 'forkSandbox',
        summary:
          'Make `count` new sandboxes from a started gVisor sandbox: its processes, memory and files, each with its own address and writable layer',
        tags,
        params: SandboxParamsSchema,
        body: ForkRequestSchema,
        response: { 201: ForkReplySchema },
      },
      config: { errors: [400, 401, 402, 403, 404, 409, 501, 503, 507] },
      preValidation: async (req: { body: unknown }) => {
        req.body ??= {};
      },
    },
    async (req, reply) => {
      const forks = await sandboxes.fork(principalOf(req).account, req.params.id, req.body.count ?? 1);
      return reply.code(201).send({ sandboxes: forks.map(wire) });
    },
  );

  app.get(
    '/api/v1/sandboxes',
    {
      schema: {
        operationId: 'listSandboxes',
        summary: 'List sandboxes, newest first',
        tags,
        querystring: SandboxListQuerySchema,
        response: { 200: SandboxListSchema },
      },
      config: { errors: [400, 401] },
    },
    async (req) => {
      const page = await sandboxes.list(principalOf(req).account.id, req.query);
      const out: { count: number; sandboxes: ReturnType<typeof wire>[]; nextCursor?: string } = {
        count: page.items.length,
        sandboxes: page.items.map(wire),
      };
      if (page.nextCursor) out.nextCursor = page.nextCursor;
      return out;
    },
  );

  app.get(
    '/api/v1/sandboxes/:id',
    {
      schema: {
        operationId: 'getSandbox',
        summary: 'Get a sandbox',
        tags,
        params: SandboxParamsSchema,
        response: { 200: SandboxReplySchema },
      },
      config: { errors: [401, 404] },
    },
    async (req) => ({ sandbox: wire(await sandboxes.get(principalOf(req).account.id, req.params.id)) }),
  );

  app.delete(
    '/api/v1/sandboxes/:id',
    {
      schema: {
        operationId: 'deleteSandbox',
        summary: 'Kill a sandbox, remove what it kept (memory, root layer) and its record',
        tags,
        params: SandboxParamsSchema,
        response: { 204: Type.Null() },
      },
      config: { errors: [401, 404, 409] },
    },
    async (req, reply) => {
      await sandboxes.delete(principalOf(req).account.id, req.params.id);
      return reply.code(204).send(null);
    },
  );

  app.patch(
    '/api/v1/sandboxes/:id/timeout',
    {
      schema: {
        operationId: 'updateSandboxTimeout',
        summary: 'Set stopAt = now + timeoutMs',
        tags,
        params: SandboxParamsSchema,
        body: TimeoutRequestSchema,
        response: { 200: TimeoutReplySchema },
      },
      config: { errors: [400, 401, 402, 404, 409] },
    },
    async (req) => {
      const r = await timeout.set(principalOf(req).account, { id: req.params.id, timeoutMs: req.body.timeoutMs });
      return { id: r.id, stopAt: new Date(r.stopAt).toISOString() };
    },
  );

  app.patch(
    '/api/v1/sandboxes/:id/network',
    {
      schema: {
        operationId: 'updateSandboxNetwork',
        summary: "Replace a sandbox's egress; new connections follow it at once",
        description:
          'Started, paused or stopped sandboxes (a stopped one gets it at its next start); connections already open stay. 403 `quota` when the plan does not allow it; 409 in the error state.',
        tags,
        params: SandboxParamsSchema,
        body: SandboxNetworkSchema,
        response: { 200: SandboxNetworkReplySchema },
      },
      config: { errors: [400, 401, 403, 404, 409, 501] },
    },
    async (req) => {
      const r = await sandboxes.updateNetwork(principalOf(req).account, req.params.id, req.body);
      return { id: r.id, network: r.network ?? { egress: 'none' as const } };
    },
  );

  app.post(
    '/api/v1/sandboxes/:id/exec',
    {
      schema: {
        operationId: 'execCommand',
        summary: 'Run /bin/sh -c command in the sandbox',
        tags,
        params: SandboxParamsSchema,
        body: ExecRequestSchema,
        response: {
          200: {
            description:
              'The result; with `options.stream`, `application/x-ndjson` lines instead: `start`, `stdout`/`stderr`, `exit`.',
            content: {
              'application/json': { schema: ExecResultSchema },
              'application/x-ndjson': { schema: Type.String() },
            },
          },
        },
      },
      config: { errors: [400, 401, 404, 409, 507] },
    },
    async (req, reply) => {
      const o = req.body.options;
      const end = d.metrics.execSeconds.startTimer({
        mode: o?.stream ? 'stream' : o?.background ? 'background' : 'foreground',
      });
      try {
        const call = { ...req.body, sandboxId: req.params.id };
        if (o?.stream) {
          const p = await exec.stream(principalOf(req).account.id, call);
          const body = await followProcess(p.follow, { reconnect: false, follow: true });
          return reply.type('application/x-ndjson').send(body as never);
        }
        return await exec.run(principalOf(req).account.id, call);
      } finally {
        end();
      }
    },
  );

  app.post(
    '/api/v1/sandboxes/:id/ports/:port/link',
    {
      schema: {
        operationId: 'createPortLink',
        summary: 'Sign an expiring link to a port of the sandbox (opens private ports)',
        tags,
        params: PortLinkParamsSchema,
        body: PortLinkRequestSchema,
        response: { 200: PortLinkReplySchema },
      },
      config: { errors: [400, 401, 404, 409] },
      // An empty POST takes the defaults.
      preValidation: async (req) => {
        req.body ??= {};
      },
    },
    async (req) => {
      const link = await sandboxes.portLink(principalOf(req).account.id, {
        id: req.params.id,
        port: req.params.port,
        expiresInMs: req.body.expiresInMs,
        scheme: req.protocol === 'https' ? 'https' : 'http',
      });
      return { url: link.url, expiresAt: new Date(link.expiresAt).toISOString() };
    },
  );
};
