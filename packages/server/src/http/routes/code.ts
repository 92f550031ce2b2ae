import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import {
  CodeContextCreateSchema,
  CodeContextListSchema,
  CodeContextParamsSchema,
  CodeContextSchema,
  CodeExecuteRequestSchema,
  SandboxParamsSchema,
} from '@sandboxd/protocol';
import { Type } from 'typebox';
import { principalOf, type HttpDeps } from '../deps.js';

const tags = ['code'];
const NoContent = { 204: Type.Null({ description: 'Done.' }) };

/**
 * The code interpreter of a sandbox made from `local/code-interpreter`: sandboxd's
 * authenticated relay to its in-sandbox server (E2B's protocol on port 49999), answered in
 * sandboxd's shapes (services/code.ts).
 */
export const codeRoutes: FastifyPluginAsyncTypebox<HttpDeps> = async (app, d) => {
  const { code } = d.services;

  app.post(
    '/api/v1/sandboxes/:id/code/execute',
    {
      schema: {
        operationId: 'runCode',
        summary: "Run code in a kernel of the sandbox's code interpreter, streaming its events",
        tags,
        params: SandboxParamsSchema,
        body: CodeExecuteRequestSchema,
        response: {
          200: {
            description:
              'One JSON object per line: `stdout`/`stderr` (`text`, `timestamp`), `result` (`result` with every representation and `isMainResult`), `error` (`name`, `value`, `traceback`), `executionCount` (`count`), then `end`. A run past its timeout ends with an `error` named `TimeoutError` instead of `end`.',
            content: { 'application/x-ndjson': { schema: Type.String() } },
          },
        },
      },
      config: { errors: [400, 401, 404, 409, 429, 502, 504] },
    },
    async (req, reply) => {
      // The client going (before or during the run) closes the connection to the sandbox.
      const gone = new AbortController();
      reply.raw.once('close', () => gone.abort());
      const body = await code.execute(principalOf(req).account.id, req.params.id, req.body, gone.signal);
      return reply.type('application/x-ndjson').send(body as never);
    },
  );

  app.get(
    '/api/v1/sandboxes/:id/code/contexts',
    {
      schema: {
        operationId: 'listCodeContexts',
        summary: "The contexts (kernels) of the sandbox's code interpreter",
        tags,
        params: SandboxParamsSchema,
        response: { 200: CodeContextListSchema },
      },
      config: { errors: [400, 401, 404, 409, 502, 504] },
    },
    async (req) => ({ contexts: await code.listContexts(principalOf(req).account.id, req.params.id) }),
  );

  app.post(
    '/api/v1/sandboxes/:id/code/contexts',
    {
      schema: {
        operationId: 'createCodeContext',
        summary: 'Start a new context: a kernel of its own, for one language, in a working directory',
        tags,
        params: SandboxParamsSchema,
        body: CodeContextCreateSchema,
        response: { 201: CodeContextSchema },
      },
      config: { errors: [400, 401, 404, 409, 502, 504] },
      // An empty POST takes the defaults.
      preValidation: async (req) => {
        req.body ??= {};
      },
    },
    async (req, reply) => {
      const ctx = await code.createContext(principalOf(req).account.id, req.params.id, req.body);
      return reply.code(201).send(ctx);
    },
  );

  app.delete(
    '/api/v1/sandboxes/:id/code/contexts/:contextId',
    {
      schema: {
        operationId: 'removeCodeContext',
        summary: 'End a context and its kernel',
        tags,
        params: CodeContextParamsSchema,
        response: NoContent,
      },
      config: { errors: [400, 401, 404, 409, 502, 504] },
    },
    async (req, reply) => {
      await code.removeContext(principalOf(req).account.id, req.params.id, req.params.contextId);
      return reply.code(204).send(null);
    },
  );

  app.post(
    '/api/v1/sandboxes/:id/code/contexts/:contextId/restart',
    {
      schema: {
        operationId: 'restartCodeContext',
        summary: "Restart a context's kernel: its state is lost, its id stays",
        tags,
        params: CodeContextParamsSchema,
        response: NoContent,
      },
      config: { errors: [400, 401, 404, 409, 502, 504] },
    },
    async (req, reply) => {
      await code.restartContext(principalOf(req).account.id, req.params.id, req.params.contextId);
      return reply.code(204).send(null);
    },
  );
};
