import { STATUS_CODES, type IncomingMessage } from 'node:http';
import { LIMITS } from '@sandboxd/protocol';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply } from 'fastify';
import type { Logger } from 'pino';
import { AccessLog } from './access-log.js';
import { registerAuth } from './auth.js';
import type { HttpDeps } from './deps.js';
import { toHttpError } from './errors.js';
import { buildOpenApi, collectRoutes } from './openapi.js';
import { accountRoutes } from './routes/account.js';
import { adminRoutes } from './routes/admin.js';
import { authRoutes } from './routes/auth.js';
import { consoleRoutes } from './routes/console.js';
import { imageRoutes } from './routes/images.js';
import { sandboxRoutes } from './routes/sandboxes.js';
import { sdkRoutes } from './routes/sdk.js';
import { systemRoutes } from './routes/system.js';
import { validatorCompiler } from './validation.js';
import { retryAfterSeconds } from './rate-limit.js';
import type { FrontDoor } from './front-door.js';

/** API version in the OpenAPI document. */
export const API_VERSION = '1.0.0';

/**
 * The fastify instance with every route but terminals and the port proxy, which other
 * modules register on it (`extraRoutes`) before it is ready.
 */
export function createHttpServer(
  deps: Omit<HttpDeps, 'openapi'>,
  opts: { logger: Logger; frontDoor: FrontDoor; extraRoutes?: Array<(app: FastifyInstance) => Promise<void> | void> },
): FastifyInstance {
  const app = Fastify({
    serverFactory: opts.frontDoor.serverFactory,
    loggerInstance: opts.logger as unknown as FastifyBaseLogger,
    logController: new AccessLog(),
    bodyLimit: LIMITS.maxBodyBytes,
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 200 },
    // Router-level failures (bad URL encoding, over-long path parameters) use the same body.
    frameworkErrors: (err, _req, reply) => {
      const status = err.code === 'FST_ERR_MAX_PARAM_LENGTH' ? 404 : 400;
      deps.metrics.errors.inc({ code: String(status) });
      const message = status === 404 ? 'Not found' : 'Malformed URL';
      (reply as FastifyReply).code(status).type('application/json').send({ code: status, message });
    },
    // Requests node's parser refuses (headers over 16 KiB, malformed HTTP) get the same body too.
    clientErrorHandler: (err: NodeJS.ErrnoException, socket) => {
      if (err.code === 'ECONNRESET' || socket.destroyed) return;
      const [status, message] =
        err.code === 'HPE_HEADER_OVERFLOW'
          ? [431, 'Request line and headers are larger than 16 KiB (URL, cookies and other headers together)']
          : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
            ? [408, 'Request not received in time']
            : [400, 'Malformed HTTP request'];
      deps.metrics.errors.inc({ code: String(status) });
      const body = JSON.stringify({ code: status, message });
      if (socket.writable) {
        socket.write(
          `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
        );
      }
      socket.destroy();
    },
  });
  app.setValidatorCompiler(validatorCompiler);

  app.setErrorHandler((err, req, reply) => {
    const { status, body, internal } = toHttpError(err);
    deps.metrics.errors.inc({ code: String(status) });
    if (internal) req.log.error({ err }, 'request failed');
    else if (status >= 500) req.log.warn({ code: status, msg: body.message }, 'request refused');
    const retryAfter = retryAfterSeconds(body);
    if (retryAfter) reply.header('retry-after', retryAfter);
    if (status === 413 && !req.raw.complete) lingerOnUnreadBody(req.raw, reply);
    reply.code(status).type('application/json').send(body);
  });
  app.setNotFoundHandler((req, reply) => {
    deps.metrics.errors.inc({ code: '404' });
    reply
      .code(404)
      .type('application/json')
      .send({ code: 404, message: `Route ${req.method} ${req.url.split('?')[0]} not found` });
  });

  const routes = collectRoutes(app);
  let doc: Record<string, unknown> | null = null;
  const full: HttpDeps = { ...deps, openapi: () => (doc ??= buildOpenApi(routes, { version: API_VERSION })) };
  registerAuth(app, deps.services.auth, deps.rateLimits);
  app.register(systemRoutes, full);
  app.register(authRoutes, full);
  app.register(sandboxRoutes, full);
  app.register(accountRoutes, full);
  app.register(adminRoutes, full);
  app.register(imageRoutes, full);
  app.register(consoleRoutes, full);
  app.register(sdkRoutes, full);
  for (const r of opts.extraRoutes ?? []) app.register(async (child) => r(child));
  return app;
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
