import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import {
  AccountParamsSchema,
  AccountReplySchema,
  AdminAccountCreateSchema,
  AdminAccountListSchema,
  AdminAccountPatchSchema,
  AdminGrantReplySchema,
  AdminGrantSchema,
} from '@sandboxd/protocol';
import { summary } from '../../services/accounts.js';
import type { HttpDeps } from '../deps.js';

const tags = ['admin'];

/** Admin-only account management; non-admins get 404, as if these routes did not exist. */
export const adminRoutes: FastifyPluginAsyncTypebox<HttpDeps> = async (app, d) => {
  const { accounts } = d.services;

  app.get(
    '/api/v1/admin/accounts',
    {
      schema: {
        operationId: 'adminListAccounts',
        summary: 'List accounts with balances',
        tags,
        response: { 200: AdminAccountListSchema },
      },
      config: { auth: 'admin', errors: [401, 404] },
    },
    async () => ({ accounts: await accounts.list() }),
  );

  app.post(
    '/api/v1/admin/accounts',
    {
      schema: {
        operationId: 'adminCreateAccount',
        summary: 'Create an account',
        tags,
        body: AdminAccountCreateSchema,
        response: { 201: AccountReplySchema },
      },
      config: { auth: 'admin', errors: [400, 401, 404, 409] },
    },
    async (req, reply) => {
      const a = await accounts.create({ ...req.body, password: req.body.password });
      return reply.code(201).send({ account: summary(a) });
    },
  );

  app.patch(
    '/api/v1/admin/accounts/:id',
    {
      schema: {
        operationId: 'adminUpdateAccount',
        summary: "Change an account's plan",
        tags,
        params: AccountParamsSchema,
        body: AdminAccountPatchSchema,
        response: { 200: AccountReplySchema },
      },
      config: { auth: 'admin', errors: [400, 401, 404] },
    },
    async (req) => ({ account: summary(await accounts.setPlan(req.params.id, req.body.plan)) }),
  );

  app.post(
    '/api/v1/admin/accounts/:id/tokens',
    {
      schema: {
        operationId: 'adminGrantTokens',
        summary: 'Grant (or charge) tokens',
        tags,
        params: AccountParamsSchema,
        body: AdminGrantSchema,
        response: { 200: AdminGrantReplySchema },
      },
      config: { auth: 'admin', errors: [400, 401, 404] },
    },
    async (req) => ({ balance: await accounts.grant(req.params.id, req.body.tokens) }),
  );
};
