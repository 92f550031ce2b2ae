/**
 * The sandbox tools: create_sandbox, list_sandboxes, get_port_url, pause_sandbox,
 * resume_sandbox, delete_sandbox. Every call goes through the sandboxd SDK, so the API
 * decides authorization, limits and validation.
 */
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { Sandbox, type SandboxCreateParams, type SandboxInfo } from '@sandboxd/sdk';
import { z } from 'zod';
import type { ToolContext } from './context.js';
import { guarded, ok } from './results.js';

/** The metadata key and value every sandbox created through MCP carries. */
export const MCP_MARKER = { createdBy: 'mcp' } as const;

/**
 * The shape of a sandbox id (`SANDBOX_ID_PATTERN` of @sandboxd/protocol: `sbx_` + 20
 * lowercase base32 characters). An id becomes a segment of the inner API URL: encoding it
 * is not enough, since "." and ".." are left as they are and then resolved by the URL
 * ("." reached `GET /api/v1/sandboxes/`, the list), so anything else is refused first.
 */
export const SANDBOX_ID_RE = /^sbx_[a-z2-7]{20}$/;

/** The id argument every per-sandbox tool takes. */
export const sandboxId = z
  .string()
  .regex(SANDBOX_ID_RE, 'sandbox_id must be a sandbox id: "sbx_" followed by 20 characters a-z and 2-7')
  .describe('The sandbox id, as create_sandbox or list_sandboxes returned it (sbx_ followed by 20 characters).');

/** What a model needs to know about a sandbox. */
export function summary(sb: SandboxInfo): Record<string, unknown> {
  return {
    id: sb.id,
    name: sb.name,
    image: sb.image,
    state: sb.state,
    createdAt: sb.createdAt,
    stopAt: sb.stopAt,
    ...(sb.expiresAt ? { expiresAt: sb.expiresAt } : {}),
    onTimeout: sb.onTimeout,
    isolation: sb.isolation,
    egress: sb.network?.egress ?? 'the plan default',
    metadata: sb.metadata,
    createdByMcp: sb.metadata?.createdBy === MCP_MARKER.createdBy,
  };
}

/** One line per sandbox state: what it means for the next call. */
function stateNote(sb: SandboxInfo): string {
  switch (sb.state) {
    case 'started':
      return `It runs until ${sb.stopAt}, then it ${sb.onTimeout === 'pause' ? 'pauses' : 'stops'}.`;
    case 'paused':
      return `It is paused (processes frozen); resume_sandbox continues it${sb.expiresAt ? `; deleted at ${sb.expiresAt} unless resumed` : ''}.`;
    case 'stopped':
      return `It is stopped (files kept, no processes)${sb.expiresAt ? `; deleted at ${sb.expiresAt}` : ''}.`;
    default:
      return 'It is in state error: delete it and create another.';
  }
}

