import type { FastifyInstance } from 'fastify';

/**
 * Makes the routes of this plugin context take their body raw and streamed (any
 * Content-Type, any size: uploads, stdin): no parser reads it, the handler streams
 * `req.raw`. Call it in a context of its own (a nested `register`).
 */
export function acceptRawBodies(
  app: Pick<FastifyInstance, 'removeAllContentTypeParsers' | 'addContentTypeParser'>,
): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_req, _payload, done) => done(null, undefined));
}
