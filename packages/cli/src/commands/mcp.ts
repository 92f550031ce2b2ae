import { Command } from 'commander';
import { serveStdio } from '@sandboxd/mcp';
import { withExamples, type Context } from '../context.js';

/**
 * `sbx mcp`: sandboxd's MCP server on stdin/stdout, the way desktop agents start their tools.
 * Key and address as every verb (SANDBOX_API_KEY / SANDBOX_API_URL, `--api-url`, `sbx
 * login`). Only the protocol goes to stdout; the one status line goes to stderr. Ends when
 * stdin ends.
 */
export function mcpCommand(ctx: Context): Command {
  const cmd = new Command('mcp')
    .description('serve sandboxd to an AI agent as an MCP server over stdio (tools: create_sandbox, run_command, ...)')
    .option('--image <ref>', 'image create_sandbox starts when the agent names none', 'local/debian:bookworm')
    .action(async (o: { image: string }) => {
      const client = ctx.client(); // a clear error now (not logged in) rather than at the first tool call
      process.stderr.write(`sbx mcp: serving sandboxd at ${client.apiUrl} over stdio (MCP); ends when stdin closes\n`);
      await serveStdio(client, { defaultImage: o.image });
    });
  return withExamples(
    cmd,
    'sbx mcp    # started by an MCP client; see docs/mcp.md for the mcpServers config',
    'SANDBOX_API_KEY=sk_... SANDBOX_API_URL=http://localhost:8080 sbx mcp',
  );
}
