import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import {
  FileEntryReplySchema,
  FileListQuerySchema,
  FileListSchema,
  FilePathQuerySchema,
  FileUploadQuerySchema,
  FileWatchQuerySchema,
  MkdirRequestSchema,
  MoveRequestSchema,
  SandboxdError,
  SandboxParamsSchema,
} from '@sandboxd/protocol';
import type { FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import type { FileEntryWithMetadata, FileWatch } from '../../runtime/files.js';
import { principalOf, type HttpDeps } from '../deps.js';
import { acceptRawBodies } from './raw-body.js';

const tags = ['files'];
const FILE_ERRORS = [400, 401, 403, 404, 409, 507];
/** A watch whose client reads this far behind is closed (1013, try again later). */
const MAX_WATCH_BUFFER = 4 << 20;
const WATCH_PATH = /^\/api\/v1\/sandboxes\/[^/]+\/files\/watch$/;

/** True for the path of the files watch WebSocket (routed to fastify by the front door). */
export function isWatchSocketPath(url: string | undefined): boolean {
  return WATCH_PATH.test((url ?? '').split('?')[0]);
}

/** Files of a started sandbox, done inside it by its agent (see docs/files-and-processes.md). */
export const fileRoutes: FastifyPluginAsyncTypebox<HttpDeps> = async (app, d) => {
  const { files } = d.services;

  app.get(
    '/api/v1/sandboxes/:id/files',
    {
      schema: {
        operationId: 'listFiles',
        summary: "List a directory's contents, depth levels deep (at most 10,000 entries)",
        tags,
        params: SandboxParamsSchema,
        querystring: FileListQuerySchema,
        response: { 200: FileListSchema },
      },
      config: { errors: FILE_ERRORS },
    },
    async (req) => {
      const q = req.query;
      const r = await files.list(principalOf(req).account.id, req.params.id, q.path, {
        depth: q.depth ?? 1,
        user: q.user,
      });
      return r.truncated ? { entries: r.entries, truncated: true } : { entries: r.entries };
    },
  );

  app.get(
    '/api/v1/sandboxes/:id/files/stat',
    {
      schema: {
        operationId: 'statFile',
        summary: 'Describe a file, directory or link (links are not followed)',
        tags,
        params: SandboxParamsSchema,
        querystring: FilePathQuerySchema,
        response: { 200: FileEntryReplySchema },
      },
      config: { errors: FILE_ERRORS },
    },
    async (req) => ({
      entry: await files.stat(principalOf(req).account.id, req.params.id, req.query.path, req.query.user),
    }),
  );

  app.post(
    '/api/v1/sandboxes/:id/files/mkdir',
    {
      schema: {
        operationId: 'makeDirectory',
        summary: 'Create a directory and its missing parents',
        tags,
        params: SandboxParamsSchema,
        querystring: Type.Object({ user: FilePathQuerySchema.properties.user }, { additionalProperties: false }),
        body: MkdirRequestSchema,
        response: { 201: FileEntryReplySchema },
      },
      config: { errors: FILE_ERRORS },
    },
    async (req, reply) => {
      const entry = await files.mkdir(principalOf(req).account.id, req.params.id, req.body.path, req.query.user);
      return reply.code(201).send({ entry });
    },
  );

  app.post(
    '/api/v1/sandboxes/:id/files/move',
    {
      schema: {
        operationId: 'moveFile',
        summary: 'Move or rename a file or directory (409 if the target exists)',
        tags,
        params: SandboxParamsSchema,
        querystring: Type.Object({ user: FilePathQuerySchema.properties.user }, { additionalProperties: false }),
        body: MoveRequestSchema,
        response: { 200: FileEntryReplySchema },
      },
      config: { errors: FILE_ERRORS },
    },
    async (req) => ({
      entry: await files.move(principalOf(req).account.id, req.params.id, req.body.from, req.body.to, req.query.user),
    }),
  );

  app.delete(
    '/api/v1/sandboxes/:id/files',
    {
      schema: {
        operationId: 'removeFile',
        summary: 'Remove a file, link or directory (recursively)',
        tags,
        params: SandboxParamsSchema,
        querystring: FilePathQuerySchema,
        response: { 204: Type.Null() },
      },
      config: { errors: FILE_ERRORS },
    },
    async (req, reply) => {
      await files.remove(principalOf(req).account.id, req.params.id, req.query.path, req.query.user);
      return reply.code(204).send(null);
    },
  );

  app.get(
    '/api/v1/sandboxes/:id/files/content',
    {
      schema: {
        operationId: 'downloadFile',
        summary: "Download a file's content, streamed (Range requests honoured)",
        tags,
        params: SandboxParamsSchema,
        querystring: FilePathQuerySchema,
        response: {
          200: {
            description: 'The bytes.',
            content: { 'application/octet-stream': { schema: Type.String({ format: 'binary' }) } },
          },
          206: {
            description: 'The range asked for.',
            content: { 'application/octet-stream': { schema: Type.String({ format: 'binary' }) } },
          },
        },
      },
      config: { errors: [...FILE_ERRORS, 416] },
    },
    async (req, reply) => {
      const range = parseRange(req.headers.range);
      const r = await files.read(principalOf(req).account.id, req.params.id, req.query.path, {
        range,
        user: req.query.user,
      });
      reply.header('accept-ranges', 'bytes');
      if (r.unsatisfiable) {
        reply.header('content-range', `bytes */${r.size}`);
        throw new SandboxdError(
          'range_not_satisfiable',
          `Range ${req.headers.range} is outside the file (${r.size} bytes)`,
          { size: r.size },
        );
      }
      const length = r.end - r.start + 1;
      reply.header('content-length', String(length));
      if (range !== undefined && range !== '') {
        reply.code(206).header('content-range', `bytes ${r.start}-${r.end}/${r.size}`);
      }
      return reply.type('application/octet-stream').send(r.body as never);
    },
  );

  const uploadRoutes: FastifyPluginAsyncTypebox = async (raw) => {
    acceptRawBodies(raw);
    raw.put(
      '/api/v1/sandboxes/:id/files/content',
      {
        schema: {
          operationId: 'uploadFile',
          summary: 'Upload the raw body as a file (streamed; written beside the target, then renamed over it)',
          tags,
          params: SandboxParamsSchema,
          querystring: FileUploadQuerySchema,
          response: { 200: FileEntryReplySchema },
        },
        config: { errors: FILE_ERRORS },
      },
      async (req) => {
        const q = req.query;
        const length = req.headers['content-length'] !== undefined ? Number(req.headers['content-length']) : undefined;
        const aborted = new AbortController();
        const onClose = () => {
          if (!req.raw.complete) aborted.abort();
        };
        req.raw.once('close', onClose);
        try {
          const entry = await files.write(principalOf(req).account.id, req.params.id, q.path, req.raw, {
            mode: q.mode,
            length: Number.isSafeInteger(length) ? length : undefined,
            user: q.user,
            signal: aborted.signal,
          });
          return { entry };
        } finally {
          req.raw.off('close', onClose);
        }
      },
    );
  };
  await app.register(uploadRoutes);

  // The watch WebSocket: the upgrade passes auth and rate limits like every request; the
  // watch is set up before the handshake, so a missing path is a plain-HTTP 404.
  const watches = new WeakMap<FastifyRequest, FileWatch>();
  app.route({
    method: 'GET',
    url: '/api/v1/sandboxes/:id/files/watch',
    schema: {
      operationId: 'watchFiles',
      tags,
      summary: 'Upgrade to a WebSocket of file events (inotify in the sandbox): create, write, remove, rename, chmod',
      params: SandboxParamsSchema,
      querystring: FileWatchQuerySchema,
      response: { 101: Type.Null() },
    },
    config: { errors: [400, 401, 403, 404, 409, 429] },
    preHandler: async (req) => {
      if (!req.ws) return;
      const q = req.query as { path: string; recursive?: boolean; user?: string };
      const w = await files.watch(principalOf(req).account.id, (req.params as { id: string }).id, q.path, {
        recursive: q.recursive === true,
        user: q.user,
      });
      watches.set(req, w);
      // A handshake that never completes must not leave the watch running.
      req.raw.socket.once('close', () => w.close());
    },
    handler: async () => {
      throw new SandboxdError(
        'validation',
        'This endpoint needs a WebSocket upgrade: send "Connection: Upgrade" and "Upgrade: websocket"',
      );
    },
    wsHandler: (socket, req) => {
      const w = watches.get(req);
      if (!w) return socket.terminate();
      w.onEvent((ev) => {
        if (socket.readyState !== socket.OPEN) return;
        if (socket.bufferedAmount > MAX_WATCH_BUFFER) {
          socket.close(1013, 'client too slow');
          return;
        }
        // An entry's E2B metadata (runtime/files.ts FileMetadata) is not part of sandboxd's API.
        if ('entry' in ev && ev.entry && 'metadata' in ev.entry) {
          const { metadata: _, ...entry } = ev.entry as FileEntryWithMetadata;
          socket.send(JSON.stringify({ ...ev, entry }));
        } else socket.send(JSON.stringify(ev));
      });
      w.onEnd(() => {
        if (socket.readyState === socket.OPEN) socket.close(1000, 'watch ended');
      });
      socket.on('close', () => w.close());
      socket.on('error', () => w.close());
      // Messages from the client mean nothing here.
      socket.on('message', () => undefined);
    },
  });
};

/**
 * The spec of a `Range: bytes=...` header for the file tool (`a-b`, `a-`, `-n`), or
 * undefined when there is none or it is not one range of bytes (then the whole file is
 * sent, as RFC 9110 allows).
 */
export function parseRange(h: string | undefined): string | undefined {
  if (!h) return undefined;
  const m = /^bytes=(\d{0,15})-(\d{0,15})$/.exec(h.trim());
  if (!m || (m[1] === '' && m[2] === '')) return undefined;
  return `${m[1]}-${m[2]}`;
}
