/**
 * `/mcp`: sandboxd's MCP server over streamable HTTP (stateless: a server and a transport
 * per POST, no session id), for agents that reach tools through the Model Context Protocol.
 *
 * Credentials: the account's API key as `Authorization: Bearer sk_...` only. The auth hook
 * has already authenticated the request (401 without valid credentials) and charged it to
 * the account's rate limit; here a session cookie or `X-API-Key` is refused too, since the
 * tools act with the key itself.
 *
 * The tools' SDK client acts as the caller: its `fetch` sends each API call through this
 * app in-process (`inject`) with the caller's key, so every call passes the same auth, rate
 * limits, validation and access log as one from outside, and nothing depends on the address
 * the server listens on (0.0.0.0, a socket behind a proxy, TLS) or leaves the process. An
 * inner answer is streamed to the tool with backpressure, never held whole, and errors past
 * {@link MCP_INNER_ANSWER_MAX_BYTES}; the tools bound what they ask for besides (file reads
 * by range, exec output by the API's 1 MiB cap, code runs stopped past their output bound).
 */
import { Readable, Transform } from 'node:stream';
import { handleMcpPost } from '@sandboxd/mcp';
import { SandboxdError } from '@sandboxd/protocol';
import { SandboxdClient } from '@sandboxd/sdk';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest, InjectOptions } from 'fastify';
import type { HttpDeps } from '../deps.js';
import { overHttps, sameOrigin } from '../session-cookie.js';

/** The path of the MCP endpoint. */
export const MCP_PATH = '/mcp';
/** Largest MCP request body (a write_file's content travels in it): 4 MiB. */
export const MCP_MAX_BODY_BYTES = 4 * 1024 * 1024;

type Inject = FastifyInstance['inject'];

/** The caller's API key from `Authorization: Bearer`, or a 401 naming the one accepted form. */
function bearerKey(req: FastifyRequest): string {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
  if (!m)
    throw new SandboxdError(
      'unauthorized',
      'The MCP endpoint takes the API key as "Authorization: Bearer <API key>" only (no session cookie, no X-API-Key)',
    );
  return m[1];
}

/** MCP's DNS-rebinding rule: a request from a web page of another origin is refused (403). */
function checkOrigin(req: FastifyRequest): void {
  if (req.headers.origin !== undefined && !sameOrigin(req))
    throw new SandboxdError('permission', `Cross-origin MCP requests are refused (Origin ${req.headers.origin})`, {
      origin: req.headers.origin,
    });
}

/**
 * Most bytes of one inner answer a tool's call may read: 64 MiB. The answers the tools ask
 * for are far smaller (a file range of 64 KiB, an exec's output capped by the API at 1 MiB
 * a stream, a code run stopped by run_code's own bound); this is the backstop for
 * anything else, past which the body errors instead of growing.
 */
export const MCP_INNER_ANSWER_MAX_BYTES = 64 * 1024 * 1024;

/**
 * A `fetch` that answers through `inject`: the request goes through the app as if it came
 * from `req`'s client. The answer's body is streamed (inject's `payloadAsStream`), read
 * as the SDK reads it with backpressure, so a long answer (a code run's NDJSON stream) is
 * never held whole in memory, and it errors past `maxBytes`. Cancelling the body or
 * aborting the signal ends the inner request the way a closed connection would: the
 * route's reply closes (a code run or exec in the sandbox is stopped).
 */
export function injectFetch(
  inject: Inject,
  from: { host?: string; ip: string },
  maxBytes = MCP_INNER_ANSWER_MAX_BYTES,
): typeof fetch {
  return async (input, init) => {
    const request = new Request(input, init);
    const url = new URL(request.url);
    const headers: Record<string, string> = {};
    request.headers.forEach((v, k) => {
      headers[k] = v;
    });
    if (from.host) headers.host = from.host;
    const body = request.body ? Buffer.from(await request.arrayBuffer()) : undefined;
    const signal = init?.signal ?? undefined;
    signal?.throwIfAborted();
    const res = await inject({
      method: request.method as InjectOptions['method'],
      url: url.pathname + url.search,
      headers,
      payload: body,
      remoteAddress: from.ip,
      signal,
      payloadAsStream: true,
    } as InjectOptions);
    const reply = res.raw.res;
    const source = res.stream();
    // The inner reply ends as if its client had gone: the route's 'close' listeners run.
    const hangUp = () => {
      source.destroy();
      if (!reply.writableFinished) reply.destroy();
    };
    if (signal?.aborted) hangUp();
    signal?.addEventListener('abort', hangUp, { once: true });
    source.once('close', () => signal?.removeEventListener('abort', hangUp));
    const out = new Headers();
    for (const [k, v] of Object.entries(res.headers)) {
      if (v === undefined) continue;
      for (const one of Array.isArray(v) ? v : [v]) out.append(k, String(one));
    }
    const empty = res.statusCode === 204 || res.statusCode === 304 || request.method === 'HEAD';
    if (empty) source.resume();
    let seen = 0;
    const counted = new Transform({
      transform(chunk: Buffer, _enc, done) {
        seen += chunk.length;
        if (seen > maxBytes) {
          hangUp();
          return done(
            new SandboxdError(
              'payload_too_large',
              `An answer of the API to an MCP tool was larger than ${maxBytes} bytes and was cut off`,
            ),
          );
        }
        done(null, chunk);
      },
    });
    source.once('error', (e) => counted.destroy(e));
    const inner = (Readable.toWeb(source.pipe(counted)) as unknown as ReadableStream<Uint8Array>).getReader();
    // Pulled one chunk at a time; the consumer's cancel (the SDK giving up on a body) hangs up too.
    const stream = new ReadableStream<Uint8Array>(
      {
        pull: async (ctrl) => {
          const r = await inner.read();
          if (r.done) ctrl.close();
          else ctrl.enqueue(r.value);
        },
        cancel: (reason) => {
          hangUp();
          return inner.cancel(reason);
        },
      },
      { highWaterMark: 0 },
    );
    return new Response(empty ? null : stream, {
      status: res.statusCode,
      statusText: res.statusMessage,
      headers: out,
    });
  };
}

