/**
 * Streamable HTTP, stateless: each POST gets a server and a transport of its own, closed
 * when its answer has been sent (or the caller went away, which cancels its tool calls).
 * No session id is issued, so GET (a stream for server-initiated messages) and DELETE (the
 * end of a session) have nothing to serve: the host answers them 405.
 */
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import type { SandboxdClient } from '@sandboxd/sdk';
import { createMcpServer, type McpServerOptions } from './server.js';

/** An answer being served, and how to end the server behind it. */
export interface McpHttpExchange {
  response: Response;
  /** Closes the server and its transport; in-flight tool calls are cancelled. Idempotent. */
  close(): Promise<void>;
}

/**
 * Handles one MCP POST (`request`, its JSON body already parsed as `parsedBody`) with a
 * fresh server acting through `client`. Call `close()` once the response has been sent or
 * the connection closed.
 */
export async function handleMcpPost(
  request: Request,
  parsedBody: unknown,
  client: SandboxdClient,
  opts: McpServerOptions = {},
): Promise<McpHttpExchange> {
  const server = createMcpServer(client, opts);
  const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined });
  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= (async () => {
      await transport.close().catch(() => {});
      await server.close().catch(() => {});
    })();
    return closing;
  };
  try {
    await server.connect(transport);
    const response = await transport.handleRequest(request, { parsedBody });
    return { response, close };
  } catch (e) {
    await close();
    throw e;
  }
}