/** Registers the sandbox tools on `server`. */
export function registerSandboxTools(server: McpServer, ctx: ToolContext): void {
  server.registerTool(
    'create_sandbox',
    {
      title: 'Create a sandbox',
      description: [
        'Starts a new isolated Linux sandbox (a container with its own filesystem, processes and network) and returns its id, which every other tool takes.',
        `Use it before running commands or code. Images: "local/debian:bookworm" (Debian 12 with Python 3, the default here: "${ctx.defaultImage}"), "local/busybox:latest" (tiny), "local/code-interpreter:latest" (needed by run_code: Python, JavaScript, R kernels with pandas and matplotlib), or an image of the account (snapshots/<name>, templates/<name>:<tag>).`,
        'The sandbox stops by itself after lifetime_ms (default 10 minutes; at most what the plan allows); the account is charged for the time it runs. Delete it with delete_sandbox when done.',
        'Returns the id, name, state, stop time and network setting. Fails with kind "concurrency" when the plan allows no more running sandboxes, "tokens" when the account cannot pay for the lifetime, "template_not_found" for an unknown image.',
      ].join(' '),
      inputSchema: {
        image: z.string().min(1).max(512).optional().describe(`Image to start from (default "${ctx.defaultImage}").`),
        lifetime_ms: z
          .number()
          .int()
          .min(0)
          .optional()
          .describe(
            'How long the sandbox lives, in milliseconds (default 600000 = 10 minutes; at most the plan lifetime).',
          ),
        env: z
          .record(z.string(), z.string())
          .optional()
          .describe('Environment variables every command in the sandbox sees, e.g. {"DEBUG": "1"}.'),
        egress: z
          .union([z.enum(['none', 'internet']), z.array(z.string().min(1).max(256)).max(64)])
          .optional()
          .describe(
            'What the sandbox may reach outside: "none" (nothing), "internet" (every public address), or a list of allowed rules: domains ("pypi.org"), wildcards ("*.github.com"), IPv4 CIDRs. Default: the plan default.',
          ),
        isolation: z
          .enum(['container', 'gvisor'])
          .optional()
          .describe(
            'Isolation tier: "container" (default unless the plan says otherwise) or "gvisor" (a user-space kernel between the sandbox and the host: stronger isolation, slower system calls). Refused when the plan or the host does not offer it.',
          ),
        on_timeout: z
          .enum(['stop', 'pause'])
          .optional()
          .describe(
            'What happens at the end of the lifetime: "stop" (default; files kept) or "pause" (memory kept too).',
          ),
        metadata: z
          .record(z.string(), z.string())
          .optional()
          .describe('Labels of your own (string to string). createdBy is always "mcp" for sandboxes made here.'),
      },
      annotations: { title: 'Create a sandbox', readOnlyHint: false, destructiveHint: false, openWorldHint: false },
    },
    (args) =>
      guarded(async () => {
        const params: SandboxCreateParams = {
          image: args.image ?? ctx.defaultImage,
          timeoutMs: args.lifetime_ms,
          env: args.env,
          onTimeout: args.on_timeout,
          ...(args.isolation ? { isolation: args.isolation } : {}),
          metadata: { ...(args.metadata ?? {}), ...MCP_MARKER },
          network:
            args.egress === undefined
              ? undefined
              : { egress: Array.isArray(args.egress) ? { allow: args.egress } : args.egress },
        };
        const sb = await ctx.client.sandboxes.create(params);
        ctx.onSandboxesChanged();
        return ok(
          `Created sandbox ${sb.id} (${sb.name}) from ${sb.image}. ${stateNote(sb.info)}\nUse "${sb.id}" as sandbox_id in run_command, run_code, read_file, write_file, list_directory, get_port_url.\n${JSON.stringify(summary(sb.info), null, 2)}`,
          { sandbox: summary(sb.info) },
        );
      }),
  );

  server.registerTool(
    'list_sandboxes',
    {
      title: 'List sandboxes',
      description: `Lists the sandboxes of this account, newest first (at most ${ctx.limits.listSandboxes}), with id, name, image, state and stop time. Use it to find a sandbox id again or to see what is still running (and costing). created_by_mcp_only keeps those made through this MCP server.`,
      inputSchema: {
        state: z.enum(['started', 'paused', 'stopped', 'error']).optional().describe('Only sandboxes in this state.'),
        created_by_mcp_only: z.boolean().optional().describe('Only sandboxes created through MCP (default false).'),
      },
      annotations: { title: 'List sandboxes', readOnlyHint: true, openWorldHint: false },
    },
    (args) =>
      guarded(async () => {
        const page = await ctx.client.sandboxes.listPage({
          state: args.state,
          metadata: args.created_by_mcp_only ? { ...MCP_MARKER } : undefined,
          limit: ctx.limits.listSandboxes,
        });
        const rows = page.sandboxes.map((s) => summary(s.info));
        const more = page.nextCursor ? `\n(only the newest ${rows.length} are shown)` : '';
        const lines = page.sandboxes.map(
          (s) =>
            `${s.id}  ${s.name}  ${s.image}  ${s.state}  stopAt=${s.info.stopAt}${s.metadata?.createdBy === 'mcp' ? '  [mcp]' : ''}`,
        );
        return ok(rows.length ? `${rows.length} sandbox(es):\n${lines.join('\n')}${more}` : 'No sandboxes.', {
          sandboxes: rows,
          more: Boolean(page.nextCursor),
        });
      }),
  );

  server.registerTool(
    'get_port_url',
    {
      title: 'Public URL of a port',
      description:
        'Returns the public URL at which a port of the sandbox is reachable from outside (HTTP and WebSocket), e.g. to open a web app or API you started in it. Start the server first with run_command (background: true), listening on 0.0.0.0 and that port. The URL works while the sandbox runs; anyone with it can reach the port unless the sandbox was made with private ports.',
      inputSchema: {
        sandbox_id: sandboxId,
        port: z.number().int().min(1).max(65535).describe('The port the server in the sandbox listens on, e.g. 8000.'),
      },
      annotations: { title: 'Public URL of a port', readOnlyHint: true, openWorldHint: false },
    },
    (args) =>
      guarded(async () => {
        const sb = await ctx.client.sandboxes.get(args.sandbox_id);
        const url = sb.publicUrl(args.port);
        const note = sb.state === 'started' ? '' : ` The sandbox is ${sb.state}: the URL answers once it runs again.`;
        return ok(`${url}\nPort ${args.port} of ${sb.id} is reachable at this URL.${note}`, {
          url,
          port: args.port,
          sandboxId: sb.id,
          state: sb.state,
        });
      }),
  );

  server.registerTool(
    'pause_sandbox',
    {
      title: 'Pause a sandbox',
      description:
        'Freezes a running sandbox: every process stops where it is, memory and files are kept, and it no longer costs tokens or counts as running. resume_sandbox continues it. Use it to keep work for later. Fails with kind "conflict" when the sandbox is not running.',
      inputSchema: { sandbox_id: sandboxId },
      annotations: { title: 'Pause a sandbox', readOnlyHint: false, destructiveHint: false, idempotentHint: false },
    },
    (args) =>
      guarded(async () => {
        const sb = await (await ctx.client.sandboxes.get(args.sandbox_id)).pause();
        ctx.onSandboxesChanged();
        return ok(`Paused ${sb.id}. ${stateNote(sb.info)}`, { sandbox: summary(sb.info) });
      }),
  );

  server.registerTool(
    'resume_sandbox',
    {
      title: 'Resume a sandbox',
      description:
        'Continues a paused sandbox: its processes go on where they were. lifetime_ms is its new lifetime from now (default 10 minutes). Fails with kind "conflict" when it is not paused, "concurrency" when the plan allows no more running sandboxes.',
      inputSchema: {
        sandbox_id: sandboxId,
        lifetime_ms: z
          .number()
          .int()
          .min(0)
          .optional()
          .describe('New lifetime from now, in milliseconds (default 600000).'),
      },
      annotations: { title: 'Resume a sandbox', readOnlyHint: false, destructiveHint: false, idempotentHint: false },
    },
    (args) =>
      guarded(async () => {
        const sb = await (await ctx.client.sandboxes.get(args.sandbox_id)).resume(
          args.lifetime_ms === undefined ? {} : { timeoutMs: args.lifetime_ms },
        );
        ctx.onSandboxesChanged();
        return ok(`Resumed ${sb.id}. ${stateNote(sb.info)}`, { sandbox: summary(sb.info) });
      }),
  );

  server.registerTool(
    'delete_sandbox',
    {
      title: 'Delete a sandbox',
      description:
        'Deletes a sandbox for good: its processes are killed and its files removed (named volumes are kept). Use it when the work in the sandbox is done, so it stops costing. Cannot be undone.',
      inputSchema: { sandbox_id: sandboxId },
      annotations: { title: 'Delete a sandbox', readOnlyHint: false, destructiveHint: true, idempotentHint: true },
    },
    (args) =>
      guarded(async () => {
        await Sandbox.delete(args.sandbox_id, ctx.client);
        ctx.onSandboxesChanged();
        return ok(`Deleted ${args.sandbox_id}.`, { deleted: args.sandbox_id });
      }),
  );
}
