import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import {
  SECRET_NAME_PATTERN,
  SecretCreateSchema,
  SecretInjectionListSchema,
  SecretListSchema,
  SecretPutSchema,
  SecretReplySchema,
} from '@sandboxd/protocol';
import { Type } from 'typebox';
import { principalOf, type HttpDeps } from '../deps.js';

const tags = ['secrets'];

const SecretParamsSchema = Type.Object({ name: Type.String({ pattern: SECRET_NAME_PATTERN }) });
const InjectionQuerySchema = Type.Object(
  {
    sandboxId: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
    secret: Type.Optional(Type.String({ pattern: SECRET_NAME_PATTERN })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 500, default: 100 })),
    before: Type.Optional(
      Type.String({ minLength: 1, maxLength: 256, description: 'The `next` of the previous page.' }),
    ),
  },
  { additionalProperties: false },
);

/**
 * The caller's secrets (values are write-only: no answer carries one) and the audit trail of
 * their injections. API key or session, like the other account routes; docs/secrets.md.
 */
export const secretRoutes: FastifyPluginAsyncTypebox<HttpDeps> = async (app, d) => {
  const { secrets } = d.services;

  app.post(
    '/api/v1/secrets',
    {
      schema: {
        operationId: 'createSecret',
        summary: 'Create a secret',
        description:
          'Stores a value encrypted; sandboxes name it in `network.secrets` rules and hold only a placeholder. 409 when the account has one of that name, 403 `quota` past 500 secrets.',
        tags,
        body: SecretCreateSchema,
        response: { 201: SecretReplySchema },
      },
      config: { errors: [400, 401, 403, 409] },
    },
    async (req, reply) => {
      const secret = await secrets.create(principalOf(req).account.id, req.body);
      return reply.code(201).send({ secret });
    },
  );

  app.get(
    '/api/v1/secrets',
    {
      schema: {
        operationId: 'listSecrets',
        summary: 'List secrets (names and metadata, never values)',
        tags,
        response: { 200: SecretListSchema },
      },
      config: { errors: [401] },
    },
    async (req) => ({ secrets: await secrets.list(principalOf(req).account.id) }),
  );

  app.get(
    '/api/v1/secrets/injections',
    {
      schema: {
        operationId: 'listSecretInjections',
        summary: 'The audit trail of injections, newest first',
        description:
          'Each request the egress proxy put a secret into (or tried to): sandbox, secret, destination, method, status. Kept 30 days, at most 100,000 an account.',
        tags,
        querystring: InjectionQuerySchema,
        response: { 200: SecretInjectionListSchema },
      },
      config: { errors: [400, 401] },
    },
    async (req) => secrets.listInjections(principalOf(req).account.id, req.query),
  );

  app.get(
    '/api/v1/secrets/:name',
    {
      schema: {
        operationId: 'getSecret',
        summary: 'Get a secret (metadata, never its value)',
        tags,
        params: SecretParamsSchema,
        response: { 200: SecretReplySchema },
      },
      config: { errors: [400, 401, 404] },
    },
    async (req) => ({ secret: await secrets.get(principalOf(req).account.id, req.params.name) }),
  );

  app.put(
    '/api/v1/secrets/:name',
    {
      schema: {
        operationId: 'putSecret',
        summary: 'Create or change a secret',
        description:
          '201 when created (a value is then required), 200 when changed. A new value reaches every sandbox whose rules name the secret before the answer.',
        tags,
        params: SecretParamsSchema,
        body: SecretPutSchema,
        response: { 200: SecretReplySchema, 201: SecretReplySchema },
      },
      config: { errors: [400, 401, 403] },
    },
    async (req, reply) => {
      const { secret, created } = await secrets.put(principalOf(req).account.id, req.params.name, req.body);
      return reply.code(created ? 201 : 200).send({ secret });
    },
  );

  app.delete(
    '/api/v1/secrets/:name',
    {
      schema: {
        operationId: 'deleteSecret',
        summary: 'Delete a secret',
        description:
          'Rules naming it stay, injecting nothing from the answer on (requests carry the placeholder); a secret made again under that name injects again.',
        tags,
        params: SecretParamsSchema,
        response: { 204: Type.Null() },
      },
      config: { errors: [400, 401, 404] },
    },
    async (req, reply) => {
      await secrets.delete(principalOf(req).account.id, req.params.name);
      return reply.code(204).send(null);
    },
  );
};
