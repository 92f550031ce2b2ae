import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import {
  AccountSchema,
  EventListSchema,
  KeyCreatedSchema,
  KeyCreateSchema,
  KeyListSchema,
  KeyParamsSchema,
  LedgerPageSchema,
  LedgerQuerySchema,
  LIMITS,
  SuccessReply,
  TrackEventSchema,
  VolumeListSchema,
  VolumeParamsSchema,
} from '@sandboxd/protocol';
import { Type } from 'typebox';
import { principalOf, type HttpDeps } from '../deps.js';

const iso = (t: number) => new Date(t).toISOString();

/** Account, ledger, API keys, volumes and tracked events of the caller. */
export const accountRoutes: FastifyPluginAsyncTypebox<HttpDeps> = async (app, d) => {
  const { accounts, auth, volumes, events } = d.services;

  app.get(
    '/api/v1/account',
    {
      schema: {
        operationId: 'getAccount',
        summary: 'Plan, balance, limits and usage',
        tags: ['account'],
        response: { 200: AccountSchema },
      },
      config: { errors: [401] },
    },
    async (req) => accounts.describe(principalOf(req).account),
  );

  app.get(
    '/api/v1/account/ledger',
    {
      schema: {
        operationId: 'listLedger',
        summary: 'Token debits and credits, newest first',
        tags: ['account'],
        querystring: LedgerQuerySchema,
        response: { 200: LedgerPageSchema },
      },
      config: { errors: [400, 401] },
    },
    async (req) => {
      const page = await accounts.ledger(principalOf(req).account.id, {
        limit: req.query.limit ?? LIMITS.defaultPageSize,
        cursor: req.query.cursor,
      });
      const out: { entries: unknown[]; nextCursor?: string } = {
        entries: page.items.map((e) => ({
          id: e.id,
          delta: e.delta,
          reason: e.reason,
          sandboxId: e.sandboxId,
          createdAt: iso(e.createdAt),
        })),
      };
      if (page.nextCursor) out.nextCursor = page.nextCursor;
      return out as never;
    },
  );

  app.post(
    '/api/v1/keys',
    {
      schema: {
        operationId: 'createKey',
        summary: 'Create an API key (shown once)',
        tags: ['keys'],
        body: KeyCreateSchema,
        response: { 201: KeyCreatedSchema },
      },
      config: { errors: [400, 401] },
    },
    async (req, reply) => {
      const k = await auth.createKey(principalOf(req).account.id, req.body.name);
      return reply
        .code(201)
        .send({ id: k.id, name: k.name, prefix: k.prefix, createdAt: iso(k.createdAt), key: k.key });
    },
  );

  app.get(
    '/api/v1/keys',
    {
      schema: {
        operationId: 'listKeys',
        summary: 'List API keys (never the keys)',
        tags: ['keys'],
        response: { 200: KeyListSchema },
      },
      config: { errors: [401] },
    },
    async (req) => ({
      keys: (await auth.listKeys(principalOf(req).account.id)).map((k) => ({
        id: k.id,
        name: k.name,
        prefix: k.prefix,
        createdAt: iso(k.createdAt),
        lastUsedAt: k.lastUsedAt === null ? null : iso(k.lastUsedAt),
      })),
    }),
  );

  app.delete(
    '/api/v1/keys/:id',
    {
      schema: {
        operationId: 'deleteKey',
        summary: 'Revoke an API key',
        tags: ['keys'],
        params: KeyParamsSchema,
        response: { 204: Type.Null() },
      },
      config: { errors: [401, 404] },
    },
    async (req, reply) => {
      await auth.deleteKey(principalOf(req).account.id, req.params.id);
      return reply.code(204).send(null);
    },
  );

  app.get(
    '/api/v1/volumes',
    {
      schema: {
        operationId: 'listVolumes',
        summary: 'List volumes',
        tags: ['volumes'],
        response: { 200: VolumeListSchema },
      },
      config: { errors: [401] },
    },
    async (req) => ({ volumes: await volumes.list(principalOf(req).account.id) }),
  );

  app.delete(
    '/api/v1/volumes/:name',
    {
      schema: {
        operationId: 'deleteVolume',
        summary: 'Delete a volume and its data',
        tags: ['volumes'],
        params: VolumeParamsSchema,
        response: { 204: Type.Null() },
      },
      config: { errors: [401, 404, 409] },
    },
    async (req, reply) => {
      await volumes.delete(principalOf(req).account.id, req.params.name);
      return reply.code(204).send(null);
    },
  );

  app.post(
    '/api/v1/events/track',
    {
      schema: {
        operationId: 'trackEvent',
        summary: 'Track a client-side onboarding event',
        tags: ['events'],
        body: TrackEventSchema,
        response: { 200: SuccessReply },
      },
      config: { errors: [400, 401] },
    },
    async (req) => {
      await events.track(principalOf(req).account.id, req.body);
      return { success: true as const };
    },
  );

  app.get(
    '/api/v1/events',
    {
      schema: {
        operationId: 'listEvents',
        summary: 'Tracked events of the account, oldest first',
        tags: ['events'],
        response: { 200: EventListSchema },
      },
      config: { errors: [401] },
    },
    async (req) => ({
      events: (await events.list(principalOf(req).account.id)).map((e) => ({
        event: e.event,
        metadata: e.metadata,
        createdAt: iso(e.createdAt),
      })),
    }),
  );
};
