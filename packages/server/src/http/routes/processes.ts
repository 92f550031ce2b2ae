import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { ProcessListSchema, SandboxParamsSchema, SignalRequestSchema } from '@sandboxd/protocol';
import { Type } from 'typebox';
import { principalOf, type HttpDeps } from '../deps.js';
import { followProcess } from '../ndjson.js';
import { acceptRawBodies } from './raw-body.js';

const tags = ['processes'];
const ProcessParams = Type.Object(
  { id: SandboxParamsSchema.properties.id, pid: Type.Integer({ minimum: 1, maximum: 4194304 }) },
  { additionalProperties: false },
);
const NoContent = { 204: Type.Null({ description: 'Done.' }) };

/** Processes started through the API: list, output (replay + follow), stdin, signals. */
export const processRoutes: FastifyPluginAsyncTypebox<HttpDeps> = async (app, d) => {
  const { processes } = d.services;

  app.get(
    '/api/v1/sandboxes/:id/processes',
    {
      schema: {
        operationId: 'listProcesses',
        summary: 'Processes started through the API (background and streamed execs), running and recently exited',
        tags,
        params: SandboxParamsSchema,
        response: { 200: ProcessListSchema },
      },
      config: { errors: [400, 401, 404] },
    },
    async (req) => ({ processes: await processes.list(principalOf(req).account.id, req.params.id) }),
  );

  app.get(
    '/api/v1/sandboxes/:id/processes/:pid/output',
    {
      schema: {
        operationId: 'processOutput',
        summary: "A process's output as NDJSON: start, the last 1 MiB kept, then (follow=true) live output until exit",
        tags,
        params: ProcessParams,
        querystring: Type.Object(
          { follow: Type.Optional(Type.Boolean({ default: false })) },
          { additionalProperties: false },
        ),
        response: {
          200: {
            description: 'One JSON object per line: `start` (with `replayFrom`), `stdout`/`stderr`, `exit`.',
            content: { 'application/x-ndjson': { schema: Type.String() } },
          },
        },
      },
      config: { errors: [400, 401, 404] },
    },
    async (req, reply) => {
      const accountId = principalOf(req).account.id;
      const { id, pid } = req.params;
      const follow = (req.query as { follow?: boolean }).follow === true;
      const body = await followProcess((f, o) => processes.follow(accountId, id, pid, f, o), {
        reconnect: true,
        follow,
      });
      return reply.type('application/x-ndjson').send(body as never);
    },
  );

  app.post(
    '/api/v1/sandboxes/:id/processes/:pid/stdin/close',
    {
      schema: {
        operationId: 'closeProcessStdin',
        summary: "Close a process's stdin (it reads EOF)",
        tags,
        params: ProcessParams,
        response: NoContent,
      },
      config: { errors: [400, 401, 404, 409] },
    },
    async (req, reply) => {
      await processes.closeStdin(principalOf(req).account.id, req.params.id, req.params.pid);
      return reply.code(204).send(null);
    },
  );

  app.post(
    '/api/v1/sandboxes/:id/processes/:pid/signal',
    {
      schema: {
        operationId: 'signalProcess',
        summary: "Send a signal to a process's group",
        tags,
        params: ProcessParams,
        body: SignalRequestSchema,
        response: NoContent,
      },
      config: { errors: [400, 401, 404, 409] },
    },
    async (req, reply) => {
      await processes.signal(principalOf(req).account.id, req.params.id, req.params.pid, req.body.signal);
      return reply.code(204).send(null);
    },
  );

  const stdinRoutes: FastifyPluginAsyncTypebox = async (raw) => {
    acceptRawBodies(raw);
    raw.post(
      '/api/v1/sandboxes/:id/processes/:pid/stdin',
      {
        schema: {
          operationId: 'writeProcessStdin',
          summary: "Append the raw body to a process's stdin",
          tags,
          params: ProcessParams,
          response: NoContent,
        },
        config: { errors: [400, 401, 404, 409] },
      },
      async (req, reply) => {
        await processes.writeStdin(principalOf(req).account.id, req.params.id, req.params.pid, req.raw);
        return reply.code(204).send(null);
      },
    );
  };
  await app.register(stdinRoutes);
};
