/**
 * The MCP server over stdio (what `sbx mcp` runs): JSON-RPC on stdin/stdout, nothing else
 * on stdout. It ends when stdin ends (the client went away), cancelling calls in flight.
 */
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import type { SandboxdClient } from '@sandboxd/sdk';
import { createMcpServer, type McpServerOptions } from './server.js';

/**
 * Serves `client`'s tools on `stdin`/`stdout` until `stdin` ends or `stdout` breaks;
 * resolves once the server is closed.
 */
export async function serveStdio(
  client: SandboxdClient,
  opts: McpServerOptions & { stdin?: NodeJS.ReadableStream; stdout?: NodeJS.WritableStream } = {},
): Promise<void> {
  const stdin = opts.stdin ?? process.stdin;
  const stdout = opts.stdout ?? process.stdout;
  const server = createMcpServer(client, opts);
  const transport = new StdioServerTransport(stdin as never, stdout as never);
  const closed = new Promise<void>((resolve) => {
    transport.onclose = () => resolve();
  });
  const end = () => {
    void server.close().catch(() => {});
  };
  stdin.once('end', end);
  stdin.once('close', end);
  // The client closed its end of our stdout: nobody reads the answers any more.
  stdout.on('error', end);
  await server.connect(transport);
  await closed;
  stdin.off('end', end);
  stdin.off('close', end);
}
