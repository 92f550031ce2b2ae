/**
 * Sandboxes created through MCP as resources: `sandbox://<id>`, listed from the account's
 * sandboxes whose metadata carries the MCP marker; reading one gives its JSON state.
 */
import { McpError, type ReadResourceResult } from '@modelcontextprotocol/sdk/types.js';
import { type McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js';
import { failureOf } from './results.js';
import type { ToolContext } from './context.js';
import { MCP_MARKER, SANDBOX_ID_RE, summary } from './sandbox-tools.js';

/** The URI of a sandbox's resource. */
export function sandboxUri(id: string): string {
  return `sandbox://${id}`;
}

/** JSON-RPC code of a resource that does not exist (the MCP specification's). */
const RESOURCE_NOT_FOUND = -32002;

/** Registers the `sandbox://{id}` resources on `server`. */
export function registerSandboxResources(server: McpServer, ctx: ToolContext): void {
  server.registerResource(
    'sandbox',
    new ResourceTemplate('sandbox://{id}', {
      list: async () => {
        const page = await ctx.client.sandboxes.listPage({
          metadata: { ...MCP_MARKER },
          limit: ctx.limits.listSandboxes,
        });
        return {
          resources: page.sandboxes.map((s) => ({
            uri: sandboxUri(s.id),
            name: s.name,
            title: `${s.name} (${s.image}, ${s.state})`,
            description: `Sandbox ${s.id} from ${s.image}, ${s.state}; stops at ${s.info.stopAt}`,
            mimeType: 'application/json',
          })),
        };
      },
    }),
    {
      title: 'Sandbox',
      description:
        'A sandbox created through MCP: its current state as JSON (id, name, image, state, stop time, network, metadata).',
      mimeType: 'application/json',
    },
    async (uri, vars): Promise<ReadResourceResult> => {
      const raw = String(Array.isArray(vars.id) ? vars.id[0] : vars.id);
      let id: string | undefined;
      try {
        id = decodeURIComponent(raw);
      } catch {
        id = undefined;
      }
      // The id becomes a URL segment of the inner call: "." or ".." would be resolved away.
      if (id === undefined || !SANDBOX_ID_RE.test(id))
        throw new McpError(
          RESOURCE_NOT_FOUND,
          `Resource ${uri.href} not found: not a sandbox id (sbx_ + 20 characters)`,
        );
      try {
        const sb = await ctx.client.sandboxes.get(id);
        return {
          contents: [
            {
              uri: uri.href,
              mimeType: 'application/json',
              text: JSON.stringify(
                { ...summary(sb.info), publicAccessUrlTemplate: sb.info.publicAccessUrlTemplate },
                null,
                2,
              ),
            },
          ],
        };
      } catch (e) {
        const f = failureOf(e);
        if (f.kind === 'not_found')
          throw new McpError(RESOURCE_NOT_FOUND, `Resource ${uri.href} not found: ${f.message}`, f);
        throw new McpError(-32603, `${f.kind}: ${f.message}`, f);
      }
    },
  );
}
