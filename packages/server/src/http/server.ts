import type { IncomingMessage, Server } from 'node:http';
import fastifyCookie from '@fastify/cookie';
import fastifyRateLimit from '@fastify/rate-limit';
import fastifyWebsocket from '@fastify/websocket';
import { errorBody, LIMITS } from '@sandboxd/protocol';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply } from 'fastify';
import type { Logger } from 'pino';
import { AccessLog } from './access-log.js';
import { e2bControlRoutes } from '../e2b/control.js';
import { registerAuth } from './auth.js';
import type { HttpDeps } from './deps.js';
import { toHttpError } from './errors.js';
import { leftStarted } from './left-started.js';
import { registerOpenApi } from './openapi.js';
import { accountRoutes } from './routes/account.js';
import { adminRoutes } from './routes/admin.js';
import { authRoutes } from './routes/auth.js';
import { buildRoutes } from './routes/builds.js';
import { consoleRoutes } from './routes/console.js';
import { imageRoutes } from './routes/images.js';
import { secretRoutes } from './routes/secrets.js';
import { fileRoutes, isWatchSocketPath } from './routes/files.js';
import { codeRoutes } from './routes/code.js';
import { processRoutes } from './routes/processes.js';
import { sandboxRoutes } from './routes/sandboxes.js';
import { lifecycleRoutes } from './routes/lifecycle.js';
import { sdkRoutes } from './routes/sdk.js';
import { mcpRoutes } from './routes/mcp.js';
import { systemRoutes } from './routes/system.js';
import { validatorCompiler } from './validation.js';
import { retryAfterSeconds } from './rate-limit.js';
import { rawErrorResponse, type FrontDoor } from './front-door.js';
import { terminalRoutes } from './routes/terminals.js';
import { TrustedProxies } from './trusted-proxies.js';
import { isTerminalSocketPath, TERMINAL_WS_OPTIONS, type TerminalGateway } from './terminal-ws.js';

/** API version in the OpenAPI document. */
export const API_VERSION = '1.0.0';

/**
 * The fastify instance with every route, the terminal WebSocket included; the port proxy
 * sits in front of it on `frontDoor`.
 */
