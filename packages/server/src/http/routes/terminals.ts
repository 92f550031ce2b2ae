import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import {
  SandboxdError,
  SandboxParamsSchema,
  TerminalCreatedSchema,
  TerminalCreateSchema,
  TerminalListSchema,
  TerminalParamsSchema,
  TerminalSchema,
  TerminalWsQuerySchema,
} from '@sandboxd/protocol';
import type { FastifyRequest } from 'fastify';
import { Type } from 'typebox';
import type { Terminal, TerminalService } from '../../services/terminals.js';
import { principalOf } from '../deps.js';
import { overHttps } from '../session-cookie.js';
import type { TerminalGateway } from '../terminal-ws.js';

const tags = ['terminals'];

/** What the terminal routes need. */
export interface TerminalRouteDeps {
  terminals: TerminalService;
  /** Where accepted terminal WebSockets go. */
  gateway: TerminalGateway;
  /** `host:port` for `wsUrl` when a request carries no Host header (HTTP/1.0). */
  fallbackHost: () => string;
}

/**
 * `ws://` or `wss://` + the Host the request was sent to + the terminal's WebSocket path;
 * `wss` when the request came over TLS or with `X-Forwarded-Proto: https` from a trusted proxy.
 */
export function terminalWsUrl(
  req: FastifyRequest,
  t: Pick<Terminal, 'id' | 'sandboxId'>,
  fallbackHost: () => string,
): string {
  const tls = overHttps(req);
  const host = req.headers.host || fallbackHost();
  return `${tls ? 'wss' : 'ws'}://${host}/api/v1/sandboxes/${t.sandboxId}/terminals/${t.id}/ws`;
}

const iso = (ms: number) => new Date(ms).toISOString();

/** Terminal routes of spec sections 4.6-4.10: thin wrappers over TerminalService. */
export const terminalRoutes: FastifyPluginAsyncTypebox<TerminalRouteDeps> = async (app, d) => {
  const { terminals } = d;

  app.addHook('preHandler', async (req, reply) => {
    const p = (req.params ?? {}) as { id?: string; terminalId?: string };
    if (p.id)
      req.log = reply.log = req.log.child({ sandboxId: p.id, ...(p.terminalId ? { terminalId: p.terminalId } : {}) });
  });
  // Every create field is optional, so an empty body (no Content-Type) means `{}`.
  app.addHook('preValidation', async (req) => {
    if (req.method === 'POST' && req.body === undefined) req.body = {};
  });

  app.post(
    '/api/v1/sandboxes/:id/terminals',
    {
      schema: {
        operationId: 'createTerminal',
        summary: 'Start a shell on a new PTY in the sandbox',
        tags,
        params: SandboxParamsSchema,
        body: TerminalCreateSchema,
        response: { 201: TerminalCreatedSchema },
      },
      config: { errors: [400, 401, 404, 409, 507] },
    },
    async (req, reply) => {
      const t = await terminals.create(principalOf(req).account.id, req.params.id, req.body);
      const terminal = {
        id: t.id,
        sandboxId: t.sandboxId,
        shell: t.shell,
        status: t.status,
        createdAt: iso(t.createdAt),
      };
      return reply.code(201).send({ terminal, wsUrl: terminalWsUrl(req, t, d.fallbackHost) });
    },
  );

  app.get(
    '/api/v1/sandboxes/:id/terminals',
    {
      schema: {
        operationId: 'listTerminals',
        summary: 'List the active terminals of a sandbox',
        tags,
        params: SandboxParamsSchema,
        response: { 200: TerminalListSchema },
      },
      config: { errors: [401, 404] },
    },
    async (req) => {
      const list = await terminals.list(principalOf(req).account.id, req.params.id);
      return {
        terminals: list.map((t) => ({
          id: t.id,
          shell: t.shell,
          status: t.status,
          clientCount: t.clientCount,
        })),
      };
    },
  );

  app.get(
    '/api/v1/sandboxes/:id/terminals/:terminalId',
    {
      schema: {
        operationId: 'getTerminal',
        summary: 'Get a terminal (active or exited)',
        tags,
        params: TerminalParamsSchema,
        response: { 200: TerminalSchema },
      },
      config: { errors: [401, 404] },
    },
    async (req) => {
      const t = await terminals.get(principalOf(req).account.id, req.params.id, req.params.terminalId);
      return {
        id: t.id,
        sandboxId: t.sandboxId,
        shell: t.shell,
        status: t.status,
        clientCount: t.clientCount,
        createdAt: iso(t.createdAt),
      };
    },
  );

  app.delete(
    '/api/v1/sandboxes/:id/terminals/:terminalId',
    {
      schema: {
        operationId: 'deleteTerminal',
        summary: 'Kill the shell and remove the terminal',
        tags,
        params: TerminalParamsSchema,
        response: { 204: Type.Null() },
      },
      config: { errors: [401, 404] },
    },
    async (req, reply) => {
      await terminals.delete(principalOf(req).account.id, req.params.id, req.params.terminalId);
      return reply.code(204).send(null);
    },
  );

  // The terminal WebSocket: an upgrade passes the same hooks as any request (authentication,
  // rate limits, validation), then this route's checks, before the handshake; a refusal is
  // plain HTTP with the Error body. A GET without the upgrade answers 400.
  const terminalsOf = new WeakMap<FastifyRequest, Terminal>();
  app.route({
    method: 'GET',
    url: '/api/v1/sandboxes/:id/terminals/:terminalId/ws',
    schema: {
      operationId: 'connectTerminal',
      tags,
      summary: 'Upgrade to the terminal WebSocket (Upgrade: websocket); messages: ready, resize, exit, raw bytes',
      params: TerminalParamsSchema,
      querystring: TerminalWsQuerySchema,
      response: { 101: Type.Null() },
    },
    config: { errors: [400, 401, 404, 409, 429] },
    preHandler: async (req) => {
      if (!req.ws) return;
      const accountId = principalOf(req).account.id;
      const t = await terminals.forAttach(accountId, req.params.id, req.params.terminalId);
      terminalsOf.set(req, t);
      d.gateway.admit(accountId, t.sandboxId, req.raw.socket);
    },
    handler: async () => {
      throw new SandboxdError(
        'validation',
        'This endpoint needs a WebSocket upgrade: send "Connection: Upgrade" and "Upgrade: websocket"',
      );
    },
    wsHandler: (socket, req) => {
      const t = terminalsOf.get(req);
      if (!t) return socket.terminate();
      const replay = (req.query as { replay?: string }).replay === '1';
      d.gateway.connect(socket, (client) => t.attach(client, { replay }));
    },
  });
};
