import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { AccountReplySchema, LoginLinkQuerySchema, LoginSchema, SignupSchema } from '@sandboxd/protocol';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import { summary } from '../../services/accounts.js';
import type { HttpDeps } from '../deps.js';
import { addressKey, rateLimited, requestLimiter } from '../rate-limit.js';
import {
  cookieValues,
  SESSION_COOKIE,
  sessionCookieName,
  sessionCookieOptions,
  sessionTokens,
} from '../session-cookie.js';

const tags = ['auth'];

/** Browser sessions: login, logout, sign-up and the one-time login link. */
export const authRoutes: FastifyPluginAsyncTypebox<HttpDeps> = async (app, d) => {
  const { auth, accounts } = d.services;
  const limits = d.rateLimits;
  // Sign-ups: every attempt counts (a taken email too), as the library's limiters count.
  const signupLimit = d.config.signupEnabled
    ? requestLimiter(app, limits, 'signup', (req) => addressKey(req.ip))
    : async () => {};
  // `__Host-sandboxd_session` over HTTPS, `sandboxd_session` over HTTP (session-cookie.ts).
  const setSession = (req: FastifyRequest, reply: FastifyReply, token: string) =>
    reply.setCookie(sessionCookieName(req), token, {
      ...sessionCookieOptions(req),
      maxAge: Math.floor(d.config.sessionTtlMs / 1000),
    });

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
      setSession(req, reply, token);
      return { account: summary(account) };
    },
  );

  app.post(
    '/api/v1/auth/logout',
    {
      schema: { operationId: 'logout', summary: 'End the session of the cookie', tags, response: { 204: Type.Null() } },
      config: { auth: 'none', errors: [401] },
    },
    async (req, reply) => {
      // A state change by cookie: a same-origin Origin is required (sessionTokens checks it),
      // or any page of the site (a sandbox's port page included) could sign the user out.
      // Every value sent is ended: with two (one planted), signing out is the way out.
      const tokens = sessionTokens(req);
      for (const token of tokens) await auth.logout(token);
      const name = sessionCookieName(req);
      const opts = sessionCookieOptions(req);
      reply.clearCookie(name, opts);
      // Over HTTP, when it came twice, the planted copy likely sits on this host's name as a
      // Domain cookie: cleared too. Over HTTPS a plain-named one (older, or planted) goes too.
      if (name === SESSION_COOKIE && tokens.length > 1) reply.clearCookie(name, { ...opts, domain: hostName(req) });
      if (name !== SESSION_COOKIE && cookieValues(req.headers.cookie, SESSION_COOKIE).length > 0)
        reply.clearCookie(SESSION_COOKIE, opts);
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
      setSession(req, reply, await auth.newSession(account.id));
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
      setSession(req, reply, await auth.consumeLoginLink(req.query.token));
      return reply.redirect('/', 303);
    },
  );
};

/** The request's host name without port (the Domain a planted cookie for this host carries). */
function hostName(req: FastifyRequest): string {
  try {
    return new URL(`http://${req.headers.host ?? 'localhost'}`).hostname;
  } catch {
    return 'localhost';
  }
}