export function createHttpServer(
  deps: Omit<HttpDeps, 'openapi'> & { gateway: TerminalGateway },
  opts: { logger: Logger; frontDoor: FrontDoor },
): FastifyInstance {
  const app = Fastify({
    serverFactory: opts.frontDoor.serverFactory,
    loggerInstance: opts.logger as unknown as FastifyBaseLogger,
    // req.ip and req.protocol read X-Forwarded-For/-Proto only from SANDBOXD_TRUSTED_PROXIES.
    trustProxy: new TrustedProxies(deps.config.trustedProxies).fastifyOption(),
    logController: new AccessLog(),
    bodyLimit: LIMITS.maxBodyBytes,
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 200 },
    // Router-level failures (bad URL encoding, over-long path parameters) use the same body.
    frameworkErrors: (err, _req, reply) => {
      const body =
        err.code === 'FST_ERR_MAX_PARAM_LENGTH'
          ? errorBody('not_found', 'Not found')
          : errorBody('validation', 'Malformed URL');
      deps.metrics.errors.inc({ code: String(body.code) });
      (reply as FastifyReply).code(body.code).type('application/json').send(body);
    },
    // Requests node's parser refuses (headers over 16 KiB, malformed HTTP) get the same body too.
    clientErrorHandler: (err: NodeJS.ErrnoException, socket) => {
      if (err.code === 'ECONNRESET' || socket.destroyed) return;
      const body =
        err.code === 'HPE_HEADER_OVERFLOW'
          ? errorBody(
              'headers_too_large',
              'Request line and headers are larger than 16 KiB (URL, cookies and other headers together)',
            )
          : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
            ? errorBody('request_timeout', 'Request not received in time')
            : errorBody('validation', 'Malformed HTTP request');
      deps.metrics.errors.inc({ code: String(body.code) });
      if (socket.writable) socket.write(rawErrorResponse(body));
      socket.destroy();
    },
  });
  app.setValidatorCompiler(validatorCompiler);
  acceptEmptyJsonBodies(app);

  app.setErrorHandler(async (err, req, reply) => {
    const { status, body, internal } = toHttpError(await leftStarted(deps, err, req));
    deps.metrics.errors.inc({ code: String(status) });
    if (internal) req.log.error({ err }, 'request failed');
    else if (status >= 500) req.log.warn({ code: status, msg: body.message }, 'request refused');
    const retryAfter = retryAfterSeconds(body);
    if (retryAfter) reply.header('retry-after', retryAfter);
    // A refusal before the body was read (413, or an upload stopped by no space): the client
    // gets the answer instead of a reset while it is still sending.
    if (!req.raw.complete && req.raw.readableFlowing !== true) lingerOnUnreadBody(req.raw, reply);
    return reply.code(status).type('application/json').send(body);
  });
  app.setNotFoundHandler((req, reply) => {
    deps.metrics.errors.inc({ code: '404' });
    reply
      .code(404)
      .type('application/json')
      .send(errorBody('not_found', `Route ${req.method} ${req.url.split('?')[0]} not found`));
  });

  registerOpenApi(app, { version: API_VERSION });
  const full: HttpDeps = { ...deps, openapi: () => app.swagger() as Record<string, unknown> };
  // Upgrades to the terminal WebSocket reach fastify's router through the front door, so they
  // pass the same hooks (auth, rate limits) as every request. Shutdown of the sockets is the
  // terminals' own (close 1001), not the plugin's.
  opts.frontDoor.routeUpgradesToFastify((req) => isTerminalSocketPath(req.url) || isWatchSocketPath(req.url));
  app.register(fastifyWebsocket, {
    options: { ...TERMINAL_WS_OPTIONS, server: opts.frontDoor.fastifyUpgrades as unknown as Server },
    preClose: (done) => done(),
    // The gateway's own error listener decides how a socket ends (after a protocol error's close frame).
    errorHandler: () => {},
  });
  // Parses `Cookie` into req.cookies (onRequest, before authentication); reply.setCookie.
  app.register(fastifyCookie);
  // Limiters on the rate-limit counters, applied by the auth hook (no route hooks of its own).
  app.register(fastifyRateLimit, deps.rateLimits.pluginOptions());
  // After the plugin's hooks, which mark upgrade requests and close their socket once a
  // refusal (401, 429, ...) is written: authentication refuses upgrades too.
  app.after(() => registerAuth(app, deps.services.auth, deps.rateLimits));
  app.register(systemRoutes, full);
  app.register(authRoutes, full);
  app.register(sandboxRoutes, full);
  app.register(lifecycleRoutes, full);
  app.register(fileRoutes, full);
  app.register(processRoutes, full);
  app.register(codeRoutes, full);
  app.register(accountRoutes, full);
  app.register(secretRoutes, full);
  app.register(adminRoutes, full);
  app.register(imageRoutes, full);
  app.register(buildRoutes, full);
  app.register(consoleRoutes, full);
  app.register(sdkRoutes, full);
  // MCP's tools call the API through this app in-process, as the caller (routes/mcp.ts).
  app.register(mcpRoutes, { ...full, inject: app.inject.bind(app) });
  app.register(e2bControlRoutes, { ...full, prefix: '/e2b' });
  const fallbackHost = () => {
    const a = app.server.address();
    return a && typeof a === 'object' ? `${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}` : 'localhost';
  };
  app.register(terminalRoutes, { terminals: deps.services.terminals, gateway: deps.gateway, fallbackHost });
  return app;
}

/**
 * Many HTTP clients send `Content-Type: application/json` on every request, bodiless ones
 * (DELETE, action POSTs) included. An empty body with that type is taken as no body: a route
 * without a body schema accepts it, a route that needs one answers 400 "body is required".
 * Non-empty bodies are parsed by fastify's own JSON parser (prototype poisoning refused),
 * so malformed JSON stays a 400.
 */
function acceptEmptyJsonBodies(app: FastifyInstance): void {
  const parse = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    if (body === '') return done(null, undefined);
    parse(req, body as string, done);
  });
}

/** Most of an over-limit body the server reads and drops after its 413, and for how long. */
const LINGER_BYTES = 64 * 1024 * 1024;
const LINGER_MS = 10_000;

/**
 * A 413 is sent before the body is read. Closing then (fastify asks for `Connection:
 * close`) resets a connection the client is still writing to, and the reset can destroy
 * the 413 before the client reads it: the client sees ECONNRESET instead. So the
 * connection stays open while the rest of the body is read and dropped, at most
 * {@link LINGER_BYTES} or {@link LINGER_MS}; past either it is cut.
 */
function lingerOnUnreadBody(raw: IncomingMessage, reply: FastifyReply): void {
  reply.removeHeader('connection');
  let dropped = 0;
  const cut = () => raw.socket?.destroy();
  const timer = setTimeout(cut, LINGER_MS);
  timer.unref();
  raw.on('data', (chunk: Buffer) => {
    dropped += chunk.length;
    if (dropped > LINGER_BYTES) cut();
  });
  raw.once('end', () => clearTimeout(timer));
  raw.once('close', () => clearTimeout(timer));
}
