import { PassThrough, type Readable } from 'node:stream';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import {
  IMAGE_ARCHIVE_MEDIA_TYPE,
  ImageBuildSchema,
  ImageImportQuerySchema,
  ImageListSchema,
  ImagePullSchema,
  ImageReplySchema,
  NDJSON_MEDIA_TYPE,
  SandboxdError,
  type Image,
  type ImageProgressEvent,
} from '@sandboxd/protocol';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ImageProgress } from '../../runtime/driver.js';
import type { HttpDeps } from '../deps.js';
import { toHttpError } from '../errors.js';

const tags = ['images'];
const ARCHIVE_TYPES = [IMAGE_ARCHIVE_MEDIA_TYPE, 'application/octet-stream'];

/** True when the client asks for NDJSON progress in its Accept header. */
function wantsStream(req: FastifyRequest): boolean {
  return (req.headers.accept ?? '').toLowerCase().includes(NDJSON_MEDIA_TYPE);
}

/**
 * Runs a long image job. With `Accept: application/x-ndjson` the answer is a 200 stream of
 * progress lines ending in a `done` or `error` line; otherwise one `{image}` once done.
 */
async function runJob(
  req: FastifyRequest,
  reply: FastifyReply,
  job: (onProgress?: (p: ImageProgress) => void) => Promise<Image>,
): Promise<{ image: Image }> {
  if (!wantsStream(req)) return { image: await job() };
  const out = new PassThrough();
  const line = (e: ImageProgressEvent) => {
    if (!out.writableEnded) out.write(`${JSON.stringify(e)}\n`);
  };
  reply.code(200).type(NDJSON_MEDIA_TYPE).header('cache-control', 'no-store').send(out);
  job((p) => {
    if (p.phase !== 'done') line({ type: 'progress', ...p });
  })
    .then(
      (image) => line({ type: 'done', image }),
      (err: unknown) => {
        const { body, internal } = toHttpError(err);
        if (internal) req.log.error({ err }, 'image job failed');
        line({ type: 'error', error: body });
      },
    )
    .finally(() => out.end());
  return reply as never; // already sent: fastify expects the reply back
}

/** Admin-only image management: list, pull, build, import. Non-admins get 404. */
export const imageRoutes: FastifyPluginAsyncTypebox<HttpDeps> = async (app, d) => {
  const { images } = d.services;
  // The import body is a stream, handed to the service unread.
  app.addContentTypeParser(ARCHIVE_TYPES, (_req, payload, done) => done(null, payload));

  app.get(
    '/api/v1/images',
    {
      schema: {
        operationId: 'listImages',
        summary: 'List cached images (admin)',
        tags,
        response: { 200: ImageListSchema },
      },
      config: { auth: 'admin', errors: [401, 404] },
    },
    async () => ({ images: await images.list() }),
  );

  app.post(
    '/api/v1/images/pull',
    {
      schema: {
        operationId: 'pullImage',
        tags,
        summary: 'Pull an image from its registry (admin); Accept: application/x-ndjson streams progress lines',
        body: ImagePullSchema,
        response: { 200: ImageReplySchema },
      },
      config: { auth: 'admin', errors: [400, 401, 404, 500] },
    },
    async (req, reply) => runJob(req, reply, (onProgress) => images.pull(req.body.ref, { onProgress })),
  );

  app.post(
    '/api/v1/images/build',
    {
      schema: {
        operationId: 'buildImage',
        tags,
        summary: 'Build a local/ image offline (admin); Accept: application/x-ndjson streams progress lines',
        body: ImageBuildSchema,
        response: { 200: ImageReplySchema },
      },
      config: { auth: 'admin', errors: [400, 401, 404, 500] },
    },
    async (req, reply) => runJob(req, reply, (onProgress) => images.build(req.body.ref, { onProgress })),
  );

  app.post(
    '/api/v1/images/import',
    {
      schema: {
        operationId: 'importImage',
        tags,
        summary: 'Import an OCI archive or docker-save tar sent as the body (Content-Type: application/x-tar) (admin)',
        querystring: ImageImportQuerySchema,
        response: { 200: ImageReplySchema },
      },
      config: { auth: 'admin', errors: [400, 401, 404, 413] },
      onRequest: async (req) => {
        const type = (req.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase();
        if (!ARCHIVE_TYPES.includes(type)) {
          throw new SandboxdError(
            'validation',
            `Content-Type must be ${IMAGE_ARCHIVE_MEDIA_TYPE}: send the image archive as the body`,
          );
        }
      },
    },
    async (req) => {
      const body = req.body as Readable | undefined;
      if (!body || typeof (body as Readable).pipe !== 'function') {
        throw new SandboxdError(
          'validation',
          `Send the image archive as the body (Content-Type: ${IMAGE_ARCHIVE_MEDIA_TYPE})`,
        );
      }
      return { image: await images.importArchive(body, req.query.ref) };
    },
  );
};
