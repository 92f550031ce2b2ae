import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { AccountReplySchema, LoginLinkQuerySchema, LoginSchema, SignupSchema } from '@sandboxd/protocol';
import type { FastifyReply } from 'fastify';
import { Type } from 'typebox';
import { summary } from '../../services/accounts.js';
import { SESSION_COOKIE } from '../auth.js';
import type { HttpDeps } from '../deps.js';
import { addressKey, rateLimited, requestLimiter } from '../rate-limit.js';

const tags = ['auth'];
/** The session cookie's attributes (Max-Age aside): HttpOnly, SameSite=Lax, Path=/, Secure over https. */
const COOKIE = { path: '/', httpOnly: true, sameSite: 'lax', secure: 'auto' } as const;

/** Browser sessions: login, logout, sign-up and the one-time login link. */
export const authRoutes: FastifyPluginAsyncTypebox<HttpDeps> = async (app, d) => {
  const { auth, accounts } = d.services;
  const limits = d.rateLimits;
  // Sign-ups: every attempt counts (a taken email too), as the library's limiters count.
  const signupLimit = d.config.signupEnabled
    ? requestLimiter(app, limits, 'signup', (req) => addressKey(req.ip))
    : async () => {};
  const setSession = (reply: FastifyReply, token: string) =>
    reply.setCookie(SESSION_COOKIE, token, { ...COOKIE, maxAge: Math.floor(d.config.sessionTtlMs / 1000) });

  app.post(
    '/api/v1/auth/login',
    {
      schema: {
        operationId: 'login',
        summary: 'Log in; sets the session cookie',
        tags,
        body: LoginSchema,
        response: { 200: AccountReplySchema },
      },
      config: { auth: 'none', errors: [400, 401, 429] },
    },
    async (req, reply) => {
      // Throttled before the password is hashed: failures per email and per address. The
      // attempt is reserved (counted) first, so parallel attempts cannot all pass the check.
      const email = req.body.email.trim().toLowerCase();
      const attempt = await limits.reserveLogin(email, addressKey(req.ip));
      if ('wait' in attempt) throw rateLimited('login', attempt.wait, limits);
      let session: Awaited<ReturnType<typeof auth.login>>;
      try {
        session = await auth.login(req.body.email, req.body.password);
      } catch (e) {
        await attempt.failed();
        throw e;
      }
      await attempt.succeeded();
      const { account, token } = session;
      setSession(reply, token);
      return { account: summary(account) };
    },
  );

  app.post(
    '/api/v1/auth/logout',
    {
      schema: { operationId: 'logout', summary: 'End the session of the cookie', tags, response: { 204: Type.Null() } },
      config: { auth: 'none', errors: [] },
    },
    async (req, reply) => {
      const token = req.cookies[SESSION_COOKIE];
      if (token) await auth.logout(token);
      reply.clearCookie(SESSION_COOKIE, COOKIE);
      return reply.code(204).send(null);
    },
  );

  app.post(
    '/api/v1/auth/signup',
    {
      schema: {
        operationId: 'signup',
        summary: 'Create an account on the default plan; sets the session cookie',
        tags,
        body: SignupSchema,
        response: { 201: AccountReplySchema },
      },
      config: { auth: 'none', errors: [400, 404, 409, 429] },
    },
    async (req, reply) => {
      await signupLimit(req);
      const account = await accounts.signup(req.body.email, req.body.password);
      setSession(reply, await auth.newSession(account.id));
      return reply.code(201).send({ account: summary(account) });
    },
  );

  app.get(
    '/api/v1/auth/link',
    {
      schema: {
        operationId: 'loginLink',
        summary: 'Trade a one-time login link for a session; redirects to /',
        tags,
        querystring: LoginLinkQuerySchema,
        response: { 303: Type.Null({ description: 'Signed in (the session cookie is set); Location: /' }) },
      },
      config: { auth: 'none', errors: [400, 401] },
    },
    async (req, reply) => {
      setSession(reply, await auth.consumeLoginLink(req.query.token));
      return reply.redirect('/', 303);
    },
  );
};