/**
 * The origin the tools' SDK client and the transport are given. It is never dialled (the
 * client's fetch goes through `inject`, which takes only the path): the `Host` header the
 * caller sent is not made part of a URL, where a `Host` of `x/y` prefixed every inner path
 * with `/y` and one that is no valid host (`a b`, `[::1`, empty) failed the request with a
 * 500. Only the scheme is used (port URLs): https when the request came over TLS or
 * through a TLS proxy (`X-Forwarded-Proto`, as the session cookie reads it).
 */
function innerOrigin(req: FastifyRequest): string {
  return `${overHttps(req) ? 'https' : 'http'}://sandboxd.internal`;
}

/** The web Request the MCP transport reads (headers and URL; the body is parsed already). */
function webRequest(req: FastifyRequest): Request {
  const headers = new Headers();
  for (const [k, v] of Object.entries(req.headers)) {
    if (v === undefined) continue;
    for (const one of Array.isArray(v) ? v : [v]) {
      try {
        headers.append(k, one);
      } catch {
        /* a value a web Headers refuses: the transport reads only Accept, Content-Type and MCP's own */
      }
    }
  }
  return new Request(`${innerOrigin(req)}${MCP_PATH}`, { method: req.method, headers });
}

/**
 * The transport's own refusals (a missing `Accept`, a malformed JSON-RPC message, an
 * unsupported protocol version) come as JSON-RPC errors; like every error answer of the
 * server they leave in the error shape, the JSON-RPC error kept in `details.jsonrpc`.
 */
async function refusal(response: Response): Promise<SandboxdError> {
  const text = await response.text();
  let rpc: { error?: { code?: number; message?: string } } | undefined;
  try {
    rpc = JSON.parse(text);
  } catch {
    rpc = undefined;
  }
  const message = rpc?.error?.message ?? (text.slice(0, 500) || `MCP request refused (${response.status})`);
  const kind = response.status === 413 ? 'payload_too_large' : response.status < 500 ? 'validation' : 'internal';
  return new SandboxdError(kind, message, rpc?.error ? { jsonrpc: rpc.error } : undefined);
}

/** Headers of the transport's answer that fastify and node decide for the connection. */
const HOP_BY_HOP = new Set(['content-length', 'connection', 'keep-alive', 'transfer-encoding']);

/** Sends the transport's answer through fastify (hooks, access log), closing the server when it is done. */
async function relay(
  reply: FastifyReply,
  response: Response,
  close: () => Promise<void>,
  req: FastifyRequest,
): Promise<FastifyReply> {
  if (response.status >= 400) {
    const e = await refusal(response);
    await close();
    throw e;
  }
  reply.raw.once('close', () => void close());
  req.raw.once('close', () => {
    if (!reply.raw.writableFinished) void close();
  });
  reply.code(response.status);
  // Hop-by-hop headers are the server's own: the transport's `Connection: keep-alive` kept
  // a connection the client had asked to close open until the keep-alive timeout (72 s).
  response.headers.forEach((v, k) => {
    if (!HOP_BY_HOP.has(k)) reply.header(k, v);
  });
  if (!response.body) {
    void close();
    return reply.send();
  }
  return reply.send(Readable.fromWeb(response.body as import('node:stream/web').ReadableStream<Uint8Array>));
}

/** `POST /mcp` (JSON-RPC), `GET` and `DELETE /mcp` (405: no sessions), all with the caller's API key. */
export const mcpRoutes: FastifyPluginAsync<HttpDeps & { inject: Inject }> = async (app, d) => {
  const config = { auth: 'account' as const };
  app.post(MCP_PATH, { schema: { hide: true }, bodyLimit: MCP_MAX_BODY_BYTES, config }, async (req, reply) => {
    checkOrigin(req);
    const key = bearerKey(req);
    const client = new SandboxdClient({
      apiKey: key,
      apiUrl: innerOrigin(req),
      fetch: injectFetch(d.inject, { host: req.headers.host, ip: req.ip }),
      // In-process: no connection to retry; a 429 reaches the model as a tool error.
      maxRetries: 0,
    });
    const { response, close } = await handleMcpPost(webRequest(req), req.body, client);
    return relay(reply, response, close, req);
  });
  const noSessions = async (req: FastifyRequest, reply: FastifyReply) => {
    checkOrigin(req);
    bearerKey(req);
    // MCP's answer to a GET or DELETE that a server does not serve. No error kind is a 405, and
    // every JSON error answer of the server has one: the reason goes as plain text.
    return reply
      .code(405)
      .header('allow', 'POST')
      .type('text/plain; charset=utf-8')
      .send(
        `Method Not Allowed: this MCP endpoint is stateless (no sessions, no server-initiated stream); POST JSON-RPC messages to ${MCP_PATH}\n`,
      );
  };
  app.get(MCP_PATH, { schema: { hide: true }, config }, noSessions);
  app.delete(MCP_PATH, { schema: { hide: true }, config }, noSessions);
};
