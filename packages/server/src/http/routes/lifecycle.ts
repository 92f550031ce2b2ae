import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import {
  PauseRequestSchema,
  SandboxParamsSchema,
  SandboxReplySchema,
  SandboxRunRequestSchema,
  SnapshotCreateSchema,
  SnapshotListSchema,
  SnapshotParamsSchema,
  SnapshotSchema,
} from '@sandboxd/protocol';
import { Type } from 'typebox';
import { toWireSandbox } from '../../domain/sandbox.js';
import { toWireSnapshot } from '../../services/snapshots.js';
import { principalOf, type HttpDeps } from '../deps.js';

const tags = ['lifecycle'];

/** An empty POST takes the defaults. */
const emptyBody = async (req: { body: unknown }) => {
  req.body ??= {};
};

/** Pause, resume, stop, start, snapshot; the account's snapshots. Thin wrappers over LifecycleService and SnapshotService. */
export const lifecycleRoutes: FastifyPluginAsyncTypebox<HttpDeps> = async (app, d) => {
  const { lifecycle, snapshots } = d.services;
  const wire = (r: Parameters<typeof toWireSandbox>[0]) =>
    toWireSandbox(r, { publicHost: d.config.publicHost, stoppedRetentionMs: d.config.stoppedRetentionMs });

  app.addHook('preHandler', async (req, reply) => {
    const id = (req.params as { id?: string } | undefined)?.id;
    if (id) req.log = reply.log = req.log.child({ sandboxId: id });
  });

  app.post(
    '/api/v1/sandboxes/:id/pause',
    {
      schema: {
        operationId: 'pauseSandbox',
        summary:
          'Freeze every process of a started sandbox (memory, connections and terminals kept; no token charge); `{memory: "disk"}` checkpoints a gVisor sandbox to disk',
        tags,
        params: SandboxParamsSchema,
        body: PauseRequestSchema,
        response: { 200: SandboxReplySchema },
      },
      config: { errors: [400, 401, 403, 404, 409] },
      preValidation: emptyBody,
    },
    async (req) => ({
      sandbox: wire(await lifecycle.pause(principalOf(req).account, req.params.id, { memory: req.body.memory })),
    }),
  );

  app.post(
    '/api/v1/sandboxes/:id/resume',
    {
      schema: {
        operationId: 'resumeSandbox',
        summary: 'Continue a paused sandbox where it was, with stopAt = now + timeoutMs',
        tags,
        params: SandboxParamsSchema,
        body: SandboxRunRequestSchema,
        response: { 200: SandboxReplySchema },
      },
      config: { errors: [400, 401, 402, 403, 404, 409] },
      preValidation: emptyBody,
    },
    async (req) => ({
      sandbox: wire(await lifecycle.resume(principalOf(req).account, req.params.id, req.body.timeoutMs)),
    }),
  );

  app.post(
    '/api/v1/sandboxes/:id/stop',
    {
      schema: {
        operationId: 'stopSandbox',
        summary: 'Kill every process of a started or paused sandbox, keeping its filesystem for start',
        tags,
        params: SandboxParamsSchema,
        response: { 200: SandboxReplySchema },
      },
      config: { errors: [401, 404, 409] },
    },
    async (req) => ({ sandbox: wire(await lifecycle.stop(principalOf(req).account, req.params.id)) }),
  );

  app.post(
    '/api/v1/sandboxes/:id/start',
    {
      schema: {
        operationId: 'startSandbox',
        summary: 'Boot a stopped sandbox again from its kept filesystem, with stopAt = now + timeoutMs',
        tags,
        params: SandboxParamsSchema,
        body: SandboxRunRequestSchema,
        response: { 200: SandboxReplySchema },
      },
      config: { errors: [400, 401, 402, 403, 404, 409, 503, 507] },
      preValidation: emptyBody,
    },
    async (req) => ({
      sandbox: wire(await lifecycle.start(principalOf(req).account, req.params.id, req.body.timeoutMs)),
    }),
  );

  app.post(
    '/api/v1/sandboxes/:id/snapshot',
    {
      schema: {
        operationId: 'snapshotSandbox',
        summary: 'Make the sandbox filesystem (volumes excluded) an image snapshots/<name> private to the account',
        tags,
        params: SandboxParamsSchema,
        body: SnapshotCreateSchema,
        response: { 201: SnapshotSchema },
      },
      config: { errors: [400, 401, 403, 404, 409, 507] },
    },
    async (req, reply) => {
      const s = await snapshots.create(principalOf(req).account, req.params.id, req.body.name);
      return reply.code(201).send(toWireSnapshot(s));
    },
  );

  app.get(
    '/api/v1/snapshots',
    {
      schema: {
        operationId: 'listSnapshots',
        summary: "The account's snapshots, newest first",
        tags,
        response: { 200: SnapshotListSchema },
      },
      config: { errors: [401] },
    },
    async (req) => {
      const list = await snapshots.list(principalOf(req).account.id);
      return { count: list.length, snapshots: list.map(toWireSnapshot) };
    },
  );

  app.get(
    '/api/v1/snapshots/:name',
    {
      schema: {
        operationId: 'getSnapshot',
        summary: 'Get a snapshot',
        tags,
        params: SnapshotParamsSchema,
        response: { 200: Type.Object({ snapshot: SnapshotSchema }, { additionalProperties: false }) },
      },
      config: { errors: [401, 404] },
    },
    async (req) => ({ snapshot: toWireSnapshot(await snapshots.get(principalOf(req).account.id, req.params.name)) }),
  );

  app.delete(
    '/api/v1/snapshots/:name',
    {
      schema: {
        operationId: 'deleteSnapshot',
        summary: 'Delete a snapshot (sandboxes made from it keep their files)',
        tags,
        params: SnapshotParamsSchema,
        response: { 204: Type.Null() },
      },
      config: { errors: [401, 404] },
    },
    async (req, reply) => {
      await snapshots.delete(principalOf(req).account.id, req.params.name);
      return reply.code(204).send(null);
    },
  );
};
